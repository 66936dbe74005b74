"""Reboot safety and GPUDirect RDMA end to end on two V100 nodes with an InfiniBand HCA each (tests/lab/kernels.yaml).

`peermem-unloaded` (rmmod nvidia_peermem) is one finding, GPUDirect RDMA's, with apply's change filed under it;
`apply` loads it (the node's modprobe, provision_lab/rdma.py) and verify passes. `kernel-without-module` (a newer
kernel installed without nvidia.ko, provision_lab/stack_kernels.py) is one finding on that node before any reboot;
`apply --reboot` of a driver upgrade refuses that node's reboot with the reason and the fixing command and reboots
the other; the command, run as said, clears it, and the next `apply --reboot` takes that node too."""

from __future__ import annotations

from pathlib import Path

import pytest
from builders.stacklab import driver_moved, findings, on, run_fixing_command, verdicts

pytestmark = pytest.mark.lab

SPEC = Path(__file__).parent / "kernels.yaml"
NODES = ["lab-gpu-1", "lab-gpu-2"]
KERNEL = "6.1.0-40-amd64"  # provision_lab/stack_kernels.py NEXT_KERNEL
GDR = "gpudirect_rdma_is_available_where_nccl_uses_it"
PEERMEM_TASK = "as_intended[nvidia-peermem]"
NEXT_BOOT = "the_next_boot_kernel_has_the_nvidia_module"


@pytest.fixture(scope="module")
def kernels_lab(lab_alone):
    with lab_alone("kernels", lambda cluster: cluster.lab("up", "--like", str(SPEC))) as cluster:
        code, result = cluster.apply()
        assert code == 0, result
        yield cluster


def verify(lab, inventory: Path | None = None) -> dict[str, dict]:
    return verdicts(lab, inventory)[1]


def test_peermem_unloaded_is_one_finding_and_apply_loads_it(kernels_lab):
    lab, node = kernels_lab, NODES[0]
    assert findings(verify(lab)[node], GDR, PEERMEM_TASK) == []
    lab.lab("fault", node, "peermem-unloaded")
    try:
        (finding,) = findings(verify(lab)[node], GDR, PEERMEM_TASK)
        assert finding["check"] == GDR and finding["found"].startswith("no peer-memory module loaded")
        assert [c["check"] for c in finding["consequences"]] == [PEERMEM_TASK]
        code, result = lab.apply("--limit", node)
        assert code == 0, result
        assert on(lab, node, "cat /sys/module/nvidia_peermem/version").strip()
        assert "nvidia-peermem" in on(lab, node, "cat /etc/modules-load.d/provision-nvidia-peermem.conf")
        assert findings(verify(lab)[node], GDR, PEERMEM_TASK) == []
    finally:
        lab.lab("fault", node, "clear")


def test_a_kernel_without_the_module_is_found_its_reboot_refused_and_the_named_command_clears_it(kernels_lab, tmp_path):
    lab, stranded = kernels_lab, NODES[1]
    lab.lab("fault", stranded, "kernel-without-module")
    try:
        verdicts = verify(lab)
        (finding,) = findings(verdicts[stranded], NEXT_BOOT)
        assert KERNEL in finding["expected"] and f"linux-modules-nvidia-580-{KERNEL}" in finding["next_step"]
        assert findings(verdicts[NODES[0]], NEXT_BOOT) == []

        # the other lab driver: both nodes wait for a reboot
        upgrade = driver_moved(lab, "570.195.03", tmp_path / "inventory.yaml")
        _, result = lab.apply("--reboot", inventory=upgrade)
        outcomes = {r["host"]: r for r in result["reboots"]}
        assert outcomes[NODES[0]]["status"] == "rebooted", result["reboots"]
        refused = outcomes[stranded]
        assert refused["status"] == "refused" and f"next boot's kernel {KERNEL}" in refused["message"]
        fixed = run_fixing_command(lab, stranded, refused["message"])
        assert fixed.startswith("apt-get install linux-modules-nvidia-570-"), fixed
        code, result = lab.apply("--reboot", inventory=upgrade)
        assert code == 0 and [r["status"] for r in result["reboots"]] == ["rebooted"], result
        assert findings(verify(lab, upgrade)[stranded], NEXT_BOOT) == []
    finally:
        lab.lab("fault", stranded, "clear")
