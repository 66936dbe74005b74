"""The lab's apt repository on a real node: apt-get and dpkg over SSH, the lab's file: source the only one.

Each test that installs puts the node back as `lab up` made it (packages purged, the simulator's
files and state restored), so the other lab tests, in any order, see the nodes they expect.
"""

from __future__ import annotations

import pytest

from provision_lab.layout import (APT_REPO_IN_NODE, NODE_NVML_LIBRARY, NODE_SIM_CONFIG, NODE_SIM_ZIPAPP,
                                  NVIDIA_PERSISTENCED, NVIDIA_SMI)
from provision_lab.rootfs import APT_SOURCES

pytestmark = pytest.mark.lab

NODE = "lab-rtx3090-2"  # one RTX 3090, no nvidia-persistenced of its own
APT = "DEBIAN_FRONTEND=noninteractive apt-get -q -y"
INSTALLED = ("nvidia-driver-570", "nvidia-driver-580", "munge", "slurmd")
SIM_FILES = (NVIDIA_SMI, NVIDIA_PERSISTENCED, NODE_SIM_ZIPAPP, NODE_NVML_LIBRARY, NODE_SIM_CONFIG,
             "/var/lib/nvidia-sim/state.json")
DRIVER_QUERY = "nvidia-smi --query-gpu=driver_version --format=csv,noheader"


@pytest.fixture
def node(lab):
    """NODE, restored afterwards: what the tests install purged, the simulator as the lab wrote it."""
    before = {}
    for path in SIM_FILES:
        file = lab.node_file(NODE, path)
        before[path] = (file.read_bytes(), file.stat().st_mode) if file.exists() else None
    reported = ok(lab, NODE, DRIVER_QUERY)
    yield NODE
    ok(lab, NODE, f"{APT} purge {' '.join(INSTALLED)} && {APT} autoremove --purge")
    for path, saved in before.items():
        file = lab.node_file(NODE, path)
        file.unlink(missing_ok=True)
        if saved:
            file.parent.mkdir(parents=True, exist_ok=True)
            file.write_bytes(saved[0])
            file.chmod(saved[1])
    lab.lab("reboot", NODE)  # the driver the restored files install is the one loaded again
    assert ok(lab, NODE, DRIVER_QUERY) == reported


def ok(lab, node: str, command: str) -> str:
    proc = lab.ssh(node, command)
    assert proc.returncode == 0, f"{command}: {proc.stdout}{proc.stderr}"
    return proc.stdout


def test_the_lab_repository_is_the_only_source_and_read_only(lab):
    assert ok(lab, NODE, "cat /etc/apt/sources.list.d/*.list") == APT_SOURCES
    assert ok(lab, NODE, "grep -rhv '^#' /etc/apt/sources.list /etc/apt/sources.list.d/ | grep -c deb") == "1\n"
    update = ok(lab, NODE, "apt-get -q update 2>&1")
    assert f"file:{APT_REPO_IN_NODE}" in update and "Err:" not in update and "W:" not in update
    policy = ok(lab, NODE, "apt-cache policy nvidia-driver-570 nvidia-driver-580 munge slurmd slurmctld slurm-client")
    assert "Candidate: (none)" not in policy and policy.count("Candidate:") == 6
    assert lab.ssh(NODE, f"touch {APT_REPO_IN_NODE}/x").returncode != 0  # one repository shared by all nodes


def mismatch(lab, node: str) -> str:
    """nvidia-smi on a node whose installed driver is not the loaded one: its message (it exits 18)."""
    proc = lab.ssh(node, "nvidia-smi")
    assert proc.returncode == 18, proc.stdout + proc.stderr
    return proc.stdout


def test_driver_package_loads_its_version_at_the_next_boot_then_upgrades(lab, node):
    ok(lab, node, f"apt-get -q update && {APT} install nvidia-driver-570")  # over the lab's 580: a downgrade
    assert mismatch(lab, node) == ("Failed to initialize NVML: Driver/library version mismatch\n"
                                   "NVML library version: 570.195\n")
    lab.lab("reboot", node)
    assert ok(lab, node, DRIVER_QUERY) == "570.195.03\n"
    assert "CUDA Version: 12.8" in ok(lab, node, "nvidia-smi")

    ok(lab, node, f"{APT} install nvidia-driver-580")  # Conflicts: nvidia-driver: apt swaps them
    assert "NVML library version: 580.159" in mismatch(lab, node)
    lab.lab("reboot", node)
    assert ok(lab, node, DRIVER_QUERY) == "580.159.04\n"
    installed = "dpkg-query -W -f '${Package} ${db:Status-Status}\\n' | grep '^nvidia-driver.* installed$'"
    assert ok(lab, node, installed) == "nvidia-driver-580 installed\n"

    # The unit's ExecStart, as a boot would run it: the daemon starts as its own user's tool, then stops.
    unit = lab.node_file(node, "/lib/systemd/system/nvidia-persistenced.service").read_text()
    start = next(line.split("=", 1)[1] for line in unit.splitlines() if line.startswith("ExecStart="))
    ok(lab, node, start)
    try:
        assert ok(lab, node, "pgrep -x nvidia-persiste")
        assert ok(lab, node, "nvidia-smi --query-gpu=persistence_mode --format=csv,noheader") == "Disabled\n"
    finally:
        ok(lab, node, "kill $(cat /var/run/nvidia-persistenced/nvidia-persistenced.pid)")


def test_munge_and_slurmd_install_from_debian(lab, node):
    ok(lab, node, f"apt-get -q update && {APT} install munge slurmd")
    assert ok(lab, node, "munge --version").startswith("munge-0.5")
    assert "Status: install ok installed" in ok(lab, node, "dpkg -s munge slurmd")
    assert ok(lab, node, "slurmd -V").startswith("slurm")
