"""The lab's kernels (provision_lab/stack_kernels.py) and its modprobe for nvidia_peermem (rdma.py): the prebuilt
module packages provision names as the fix, where Ubuntu puts their files, and the fault's files."""

from __future__ import annotations

import subprocess
from pathlib import Path

from provision.capabilities.driver import nextboot
from provision_lab import rdma, stack_kernels
from provision_lab.layout import DRIVER_VERSION, DRIVERS, OTHER_DRIVER_VERSION

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


def test_modprobe_loads_peermem_only_on_a_node_with_rdma_nics_at_the_loaded_driver_s_version(tmp_path: Path):
    assert rdma.modprobe_files([]) == {}
    files = rdma.modprobe_files([{"name": "mlx5_0"}])
    assert f"install nvidia_peermem {rdma.PEERMEM_LOADER}\n" in files[rdma.MODPROBE_CONF][1]
    mode, loader = files[rdma.PEERMEM_LOADER]
    proc, sys_module = tmp_path / "version", tmp_path / "module"
    loader = loader.replace("/proc/driver/nvidia/version", str(proc)).replace(rdma.SYS_MODULE, str(sys_module))
    kinds = {OTHER_DRIVER_VERSION: "NVIDIA UNIX x86_64 Kernel Module  {}  Wed Oct 29 23:15:11 UTC 2025",
             DRIVER_VERSION: "NVIDIA UNIX Open Kernel Module for x86_64  {}  Release Build"}  # gpusim kernel.py NVRM_ID_*
    for version, line in kinds.items():
        proc.write_text(f"NVRM version: {line.format(version)}\n")
        subprocess.run(["sh", "-c", loader], check=True, timeout=30)
        assert (sys_module / "nvidia_peermem/version").read_text() == f"{version}\n"
    proc.unlink()
    failed = subprocess.run(["sh", "-c", loader], capture_output=True, text=True, timeout=30)
    assert mode == 0o755 and failed.returncode == 1 and "Module nvidia_peermem not found" in failed.stderr
