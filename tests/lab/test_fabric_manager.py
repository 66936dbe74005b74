"""Fabric manager with the driver, end to end on an HGX H100 node and a PCIe one (tests/lab/fabric.yaml): the HGX
node's GPUs wait "In Progress" in the NVSwitch fabric; `apply --reboot` installs nvidia-fabricmanager and
libnvidia-nscq at the driver's exact version with it, held and enabled, and the reboot starts it (a lab node runs no
systemd): the GPUs register and verify passes; the PCIe node gets none. The `fabric-manager-version` fault (an
unpinned upgrade) is one finding on the HGX node, also after the reboot at which that fabric manager aborts, and
the finding's next step, run as it says, repairs it. A driver move takes fabric manager with it."""

from __future__ import annotations

import shlex
import time
from pathlib import Path

import pytest
from builders.stacklab import driver_moved, fabric_states, on, verdicts

pytestmark = pytest.mark.lab

SPEC = Path(__file__).parent / "fabric.yaml"
HGX, PCIE = "lab-hgx-1", "lab-pcie-1"
DRIVER = "580.159.04"
OTHER_DRIVER = "570.195.03"
LAB_SOURCE = "/etc/apt/sources.list.d/provision-lab.list"  # the lab's own: the inventory's repository serves instead
FM_PACKAGES = ("nvidia-fabricmanager-580", "libnvidia-nscq-580")
VERSION_CHECK = "fabric_manager_is_the_drivers_version"
MISMATCH = ("fabric manager NVIDIA GPU driver interface version 580.126.09 don't match with driver version "
            f"{DRIVER}. Please update with matching NVIDIA driver package.")


@pytest.fixture(scope="module")
def fabric_lab(lab_alone):
    def up(cluster):
        cluster.lab("up", "--like", str(SPEC))
        for node in (HGX, PCIE):
            on(cluster, node, f"rm -f {LAB_SOURCE}")

    with lab_alone("fabric", up) as cluster:
        yield cluster


def logged(lab, node: str, line: str, seconds: float = 30.0) -> bool:
    """The node's boot log (its units' output) has the line, within seconds: the unit runs in the background."""
    log = lab.node_file(node, "/var/log/provision-lab-boot.log")
    deadline = time.monotonic() + seconds
    while line not in log.read_text():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.5)
    return True


def fabric_findings(verdict: dict) -> list[dict]:
    """The host's findings whose check is the fabric manager's or the fabric's (causes, with their consequences)."""
    ours = ("fabric_manager", "nvswitch_fabric", "as_intended[fabric-manager]")
    return [f for f in verdict["findings"] if f["check"].startswith(ours)]


def test_apply_installs_fabric_manager_with_the_driver_where_nvswitches_are_and_verify_passes(fabric_lab):
    lab = fabric_lab
    assert fabric_states(lab, HGX) == {"In Progress"} and fabric_states(lab, PCIE) == {"[N/A]"}
    code, result = lab.apply("--reboot")
    assert code == 0, result
    held = on(lab, HGX, "apt-mark showhold").split()
    versions = on(lab, HGX, f"dpkg-query -W -f '${{Package}} ${{Version}}\\n' {' '.join(FM_PACKAGES)}")
    assert set(FM_PACKAGES) <= set(held)
    assert sorted(versions.splitlines()) == sorted(f"{name} {DRIVER}-1provision1" for name in FM_PACKAGES)
    assert on(lab, HGX, "systemctl is-enabled nvidia-fabricmanager.service").strip() == "enabled"
    assert fabric_states(lab, HGX) == {"Completed"}  # the reboot started it
    assert lab.ssh(PCIE, "dpkg-query -W nvidia-fabricmanager-580").returncode != 0  # no NVSwitch: left alone
    _, judged = verdicts(lab)
    assert fabric_findings(judged[HGX]) == [] and fabric_findings(judged[PCIE]) == []
    assert VERSION_CHECK not in " ".join(judged[PCIE]["passed"])  # skipped there: no NVSwitch


def test_fabric_manager_at_another_version_is_one_finding_whose_next_step_repairs_it(fabric_lab):
    lab = fabric_lab
    lab.lab("fault", HGX, "fabric-manager-version")
    try:
        _, judged = verdicts(lab)
        (finding,) = fabric_findings(judged[HGX])  # the running one still registers: the version alone
        assert finding["check"] == VERSION_CHECK and "580.126.09" in finding["found"]

        lab.lab("reboot", HGX)  # the next boot: it aborts on the mismatch and the GPUs wait
        assert logged(lab, HGX, MISMATCH)
        assert fabric_states(lab, HGX) == {"In Progress"}
        _, judged = verdicts(lab)
        (finding,) = fabric_findings(judged[HGX])  # one cause: the GPUs In Progress, apply's change follow from it
        assert finding["check"] == VERSION_CHECK
        assert {c["check"] for c in finding["consequences"]} == {"nvswitch_fabric_is_ready", "as_intended[fabric-manager]"}
        assert any(s.startswith("fabric_manager_is_running") for s in judged[HGX]["skipped"])  # not judged then

        argv = shlex.split(finding["next_step"])
        assert argv[:2] == ["provision", "apply"]
        fixed = lab.provision(*argv[1:])
        assert fixed.returncode == 0, fixed.stdout + fixed.stderr
        assert fabric_states(lab, HGX) == {"Completed"}
        _, judged = verdicts(lab)
        assert fabric_findings(judged[HGX]) == []
    finally:
        lab.lab("fault", HGX, "clear")


def test_a_driver_move_takes_fabric_manager_with_it_in_the_same_rollout(fabric_lab, tmp_path):
    """580 -> 570 with one `apply --reboot`: the old branch's fabric manager out, 570's installed before the reboot
    that loads the 570 driver, and started by it."""
    lab = fabric_lab
    moved = driver_moved(lab, OTHER_DRIVER, tmp_path / "inventory.yaml")
    code, result = lab.apply("--reboot", inventory=moved)
    assert code == 0, result
    versions = on(lab, HGX, "dpkg-query -W -f '${Package} ${Version} ${db:Status-Abbrev}\\n' "
                            "'nvidia-fabricmanager*' 'libnvidia-nscq*' | grep -v ' un'").splitlines()
    assert sorted(versions) == [f"libnvidia-nscq-570 {OTHER_DRIVER}-1provision1 hi ",
                                f"nvidia-fabricmanager-570 {OTHER_DRIVER}-1provision1 hi "]
    assert on(lab, HGX, "nvidia-smi --query-gpu=driver_version --format=csv,noheader").split()[0] == OTHER_DRIVER
    assert fabric_states(lab, HGX) == {"Completed"}
    _, judged = verdicts(lab, moved)
    assert fabric_findings(judged[HGX]) == []
