"""Reboot safety and GPUDirect RDMA end to end on two V100 nodes with an InfiniBand HCA each (tests/lab/kernels.yaml).

`peermem-unloaded` (rmmod nvidia_peermem) is one finding, GPUDirect RDMA's, with apply's change filed under it;
`apply` loads it (the node's modprobe, provision_lab/rdma.py) and verify passes. A lab node loads nvidia_peermem at
boot only where /etc/modules-load.d names it (provision_lab/nodeinit.py, as systemd-modules-load): the file
provision wrote loads it at the next boot, at the version of the driver that boot loaded. `kernel-without-module` (a newer
kernel installed without nvidia.ko, provision_lab/stack_kernels.py) is one finding on that node before any reboot;
`apply --reboot` of a driver upgrade holds that node's move back (it keeps working on its driver) and moves and
reboots the other; the finding's command, run as said, clears it, and the next `apply --reboot` takes that node too."""

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
MODULES_LOAD = "/etc/modules-load.d/provision-nvidia-peermem.conf"  # topology/gdr.py MODULES_LOAD
LOADED, OTHER = "580.159.04", "570.195.03"  # kernels.yaml's driver, the lab's other one


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
        assert on(lab, node, "cat /sys/module/nvidia_peermem/version") == f"{LOADED}\n"
        assert "nvidia-peermem" in on(lab, node, f"cat {MODULES_LOAD}")
        assert findings(verify(lab)[node], GDR, PEERMEM_TASK) == []
    finally:
        lab.lab("fault", node, "clear")


def test_the_file_provision_wrote_loads_nvidia_peermem_at_boot_and_without_it_no_boot_does(kernels_lab):
    lab, node = kernels_lab, NODES[0]
    lab.lab("reboot", node)
    assert on(lab, node, "cat /sys/module/nvidia_peermem/version") == f"{LOADED}\n"
    saved = f"/root/{MODULES_LOAD.rsplit('/', 1)[1]}"
    on(lab, node, f"mv {MODULES_LOAD} {saved}")
    try:
        lab.lab("reboot", node)
        assert lab.ssh(node, "test -e /sys/module/nvidia_peermem").returncode == 1
        # two causes: the module not loaded (GDR's, its modprobe filed under it) and the file gone (apply's own)
        found = sorted(findings(verify(lab)[node], GDR, PEERMEM_TASK), key=lambda f: f["check"])
        assert [f["check"] for f in found] == [PEERMEM_TASK, GDR], found
        assert MODULES_LOAD in found[0]["found"] + found[0]["expected"], found[0]
        code, result = lab.apply("--limit", node)
        assert code == 0, result
        lab.lab("reboot", node)
        assert on(lab, node, "cat /sys/module/nvidia_peermem/version") == f"{LOADED}\n"
        assert findings(verify(lab)[node], GDR, PEERMEM_TASK) == []
    finally:
        on(lab, node, f"test -e {MODULES_LOAD} || mv {saved} {MODULES_LOAD}; rm -f {saved}")


def test_a_kernel_without_the_module_is_found_its_reboot_refused_and_the_named_command_clears_it(kernels_lab, tmp_path):
    lab, stranded = kernels_lab, NODES[1]
    lab.lab("fault", stranded, "kernel-without-module")
    try:
        verdicts = verify(lab)
        (finding,) = findings(verdicts[stranded], NEXT_BOOT)
        assert KERNEL in finding["expected"] and f"linux-modules-nvidia-580-{KERNEL}" in finding["next_step"]
        assert findings(verdicts[NODES[0]], NEXT_BOOT) == []

        # the other lab driver: the stranded node's move is refused at plan time (it keeps the driver it runs,
        # working, rather than hold the new one's user space with no module to boot), the other moves
        upgrade = driver_moved(lab, OTHER, tmp_path / "inventory.yaml")
        _, result = lab.apply("--reboot", inventory=upgrade)
        assert {r["host"]: r["status"] for r in result["reboots"]} == {NODES[0]: "rebooted"}, result["reboots"]
        # the boot that loaded the new driver loaded its nvidia_peermem (provision's modules-load.d file)
        assert on(lab, NODES[0], "cat /sys/module/nvidia_peermem/version") == f"{OTHER}\n"
        assert f"  {LOADED}  " in on(lab, stranded, "cat /proc/driver/nvidia/version")
        assert "mismatch" not in on(lab, stranded, "nvidia-smi")
        fixed = run_fixing_command(lab, stranded, finding["next_step"])  # verify's next step, run as it says
        assert fixed == f"apt-get install linux-modules-nvidia-580-{KERNEL}", fixed
        code, result = lab.apply("--reboot", inventory=upgrade)
        assert code == 0 and [(r["host"], r["status"]) for r in result["reboots"]] == [(stranded, "rebooted")], result
        assert f"  {OTHER}  " in on(lab, stranded, "cat /proc/driver/nvidia/version")
        assert findings(verify(lab, upgrade)[stranded], NEXT_BOOT) == []
    finally:
        lab.lab("fault", stranded, "clear")
