"""The lab's kernels (provision_lab/stack_kernels.py) and its modprobe for nvidia_peermem (rdma.py): the prebuilt
module packages provision names as the fix, where Ubuntu puts their files, and the fault's files."""

from __future__ import annotations

import subprocess
from pathlib import Path

from provision.capabilities.driver import nextboot
from provision_lab import rdma, stack_kernels
from provision_lab.layout import DRIVERS, NODE_MODULES

KERNEL = stack_kernels.NEXT_KERNEL


def test_one_module_package_per_lab_driver_with_both_modules_for_the_next_kernel():
    debs = {deb.name: deb for deb in stack_kernels.debs()}
    assert {name for name in debs if name.startswith("linux-modules-")} == {
        f"linux-modules-nvidia-{v.split('.')[0]}-{KERNEL}" for v in DRIVERS.values()}
    for name, driver in DRIVERS.items():
        deb = debs[stack_kernels.module_package(driver.split(".")[0])]
        assert deb.depends == name and deb.version.startswith(driver)
        found = nextboot.NextBoot(kernels=[KERNEL], modules={KERNEL: sorted(deb.files)})
        assert nextboot.has_module(found, KERNEL, "nvidia") and nextboot.has_module(found, KERNEL, "nvidia-peermem")


def test_the_fault_installs_a_kernel_that_provision_takes_for_the_next_boot_without_its_module(tmp_path: Path):
    script = stack_kernels.fault_script().replace("/boot", f"{tmp_path}/boot").replace("/lib", f"{tmp_path}/lib")
    subprocess.run(["sh", "-c", script], check=True, timeout=30)
    assert (tmp_path / f"boot/vmlinuz-{KERNEL}").exists() and (tmp_path / f"lib/modules/{KERNEL}").is_dir()
    found = nextboot.NextBoot(kernels=[KERNEL])
    assert nextboot.next_kernel(found)[0] == KERNEL and nextboot.stranded(found, "nvidia") is not None


def test_modprobe_loads_the_staged_peermem_only_on_a_node_with_rdma_nics():
    assert rdma.modprobe_files([]) == {}
    (text,) = rdma.modprobe_files([{"name": "mlx5_0"}]).values()
    assert f"install nvidia_peermem mkdir -p /sys/module/nvidia_peermem && cp -a {NODE_MODULES}/nvidia_peermem/." \
        in text and "remove nvidia_peermem rm -rf /sys/module/nvidia_peermem" in text
