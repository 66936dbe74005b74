"""The rules across hosts: the capabilities declare them (registry.HOST_RULES), the inventory runs every one on
the hosts it built without naming a capability, and each is a pure function of the built hosts."""

from __future__ import annotations

import textwrap

import pytest

from provision.capabilities.launcher.rules import launcher_group_holds_host
from provision.capabilities.registry import HOST_RULES
from provision.capabilities.slurm.rules import controller_is_a_host, controller_is_set
from provision.core.errors import InputError, Problem
from provision.inventory import build
from provision.inventory.load import load_inventory
from provision.inventory.model import Built, Written

TEXT = """
    all:
      children:
        blades:
          hosts:
            b1: {ansible_host: 192.0.2.11}
            b2: {ansible_host: 192.0.2.12}
          vars: {provision_slurm: {controller: h1}, provision_launcher: {group: blades}}
        head:
          hosts:
            h1: {ansible_host: 192.0.2.1, provision_slurm: {role: controller, controller: h1}}
    """


def built(tmp_path, text=TEXT):
    path = tmp_path / "inventory.yaml"
    path.write_text(textwrap.dedent(text))
    inventory = load_inventory(str(path))
    return Built(inventory.hosts, inventory.groups, []), str(path)


def test_the_launchers_and_slurms_rules_are_the_registrys():
    assert {launcher_group_holds_host, controller_is_a_host, controller_is_set} <= set(HOST_RULES)


def test_the_inventory_runs_every_rule_the_registry_lists(tmp_path, monkeypatch):
    seen = []

    def rule(hosts: Built) -> list[Problem]:
        seen.append(sorted(hosts.hosts))
        return [Problem("f", "host b1", "provision_x", "a rule of no capability the inventory knows")]

    monkeypatch.setattr(build, "HOST_RULES", (*HOST_RULES, rule))
    with pytest.raises(InputError) as caught:
        built(tmp_path)
    assert seen == [["b1", "b2", "h1"]]
    assert [str(p) for p in caught.value.problems] == ["f: host b1: provision_x: a rule of no capability the "
                                                       "inventory knows"]


def test_each_rule_passes_a_cluster_that_holds_together(tmp_path):
    hosts, _ = built(tmp_path)
    assert [rule(hosts) for rule in HOST_RULES] == [[] for _ in HOST_RULES]


def test_a_launcher_group_the_host_is_not_in_names_the_file_that_first_wrote_it(tmp_path):
    hosts, path = built(tmp_path)
    h1 = hosts.hosts["h1"]
    launcher = hosts.hosts["b1"].settings.launcher
    h1.settings = h1.settings.model_copy(update={"launcher": launcher})
    assert [str(p) for p in launcher_group_holds_host(hosts)] == [
        f"{path}: host h1: provision_launcher.group: 'blades' is a group this host is not in (hint: its groups: "
        "all, head)"]


def test_a_controller_is_checked_where_it_is_written_and_on_each_host(tmp_path):
    hosts, path = built(tmp_path)
    written = Built(hosts.hosts, hosts.groups, [Written("g.yml", "group blades", {"provision_slurm": {"controller":
                                                                                                 "h9"}})])
    assert [str(p) for p in controller_is_a_host(written)] == [
        "g.yml: group blades: provision_slurm.controller: 'h9' is not a host of this inventory (hint: name one "
        "of its hosts)"]
    h1 = hosts.hosts["h1"]
    h1.settings = h1.settings.model_copy(update={"slurm": None})
    assert [str(p) for p in controller_is_set(hosts)] == [
        f"{path}: host h1: provision_slurm: is not set, but {name} names this host as its Slurm controller (hint: "
        "give the controller provision_slurm too (role: controller))" for name in ("b1", "b2")]


def test_a_refusal_the_registry_lists_refuses_that_host_alone(tmp_path, monkeypatch):
    """HOST_REFUSALS (a group name a host's files would carry, capabilities/*/rules.py): the host's own runs are
    refused, the others' go on; the inventory names no capability to run them."""
    from provision.capabilities.launcher.rules import group_is_one_word
    from provision.capabilities.registry import HOST_REFUSALS
    from provision.capabilities.slurm.rules import partition_is_one_word

    assert {group_is_one_word, partition_is_one_word} <= set(HOST_REFUSALS)

    def refusal(host) -> list[Problem]:
        return [Problem("f", host.where, "provision_x", "refused by no capability the inventory knows")] \
            if host.name == "b2" else []

    monkeypatch.setattr(build, "HOST_REFUSALS", (*HOST_REFUSALS, refusal))
    hosts, _ = built(tmp_path)
    assert [str(p) for p in hosts.hosts["b2"].refused] == ["f: host b2: provision_x: refused by no capability the "
                                                          "inventory knows"]
    assert hosts.hosts["b1"].refused == [] and hosts.hosts["h1"].refused == []
