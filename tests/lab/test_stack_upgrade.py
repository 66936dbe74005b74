"""Issue 45's "done when", end to end on tests/lab/stack.yaml: a cluster that mixes an HGX H100 node and two PCIe V100
nodes, each with an InfiniBand HCA near GPU0, pinned as one stack (provision_driver: the driver, the container
toolkit and DCGM by version; fabric manager and nvidia-peermem auto). One `apply --reboot` converges it at one lab
driver and verify passes; one more moves it to the other driver: fabric manager (the HGX node only) at the new
driver's exact version, the toolkit at its unchanged pin, a CDI spec that names the new driver, nvidia-peermem
loaded after the boot where NCCL wants it, and DCGM's CUDA flavour of the new driver follow. A PCIe node whose next
kernel has no NVIDIA module is held back: its driver's move is refused at plan time with the fixing command while
the others move, so it keeps working on the driver it runs (no Driver/library version mismatch) with none of the new
driver's packages; the command, run as said, and a second `apply --reboot` move it too, and verify passes on the
whole cluster."""

from __future__ import annotations

from pathlib import Path

import pytest
from builders.stacklab import driver_moved, fabric_states, findings, on, run_fixing_command, verdicts

from provision.capabilities.containers.facts import CDI_RUN, TOOLKIT_PACKAGES, parse_spec
from provision.capabilities.topology.gdr import DMA_BUF_KERNEL, MODULES_LOAD, kernel_at_least
from provision_lab.layout import DRIVER_VERSION, OTHER_DRIVER_VERSION, driver_package
from provision_lab.stack_kernels import NEXT_KERNEL, module_package

pytestmark = pytest.mark.lab

SPEC = Path(__file__).parent / "stack.yaml"  # the lab loads OTHER_DRIVER_VERSION, the version its inventory pins
HGX, PCIE = "lab-hgx-1", ["lab-pcie-1", "lab-pcie-2"]
NODES = [HGX, *PCIE]
STRANDED = PCIE[0]  # between the others in the rollout's order: they go on around its refusal
TOOLKIT = "1.17.8-1provision1"
PEERMEM = "/sys/module/nvidia_peermem"
NEXT_BOOT = "the_next_boot_kernel_has_the_nvidia_module"
# DCGM 4's flavour is the pinned driver's CUDA major: 13 from 580 on, 12 before; a V100 (before Turing) keeps 12.
DCGM = {(HGX, DRIVER_VERSION): "cuda13", (HGX, OTHER_DRIVER_VERSION): "cuda12",
        **{(node, driver): "cuda12" for node in PCIE for driver in (DRIVER_VERSION, OTHER_DRIVER_VERSION)}}


@pytest.fixture(scope="module")
def stack_lab(lab_alone):
    with lab_alone("stack", lambda cluster: cluster.lab("up", "--like", str(SPEC))) as cluster:
        yield cluster


def loaded_driver(lab, node: str) -> str:
    return on(lab, node, "nvidia-smi --query-gpu=driver_version --format=csv,noheader").split()[0]


def installed(lab, node: str, *patterns: str) -> list[str]:
    """'name version held' of the installed packages matching these dpkg patterns (those removed left out)."""
    quoted = " ".join(f"'{p}'" for p in patterns)
    rows = [line.split() for line in on(lab, node, f"dpkg-query -W -f '${{Package}} ${{Version}} ${{db:Status-Abbrev}}"
                                                  f"\\n' {quoted} 2>/dev/null || true").splitlines()]
    return sorted(f"{row[0]} {row[1]} {'held' if row[2][0] == 'h' else 'not held'}"
                  for row in rows if len(row) == 3 and row[2][1:2] == "i")


def assert_stack_at(lab, node: str, driver: str) -> None:
    """What the node really holds: the driver loaded, its stack at the pins, each piece following that driver."""
    branch = driver.split(".")[0]
    assert loaded_driver(lab, node) == driver
    assert installed(lab, node, *TOOLKIT_PACKAGES) == sorted(f"{name} {TOOLKIT} held" for name in TOOLKIT_PACKAGES)
    assert parse_spec(CDI_RUN, on(lab, node, f"cat {CDI_RUN}")).drivers == [driver]
    assert installed(lab, node, "datacenter-gpu-manager-4-*") == [
        "datacenter-gpu-manager-4-core 1:4.2.3-1provision1 held",
        f"datacenter-gpu-manager-4-{DCGM[node, driver]} 1:4.2.3-1provision1 held"]
    assert "Hostengine build info:\nVersion : 4.2.3" in on(lab, node, "dcgmi -v")
    fabric = installed(lab, node, "nvidia-fabricmanager*", "libnvidia-nscq*")
    if node == HGX:
        assert fabric == [f"libnvidia-nscq-{branch} {driver}-1provision1 held",
                          f"nvidia-fabricmanager-{branch} {driver}-1provision1 held"]
        assert fabric_states(lab, node) == {"Completed"}  # the boot that loaded the driver started fabric manager
    else:
        assert fabric == [] and fabric_states(lab, node) == {"[N/A]"}  # no NVSwitch: none installed
    # peermem auto: the V100s' proprietary module needs it; the H100's open modules give NCCL DMA-BUF instead where
    # the kernel (the lab's: this machine's) is 5.12 or later
    dma_buf = node == HGX and bool(kernel_at_least(on(lab, node, "uname -r").strip(), DMA_BUF_KERNEL))
    assert (lab.ssh(node, f"test -e {MODULES_LOAD}").returncode == 0) is not dma_buf
    if not dma_buf:
        assert on(lab, node, f"cat {MODULES_LOAD}").splitlines()[-1] == "nvidia-peermem"  # every boot loads it
        assert on(lab, node, f"cat {PEERMEM}/version").strip()  # and the boot did


def assert_verify_passes(lab, inventory: Path | None = None) -> None:
    code, verdict = verdicts(lab, inventory)
    assert {host: v["findings"] for host, v in verdict.items() if v["findings"]} == {} and code == 0


def test_one_apply_reboot_converges_the_mixed_cluster_and_verify_passes(stack_lab, tmp_path_factory):
    lab = stack_lab
    assert fabric_states(lab, HGX) == {"In Progress"}  # no fabric manager yet: the HGX GPUs wait
    converge = driver_moved(lab, DRIVER_VERSION, tmp_path_factory.mktemp("stack") / "converge.yaml")
    code, result = lab.apply("--reboot", inventory=converge)
    assert code == 0, result
    assert {r["host"]: r["status"] for r in result["reboots"]} == dict.fromkeys(NODES, "rebooted")
    for node in NODES:
        assert_stack_at(lab, node, DRIVER_VERSION)
    assert_verify_passes(lab, converge)


def refused_move(result, node: str) -> str:
    """The message of the node's nvidia-driver task, refused at plan time (its one item)."""
    (task,) = [t for h in result["hosts"] if h["host"] == node for t in h["tasks"] if t["name"] == "nvidia-driver"]
    (item,) = task["items"]
    assert task["status"] == item["status"] == "failed" and item["message"].startswith("refused: "), task
    return item["message"]


def test_one_apply_reboot_moves_the_stack_and_holds_back_the_node_that_would_boot_without_its_module(stack_lab):
    """To the lab's own inventory (OTHER_DRIVER_VERSION): the stranded node keeps the driver it runs, working, and
    is given none of the new driver's packages; the command its refusal names, then a second apply, move it."""
    lab = stack_lab
    lab.lab("fault", STRANDED, "kernel-without-module")
    try:
        _, verdict = verdicts(lab)  # found before any reboot, on that node alone
        assert {node: len(findings(verdict[node], NEXT_BOOT)) for node in NODES} == {**dict.fromkeys(NODES, 0),
                                                                                    STRANDED: 1}
        _, result = lab.apply("--reboot")  # the refused move is a failed task: not a clean exit
        assert {r["host"]: r["status"] for r in result["reboots"]} == {HGX: "rebooted", PCIE[1]: "rebooted"}, \
            result["reboots"]  # the stranded node waits for no reboot: nothing was installed to load
        refused = refused_move(result, STRANDED)
        assert f"the host keeps driver {DRIVER_VERSION}" in refused and f"next boot's kernel {NEXT_KERNEL}" in refused
        for node in (HGX, PCIE[1]):
            assert_stack_at(lab, node, OTHER_DRIVER_VERSION)
        # it works on the driver it runs: nvidia-smi answers (no Driver/library version mismatch), its stack unmoved
        assert_stack_at(lab, STRANDED, DRIVER_VERSION)
        assert "mismatch" not in on(lab, STRANDED, "nvidia-smi")
        assert installed(lab, STRANDED, "nvidia-driver-*") == [f"{driver_package(DRIVER_VERSION)} {DRIVER_VERSION}"
                                                               "-1provision1 held"]
        branch = DRIVER_VERSION.split(".")[0]  # the module package of the driver the node keeps

        assert run_fixing_command(lab, STRANDED, refused) == f"apt-get install {module_package(branch)}"
        assert sorted(on(lab, STRANDED, f"ls /lib/modules/{NEXT_KERNEL}/kernel/nvidia-{branch}").split()) == [
            "nvidia-peermem.ko", "nvidia.ko"]
        code, result = lab.apply("--reboot")
        assert code == 0 and [(r["host"], r["status"]) for r in result["reboots"]] == [(STRANDED, "rebooted")], result
        for node in NODES:
            assert_stack_at(lab, node, OTHER_DRIVER_VERSION)
        moved = OTHER_DRIVER_VERSION.split(".")[0]  # its prebuilt module came in the driver's own apt-get
        assert installed(lab, STRANDED, "linux-modules-nvidia-*") == [
            f"{module_package(moved)} {OTHER_DRIVER_VERSION}-1provision1 not held"]
        assert_verify_passes(lab)
    finally:
        lab.lab("fault", STRANDED, "clear")
