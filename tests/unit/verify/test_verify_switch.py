"""Checks switched off for a group or a host (`provision_verify: {skip: [...]}`, GCM's killswitch): refined level by
level like every block, each name one of verify's checks (did-you-mean for a typo), and a check switched off
reported as skipped with the reason, never run and never passed."""

from __future__ import annotations

import textwrap
from types import SimpleNamespace

import pytest

from builders.facts import facts
from builders.hosts import host
from provision.capabilities.gpu.tasks import PowerLimit
from provision.core.errors import InputError
from provision.inventory.load import load_inventory
from provision.commands import verify as verify_command
from provision.commands.run import Target
from provision.verify import Node, run_checks
from provision.verify.switch import check_names, switched_off, unknown_names

INVENTORY = """\
all:
  vars:
    provision_verify: {skip: [fans_report_no_failure]}
  children:
    quirky:
      vars:
        provision_verify: {skip: [power_supplies_report_no_failure, as_intended]}
      hosts:
        node-2: {ansible_host: 192.0.2.2}
  hosts:
    node-1: {ansible_host: 192.0.2.1}
    node-3: {ansible_host: 192.0.2.3, provision_verify: {skip: []}}
"""


def node(skip: list[str], reached: object = None, **blocks) -> Node:
    """The rig with this provision_verify.skip (and these other blocks), reached through `reached`."""
    inventory = host("rig", provision_verify={"skip": skip}, **blocks)
    return Node("rig", inventory, facts(), [PowerLimit()], host=reached, inventory_path="basement.yaml")


def test_a_group_switches_checks_off_and_a_deeper_level_replaces_its_list(tmp_path):
    (tmp_path / "inventory.yaml").write_text(textwrap.dedent(INVENTORY))
    hosts = load_inventory(str(tmp_path / "inventory.yaml")).hosts
    assert hosts["node-1"].settings.verify.skip == ["fans_report_no_failure"]
    assert hosts["node-2"].settings.verify.skip == ["power_supplies_report_no_failure", "as_intended"]
    assert hosts["node-3"].settings.verify.skip == []  # switched on again for this one host


def test_a_check_named_is_off_and_as_intended_alone_is_every_tasks():
    quirky = node(["power_supplies_report_no_failure", "as_intended"])
    assert switched_off(quirky, "power_supplies_report_no_failure") == \
        "switched off for this host by provision_verify.skip in the inventory"
    assert switched_off(quirky, "as_intended[gpu-power-limit]")
    assert switched_off(quirky, "fans_report_no_failure") == ""
    one_task = node(["as_intended[gpu-clocks]"])
    assert switched_off(one_task, "as_intended[gpu-clocks]") and not switched_off(one_task, "as_intended[gpu-power-limit]")
    assert switched_off(node([]), "as_intended[gpu-clocks]") == ""


def test_every_name_is_one_of_verifys_checks_and_a_typo_says_which_was_meant():
    known = check_names()
    assert "fans_report_no_failure" in known and "as_intended" in known and "check_no_gpu_is_lost" not in known
    rig = node(["fans_report_no_failures", "as_intended[gpu-power-limt]", "as_intended[gpu-power-limit]"])
    problems = unknown_names([rig.inventory, rig.inventory], rig.tasks, "basement.yaml")  # each name once
    assert [(p.key, p.message, p.hint) for p in problems] == [
        ("provision_verify.skip", "'fans_report_no_failures' is no check of verify",
         "did you mean 'fans_report_no_failure'?"),
        ("provision_verify.skip", "'as_intended[gpu-power-limt]' is no check of verify",
         "did you mean 'as_intended[gpu-power-limit]'?")]
    assert problems[0].file == "basement.yaml" and problems[0].where == "host rig"


def test_a_name_that_is_no_check_is_refused_before_any_host_is_read(monkeypatch):
    rig = node(["fans_report_no_failures"])
    monkeypatch.setattr(verify_command, "_verify", lambda *args: pytest.fail("a host was read"))
    target = Target("basement.yaml", [rig.inventory], [rig.inventory])
    with pytest.raises(InputError, match="fans_report_no_failures"):
        verify_command.verify(target, rig.tasks, options=None, ssh=None)


def test_a_check_switched_off_is_reported_skipped_with_the_reason_and_never_runs():
    asked = []

    class NodeHost:
        def package(self, name):
            asked.append(name)
            return SimpleNamespace(is_installed=False, version=None)

    rig = node(["driver_loaded_is_the_pinned_version", "gpu_count_is_as_the_inventory_says"], NodeHost(),
               provision_driver={"version": "580.159.04"})
    verdict = run_checks([rig])["rig"]
    assert asked == []  # the driver's check would have asked the node for its packages
    assert "driver_loaded_is_the_pinned_version: switched off for this host by provision_verify.skip in the " \
           "inventory" in verdict.skipped
    assert "gpu_count_is_as_the_inventory_says: switched off for this host by provision_verify.skip in the " \
           "inventory" in verdict.skipped  # not its own reason (the inventory sets no count): it never ran
    assert "as_intended[gpu-power-limit]: provision_gpu.power_limit not set" in verdict.skipped  # the others run
    assert verdict.status == "pass" and not verdict.passed and not verdict.failures
