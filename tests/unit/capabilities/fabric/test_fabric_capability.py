"""NVIDIA Fabric Manager with the driver (provision/capabilities/fabric/): the facts it reads, the packages it names per
source, the fabric-manager task's plan (installed at the driver's exact version, held, enabled, started only once
that driver is loaded), its pending reboot where no systemd runs, and its checks, one finding per cause."""

from __future__ import annotations

import subprocess
from dataclasses import replace
from types import SimpleNamespace

import pytest

from builders.checks import checked_node, verdict
from builders.facts import facts
from builders.gpus import gpus
from builders.hosts import host
from provision.capabilities.driver.facts import DriverFacts
from provision.capabilities.driver.settings import DriverSettings
from provision.capabilities.capability import WARNING
from provision.capabilities.fabric import checks, packages, shown
from provision.capabilities.fabric.facts import FABRIC_SNIPPET, FabricFacts, parse_fabric
from provision.capabilities.fabric.tasks import FabricManager
from provision.capabilities.system.daemons import DaemonProcess
from provision.core.facts import SystemFacts
from provision.verify import Node, run_checks

DRIVER = "580.159.04"
FM = ("nvidia-fabricmanager-580", "libnvidia-nscq-580")
LAB_DRIVER = {"version": DRIVER, "source": "local", "repository": "deb [trusted=yes] file:/srv/provision-lab/apt ./",
              "packages": ["nvidia-driver-{branch}"]}


def hgx(fm: str | None = DRIVER, *, loaded: str | None = DRIVER, held: bool = True, unit: str = "enabled",
        running: bool = True, systemd: bool = True, nvswitch: bool = True, fabric_state: str = "Completed"):
    """An 8x H100 HGX node (or, nvswitch False, the same GPUs on no fabric) with fabric manager at `fm` (None: not
    installed), driver DRIVER installed and `loaded` loaded."""
    installed = {name: f"{fm}-1provision1" for name in FM} if fm else {}
    fabric = FabricFacts(nvswitches=[str(i) for i in range(4)] if nvswitch else [], unit=unit if fm else "",
                         packages=installed, held=list(installed) if held else [])
    state = fabric_state if nvswitch else "N/A"
    return facts(gpus=gpus(8, "H100", fabric_state=state, fabric_status="Success" if state == "Completed" else None),
                 systemd=systemd, system=SystemFacts(uid=0, os_id="debian", systemd_running=systemd),
                 packages={**dict.fromkeys(FM), **installed, "nvidia-driver-580": f"{DRIVER}-1provision1"},
                 held=list(installed) if held else [],
                 driver=DriverFacts(loaded=loaded, packages={"nvidia-driver-580": f"{DRIVER}-1provision1"}),
                 fabric=fabric, daemons={"nv-fabricmanage": [DaemonProcess(99, "root", 0.0)] if running else []})


def plan(found, **driver):
    return FabricManager().plan(host("hgx-1", provision_driver={**LAB_DRIVER, **driver}), found)


# --- facts ----------------------------------------------------------------------------------------------------


def test_the_snippet_is_posix_sh():
    assert subprocess.run(["sh", "-n", "-c", FABRIC_SNIPPET]).returncode == 0


def test_facts_read_the_switches_the_unit_and_the_packages_held():
    found = parse_fabric("nvswitch 0\nnvswitch 1\nswitch-pci 07:00.0 10de:22a3\nunit enabled\n"
                         "pkg nvidia-fabricmanager-580 580.159.04-1 hi\npkg libnvidia-nscq-580 580.159.04-1 ii\n"
                         "pkg nvidia-fabricmanager-570 570.195.03-1 rc\n")
    assert found.has_nvswitch and found.nvswitches == ["0", "1"] and found.unit == "enabled"
    assert found.packages == {"nvidia-fabricmanager-580": "580.159.04-1", "libnvidia-nscq-580": "580.159.04-1"}
    assert found.held == ["nvidia-fabricmanager-580"]
    assert found.seen() == "2 in /proc/driver/nvidia-nvswitch/devices; 1 on the PCI bus (10de:22a3)"
    assert not parse_fabric("unit \n").has_nvswitch and parse_fabric("unit \n").unit == ""


# --- packages ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("source", "branch", "os_id", "names"), [
    ("distro", "580", "ubuntu", ["nvidia-fabricmanager-580", "libnvidia-nscq-580"]),
    ("cuda", "570", "ubuntu", ["nvidia-fabricmanager-570", "libnvidia-nscq-570"]),
    ("cuda", "580", "debian", ["nvidia-fabricmanager", "libnvidia-nscq"]),  # NVIDIA's names from R580 on
    ("local", "580", "debian", ["nvidia-fabricmanager-580", "libnvidia-nscq-580"]),
])
def test_package_names_per_source_and_branch(source, branch, os_id, names):
    extra = {"repository": "deb [trusted=yes] file:/srv/x ./"} if source == "local" else {}
    assert packages.package_names(DriverSettings(branch=branch, source=source, **extra), os_id) == names


def test_debians_archive_has_no_fabric_manager():
    with pytest.raises(ValueError, match="source: cuda"):
        packages.package_names(DriverSettings(version=DRIVER), "debian")


# --- the task -----------------------------------------------------------------------------------------------------


def test_a_fresh_hgx_node_gets_fabric_manager_at_the_drivers_exact_version_held_enabled_and_started():
    made = plan(hgx(None, running=False, unit=""))
    assert not made.skipped and not made.problems
    install, enable, start = made.changes
    apt = [" ".join(c) for c in install.commands]
    assert any(f"nvidia-fabricmanager-580={DRIVER}-*" in c and f"libnvidia-nscq-580={DRIVER}-*" in c for c in apt)
    assert apt[-1] == "apt-mark hold nvidia-fabricmanager-580 libnvidia-nscq-580"
    assert install.cause == checks.VERSION_CHECK
    assert enable.commands == [["systemctl", "enable", "nvidia-fabricmanager.service"]]
    assert start.commands == [["systemctl", "restart", "nvidia-fabricmanager.service"]]


def test_before_the_reboot_that_loads_its_driver_it_is_installed_and_enabled_but_not_started():
    made = plan(hgx(None, loaded="570.195.03", running=False, unit=""))
    assert [c.what for c in made.changes] == ["fabric manager packages", "unit"]  # the driver's reboot starts it


def test_a_node_as_intended_plans_nothing():
    made = plan(hgx())
    assert not made.changes and {i.what for i in made.unchanged} >= {"fabric manager package", "unit", "service"}


def test_another_version_is_replaced_with_the_drivers_and_restarted():
    install, start = plan(hgx("580.126.09")).changes
    assert "--allow-change-held-packages" in install.commands[0] and "580.126.09" in install.before
    assert start.before == "running"  # the running one is the old binary


def test_without_systemd_it_is_not_started_and_the_reboot_is_pending():
    found = hgx(running=False, systemd=False)
    assert not plan(found).changes
    node = host("hgx-1", provision_driver=LAB_DRIVER)
    assert packages.reboot_pending(node, found) == [
        f"nvidia-fabricmanager {DRIVER} is enabled and not running, and no systemd runs here to start it: it starts "
        "at the next boot"]
    assert packages.reboot_pending(node, hgx(systemd=False)) == []  # running
    assert packages.reboot_pending(node, hgx(running=False)) == []  # systemd: the task starts it


def test_auto_leaves_a_board_without_nvswitch_alone_and_true_is_refused_there_with_the_reason():
    assert plan(hgx(None, nvswitch=False)).skipped.startswith("no NVSwitch on this host")
    refused = plan(hgx(None, nvswitch=False), fabric_manager=True)
    assert refused.problems and "has no NVSwitch" in refused.problems[0] and not refused.changes
    assert plan(hgx(None), fabric_manager=False).skipped == "provision_driver.fabric_manager is false: left alone"


def test_a_driver_move_takes_the_held_fabric_manager_of_the_old_branch_out_first():
    found = hgx(None, running=False)
    found.fabric.packages = {"nvidia-fabricmanager-570": "570.195.03-1provision1", "libnvidia-nscq-570": "570.195.03-1"}
    found.fabric.held = ["nvidia-fabricmanager-570"]
    out, install, enable, start = plan(found).changes
    assert out.commands[0][-3:] == ["--allow-change-held-packages", "libnvidia-nscq-570-", "nvidia-fabricmanager-570-"]
    assert f"nvidia-fabricmanager-580={DRIVER}-*" in install.commands[0] and start.what == "service"


def test_a_branch_alone_follows_the_version_the_driver_packages_hold():
    made = plan(hgx(None, running=False, unit=""), version=None, branch="580")
    assert f"nvidia-fabricmanager-580={DRIVER}-*" in made.changes[0].commands[0]


# --- the checks -----------------------------------------------------------------------------------------------------


def node(found) -> Node:
    return checked_node(found, "hgx-1", tasks=[FabricManager()], inventory_path="lab.yaml", provision_driver=LAB_DRIVER)


def driver_package(name: str) -> SimpleNamespace:
    """What testinfra says of a driver package (the driver's check asks): DRIVER installed."""
    return SimpleNamespace(is_installed=True, version=f"{DRIVER}-1provision1")


def test_fabric_manager_at_another_version_than_the_loaded_driver_fails_with_a_next_step():
    failed = verdict(checks.check_fabric_manager_is_the_drivers_version, node(hgx("580.126.09", running=False)))
    (finding,) = failed.findings
    assert finding.found == "libnvidia-nscq-580 580.126.09, nvidia-fabricmanager-580 580.126.09"
    assert finding.fix == "provision apply lab.yaml --limit hgx-1 --reboot"
    assert "not the driver's version" in verdict(checks.check_fabric_manager_is_running,
                                                 node(hgx("580.126.09", running=False)))


def test_a_stopped_fabric_manager_fails_and_its_gpus_in_progress_follow_from_it():
    found = hgx(running=False, fabric_state="In Progress")
    stopped = verdict(checks.check_fabric_manager_is_running, node(found)).findings[0]
    assert stopped.found == "not running (its unit: enabled)" and "journalctl" in stopped.fix
    waiting = verdict(checks.check_nvswitch_fabric_is_ready, node(found)).findings[0]
    assert waiting.because[0] == checks.RUNNING_CHECK and waiting.found.startswith("GPU0 00000000:01:00.0 In Progress")


def test_the_fabric_check_judges_the_gpus_fabric_state_and_status():
    fabric = checks.check_nvswitch_fabric_is_ready
    assert verdict(fabric, node(hgx(nvswitch=False))).startswith("skip: no NVSwitch fabric")
    assert verdict(fabric, node(hgx())) is None
    broken = hgx()
    broken.nvidia.gpus[0].fabric_status = "Insufficient Resources"
    assert verdict(fabric, node(broken)).findings[0].found == "GPU0 00000000:01:00.0 Insufficient Resources"


def test_checks_leave_a_board_without_nvswitch_and_a_node_without_the_package_to_others():
    for check in (checks.check_fabric_manager_is_the_drivers_version, checks.check_fabric_manager_is_running):
        assert verdict(check, node(hgx(nvswitch=False))).startswith("skip: no NVSwitch")
        assert "as_intended[fabric-manager]" in verdict(check, node(hgx(None)))


def test_fabric_manager_at_another_version_is_one_finding_on_the_node():
    """The fault the lab drills: FM's version differs, it exited at boot, the GPUs stay In Progress, and apply would
    reinstall it: one cause, the rest under it."""
    found = hgx("580.126.09", running=False, fabric_state="In Progress")
    found.nvidia.exit_code = 0
    result = run_checks([replace(node(found), host=SimpleNamespace(package=driver_package))])["hgx-1"]
    causes = {cause.failure.check: {c.check for c in cause.consequences} for cause in result.findings}
    assert set(causes) == {"fabric_manager_is_the_drivers_version"}, causes
    assert causes["fabric_manager_is_the_drivers_version"] >= {"nvswitch_fabric_is_ready",
                                                               "as_intended[fabric-manager]"}


# --- provision facts ------------------------------------------------------------------------------------------------


def test_facts_show_the_switches_the_packages_and_a_version_that_is_not_the_drivers():
    (line,) = shown.lines(None, hgx())
    assert line.text == ("fabric: NVSwitches: 4 in /proc/driver/nvidia-nvswitch/devices; fabric manager: "
                         f"libnvidia-nscq-580 {DRIVER}-1provision1 (held), nvidia-fabricmanager-580 {DRIVER}-1provision1 "
                         "(held); unit enabled; running")
    (wrong,) = shown.lines(None, hgx("580.126.09", running=False))
    assert wrong.parts[-1] == (f"not the loaded driver's version ({DRIVER}): 580.126.09", WARNING)
    assert shown.lines(None, hgx(None, nvswitch=False)) == []  # nothing of it here
