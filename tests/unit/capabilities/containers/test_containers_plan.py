"""The container tasks and checks, from facts: the toolkit pinned and held, the CDI spec generated for the loaded
driver, the installed engines configured; each cause one verify finding (as_intended's filed under it)."""

from __future__ import annotations

import textwrap

from builders.checks import checked_node, verdict
from builders.hosts import host

from provision.capabilities.capability import WARNING
from provision.capabilities.containers import checks, shown
from provision.capabilities.containers.facts import (
    CDI_ETC,
    CDI_RUN,
    DOCKER_CONFIG,
    TOOLKIT_PACKAGES,
    CdiSpecFile,
    ContainersFacts,
)
from provision.capabilities.containers.tasks import SPEC_CHECK, TOOLKIT_CHECK, CdiSpec, ContainerRuntime, ContainerToolkit
from provision.capabilities.driver.facts import DriverFacts
from provision.capabilities.host import HostFacts
from provision.commands.playbook import load_playbook
from provision.core.batches import Planned, joins
from provision.core.facts import SystemFacts
from provision.core.plan import Change
from provision.core.resources import playbook_path, templates_dir
from provision.inventory.load import load_inventory
from provision.verify.as_intended import check_as_intended
from provision.verify.model import Node

LOADED = "580.95.05"
DRIVER = {"version": LOADED, "container_toolkit": "1.17.8"}
ALL_PINNED = {name: "1.17.8-1" for name in TOOLKIT_PACKAGES}


def facts(*, specs: dict[str, list[str]] | None = None, engines: tuple[str, ...] = (), unconfigured: tuple[str, ...] = (),
          packages: dict[str, str] | None = None, loaded: str | None = LOADED, ctk: bool = True) -> HostFacts:
    packages = ALL_PINNED if packages is None else packages
    return HostFacts(
        system=SystemFacts(os_id="ubuntu", systemd_running=True), driver=DriverFacts(loaded=loaded),
        packages=dict(packages), held=sorted(packages),
        containers=ContainersFacts(
            packages=dict(packages), held=sorted(packages), ctk=ctk,
            specs={path: CdiSpecFile(path, drivers) for path, drivers in (specs or {}).items()}, engines=list(engines),
            runtime_problems={e: f"{DOCKER_CONFIG} names no nvidia runtime" if e in unconfigured else "" for e in engines}))


def node(found: HostFacts, **driver: object) -> Node:
    return checked_node(found, "gpu-1", inventory_path="site.yaml", provision_driver={**DRIVER, **driver})


# --- the toolkit ---------------------------------------------------------------------------------------------


def test_the_toolkit_is_installed_at_its_pin_in_one_apt_get_and_held():
    plan = ContainerToolkit().plan(node(facts(packages={})).inventory, facts(packages={}))
    (change,) = plan.changes
    assert change.commands[0][-4:] == [f"{name}=1.17.8-*" for name in TOOLKIT_PACKAGES]
    assert change.commands[1] == ["apt-mark", "hold", *TOOLKIT_PACKAGES]
    assert change.cause == TOOLKIT_CHECK and change.verify(facts()) is None
    assert "not at 1.17.8" in change.verify(facts(packages={}))


def test_the_toolkit_at_its_pin_and_held_is_left_alone_and_without_the_setting_skipped():
    assert ContainerToolkit().plan(node(facts()).inventory, facts()).changes == []
    plan = ContainerToolkit().plan(host("gpu-1", provision_driver={"version": LOADED}), facts())
    assert plan.skipped == "provision_driver.container_toolkit is not set"


def test_verify_says_which_package_is_off_the_pin():
    older = {**ALL_PINNED, "libnvidia-container1": "1.17.7-1"}
    failed = verdict(checks.check_container_toolkit_is_the_pinned_version, node(facts(packages=older)))
    assert failed.found == "not at 1.17.8: libnvidia-container1 1.17.7-1"
    assert failed.fix == "provision apply site.yaml --limit gpu-1"
    assert verdict(checks.check_container_toolkit_is_the_pinned_version, node(facts())) is None


# --- the CDI spec ---------------------------------------------------------------------------------------------


def test_a_spec_of_another_driver_is_generated_again_at_its_own_path():
    found = facts(specs={CDI_ETC: ["570.195.03"], CDI_RUN: [LOADED]})
    (change,) = CdiSpec().plan(node(found).inventory, found).changes
    assert (change.target, change.before, change.after) == (CDI_ETC, "driver 570.195.03", f"driver {LOADED}")
    assert change.commands == [["nvidia-ctk", "cdi", "generate", f"--output={CDI_ETC}"]]
    assert change.verify(facts(specs={CDI_ETC: [LOADED]})) is None


def test_no_spec_at_all_is_generated_where_nvidia_documents_it():
    (change,) = CdiSpec().plan(node(facts()).inventory, facts()).changes
    assert (change.target, change.before) == (CDI_RUN, "missing")
    assert CdiSpec().plan(node(facts()).inventory, facts(specs={CDI_ETC: [LOADED]})).changes == []


def test_no_spec_is_generated_before_the_driver_loads_nor_without_nvidia_ctk():
    assert "no NVIDIA module is loaded" in CdiSpec().plan(node(facts()).inventory, facts(loaded=None)).skipped
    upgraded = facts(loaded="570.195.03")  # 580.95.05 installed, 570 loaded until the reboot
    upgraded.packages["nvidia-driver-580"] = upgraded.driver.packages["nvidia-driver-580"] = "580.95.05-0ubuntu1"
    inventory = node(upgraded, packages=["nvidia-driver-{branch}"]).inventory
    assert "the driver waits for a reboot (driver 580.95.05 is installed" in CdiSpec().plan(inventory, upgraded).skipped
    plan = CdiSpec().plan(node(facts()).inventory, facts(ctk=False))
    assert (plan.failed_check, plan.changes) == (TOOLKIT_CHECK, [])


def test_a_stale_spec_is_one_finding_with_the_command_that_fixes_it():
    stale = node(facts(specs={CDI_RUN: ["570.195.03"]}))
    failed = verdict(checks.check_cdi_spec_names_the_loaded_driver, stale)
    assert len(failed.findings) == 1
    assert failed.found.startswith(f"{CDI_RUN}: driver 570.195.03 (GPU containers fail")
    assert failed.fix.endswith(f"(or on the node: sudo nvidia-ctk cdi generate --output={CDI_RUN})")
    # what apply would change is filed under that finding, not reported again on its own
    as_intended = verdict(check_as_intended, stale, CdiSpec())
    assert [f.because for f in as_intended.findings] == [(SPEC_CHECK,)]
    assert verdict(checks.check_cdi_spec_names_the_loaded_driver, node(facts(specs={CDI_RUN: [LOADED]}))) is None


# --- the engines ------------------------------------------------------------------------------------------------


def test_only_the_installed_engines_are_configured_and_restarted():
    assert "provision installs no container engine" in \
        ContainerRuntime().plan(node(facts()).inventory, facts()).skipped
    found = facts(engines=("docker", "containerd"), unconfigured=("docker",))
    (change,) = ContainerRuntime().plan(node(found).inventory, found).changes
    assert change.commands == [["nvidia-ctk", "runtime", "configure", "--runtime=docker"],
                               ["systemctl", "restart", "docker"]]
    failed = verdict(checks.check_container_engines_use_the_nvidia_runtime, node(found))
    assert [f.about for f in failed.findings] == [("docker",)]
    assert "sudo nvidia-ctk runtime configure --runtime=docker && sudo systemctl restart docker" in failed.fix


# --- batches ------------------------------------------------------------------------------------------------------


def test_the_spec_and_the_runtime_join_the_gpu_settings_after_the_toolkit(tmp_path):
    """The toolkit's packages are read again before the spec and the runtime are planned; those two, which change
    different files, go to the host in one command with the GPU settings that follow."""
    (tmp_path / "inventory.yaml").write_text(textwrap.dedent(f"""\
        all:
          hosts:
            node-1: {{ansible_host: 192.0.2.1, provision_driver: {{version: "{LOADED}", container_toolkit: "1.17.8"}},
                     provision_gpu: {{persistence: true}}}}
        """))
    inventory_host = load_inventory(str(tmp_path / "inventory.yaml")).hosts["node-1"]
    tasks = [t for t in load_playbook(playbook_path("site"), templates_dir())
             if t.name in ("container-toolkit", "cdi-spec", "container-runtime", "gpu-persistence")]
    toolkit, spec, runtime, gpu = tasks
    assert not joins(spec, inventory_host, [Planned(toolkit, [], [Change("host", "it", "", "")])])
    assert joins(runtime, inventory_host, [Planned(spec, [], [Change("host", "it", "", "")])])
    assert joins(gpu, inventory_host, [Planned(spec, [], [Change("host", "it", "", "")]),
                                       Planned(runtime, [], [Change("host", "it", "", "")])])


# --- provision facts ------------------------------------------------------------------------------------------------


def test_facts_shows_the_toolkit_each_spec_and_engine_and_warns_of_a_stale_spec():
    found = facts(specs={CDI_ETC: ["570.195.03"], CDI_RUN: [LOADED]}, engines=("docker",), unconfigured=("docker",))
    (line,) = shown.lines(None, found)
    assert line.text == (f"containers: toolkit 1.17.8 (held); CDI {CDI_ETC}: driver 570.195.03; CDI {CDI_RUN}: "
                         f"driver {LOADED}; docker: {DOCKER_CONFIG} names no nvidia runtime")
    assert [text for text, tone in line.parts if tone == WARNING] == [
        f"; CDI {CDI_ETC}: driver 570.195.03", f"; docker: {DOCKER_CONFIG} names no nvidia runtime"]
    assert shown.lines(None, facts(packages={}, ctk=False)) == []
