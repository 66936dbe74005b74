"""The lab's recovery faults on a node with two H100s (tests/lab/recovery.yaml), each as the driver shows it and
ended as it ends: gpu-reset-required by `nvidia-smi -r` once nothing holds the GPU (refused with the driver's words
while a process or nvidia-persistenced does) or by a reboot; gpu-needs-reboot by a reboot only; gpu-failing-card
by nothing but `clear` (the card replaced): it is back after every reboot, with the same serial. On an NVSwitch
board (tests/lab/recovery-hgx.yaml) a running fabric manager holds every GPU, and the GPUs a reset took wait
"In Progress" until it runs again."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from builders.stacklab import fabric_states, on

from provision_lab import stack_fabric
from provision_lab.simzip import sim_wrapper

pytestmark = pytest.mark.lab

SPEC = Path(__file__).parent / "recovery.yaml"
NODE = "lab-recovery-1"
# The simulator as the driver package's nvidia-persistenced (the node has no package before an apply).
SIMULATOR = "/usr/lib/provision-lab/gpusim"
IN_USE = "The following GPUs could not be reset:\n  GPU {bus}: In use by another client\n"


@pytest.fixture(scope="module")
def recovery_lab(lab_alone):
    with lab_alone("recovery", lambda cluster: cluster.lab("up", "--like", str(SPEC))) as cluster:
        yield cluster


@pytest.fixture
def node(recovery_lab):
    """The lab, every fault cleared after the test."""
    yield recovery_lab
    recovery_lab.lab("fault", NODE, "clear")


def query(lab, fields: str) -> list[list[str]]:
    return [row.split(", ") for row in on(lab, NODE, f"nvidia-smi --query-gpu={fields} --format=csv,noheader")
            .splitlines()]


def actions(lab) -> list[str]:
    return [row[0] for row in query(lab, "gpu_recovery_action")]


def xid154_lines(lab) -> list[str]:
    """This boot's Xid 154 lines, without dmesg's stamps."""
    return [line.split("] ", 1)[1] for line in on(lab, NODE, "dmesg").splitlines() if "): 154, " in line]


def faults(lab) -> list[str]:
    return next(n["faults"] for n in lab.status()["nodes"] if n["name"] == NODE)


def test_a_reset_required_gpu_is_reset_once_nothing_holds_it(node):
    node.lab("fault", NODE, "gpu-reset-required", "--gpu", "1")
    bus = query(node, "pci.bus_id")[1][0]
    assert actions(node) == ["None", "Reset"]
    assert xid154_lines(node) == [f"NVRM: Xid (PCI:0000:{bus[9:14].lower()}): 154, GPU recovery action changed "
                                  "from 0x0 (None) to 0x1 (GPU Reset Required)"]
    node.lab("fault", NODE, "gpu-process", "--gpu", "1")  # a job still on it
    refused = node.ssh(NODE, "nvidia-smi -r -i 1")
    assert (refused.returncode, refused.stdout.startswith(IN_USE.format(bus=bus))) == (255, True), refused.stdout
    on(node, NODE, "kill $(nvidia-smi --query-compute-apps=pid --format=csv,noheader)")  # the job ended
    on(node, NODE, f"{SIMULATOR} nvidia-persistenced")  # the daemon holds every GPU it keeps persistent
    refused = node.ssh(NODE, "nvidia-smi -r -i 1")
    assert (refused.returncode, refused.stdout.startswith(IN_USE.format(bus=bus))) == (255, True), refused.stdout
    on(node, NODE, "kill $(cat /var/run/nvidia-persistenced/nvidia-persistenced.pid)")
    assert on(node, NODE, "sleep 1; nvidia-smi -r -i 1") == f"GPU {bus} was successfully reset.\n"
    assert actions(node) == ["None", "None"]


def test_a_reboot_ends_a_reset_required_state_too(node):
    node.lab("fault", NODE, "gpu-reset-required", "--gpu", "0")
    node.lab("reboot", NODE)
    assert actions(node) == ["None", "None"] and xid154_lines(node) == []
    assert faults(node) == []


def test_a_gpu_that_needs_a_reboot_is_not_mended_by_a_reset(node):
    node.lab("fault", NODE, "gpu-needs-reboot", "--gpu", "0")
    assert actions(node) == ["Reboot", "None"]
    assert xid154_lines(node)[-1].endswith("from 0x0 (None) to 0x2 (Node Reboot Required)")
    on(node, NODE, "nvidia-smi -r -i 0")
    assert actions(node) == ["Reboot", "None"]
    node.lab("reboot", NODE)
    assert actions(node) == ["None", "None"] and faults(node) == []


def test_a_failing_card_fails_again_after_every_reboot_until_it_is_replaced(node):
    serials = [row[0] for row in query(node, "serial")]
    node.lab("fault", NODE, "gpu-failing-card", "--gpu", "1")
    for _ in range(2):
        node.lab("reboot", NODE)
        assert actions(node) == ["None", "Reboot"]
        assert [row[0] for row in query(node, "serial")] == serials
        assert len(xid154_lines(node)) == 1  # this boot's, again
        assert faults(node) == ["gpu-failing-card GPU 1"]
    node.lab("fault", NODE, "clear")
    assert actions(node) == ["None", "None"]


# --- on an NVSwitch board: the fabric manager holds every GPU; a reset takes them out of the fabric ---------------

HGX_SPEC = Path(__file__).parent / "recovery-hgx.yaml"
HGX = "lab-recovery-hgx-1"
START_FM = f"setsid {stack_fabric.FABRIC_MANAGER} -c {stack_fabric.FABRIC_MANAGER_CONFIG} </dev/null >/dev/null 2>&1 &"


@pytest.fixture(scope="module")
def hgx_lab(lab_alone):
    """The board with its fabric manager as the package installs it (its program and its version: the driver's)."""
    with lab_alone("recovery-hgx", lambda cluster: cluster.lab("up", "--like", str(HGX_SPEC))) as cluster:
        program = cluster.node_file(HGX, stack_fabric.FABRIC_MANAGER)
        program.write_text(sim_wrapper(stack_fabric.FABRIC_MANAGER))
        program.chmod(0o755)
        driver = on(cluster, HGX, "nvidia-smi --query-gpu=driver_version --format=csv,noheader").split()[0]
        cluster.node_file(HGX, stack_fabric.FABRIC_MANAGER_VERSION_FILE).write_text(driver + "\n")
        yield cluster


def test_a_reset_waits_for_the_fabric_manager_and_leaves_the_fabric_until_it_is_back(hgx_lab):
    on(hgx_lab, HGX, START_FM)
    assert wait_for(lambda: fabric_states(hgx_lab, HGX) == {"Completed"}), fabric_states(hgx_lab, HGX)
    hgx_lab.lab("fault", HGX, "gpu-reset-required", "--gpu", "3")
    refused = hgx_lab.ssh(HGX, "nvidia-smi -r")
    assert refused.returncode == 255 and "8 devices are currently being used" in refused.stdout, refused.stdout
    on(hgx_lab, HGX, "pkill -x nv-fabricmanage; sleep 1")  # FM guide: stop it, reset, start it again
    done = on(hgx_lab, HGX, "nvidia-smi -r").splitlines()
    assert len(done) == 9 and done[-1] == "All done.", done
    assert set(hgx_lab.ssh(HGX, "nvidia-smi --query-gpu=gpu_recovery_action --format=csv,noheader").stdout
               .split()) == {"None"}
    assert fabric_states(hgx_lab, HGX) == {"In Progress"}
    on(hgx_lab, HGX, START_FM)
    assert wait_for(lambda: fabric_states(hgx_lab, HGX) == {"Completed"}), fabric_states(hgx_lab, HGX)
    on(hgx_lab, HGX, "pkill -x nv-fabricmanage")


def wait_for(condition, seconds: float = 20) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.5)
    return True
