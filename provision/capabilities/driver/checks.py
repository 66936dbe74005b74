"""Driver checks: the kernel module loaded is the pinned driver, the one installed (else a reboot is pending).
The packages themselves (pinned version, held), the apt source and the nouveau blacklist are the driver tasks'
own desired-state checks (as_intended)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from provision.capabilities.driver import nextboot
from provision.capabilities.driver import packages as driver
from provision.core.checks import fail

if TYPE_CHECKING:  # types only
    from provision.verify.model import Node
    from testinfra.host import Host as TestinfraHost


def check_driver_loaded_is_the_pinned_version(node: Node, host: TestinfraHost) -> None:
    """Reads: provision_driver; the driver packages apt has installed (dpkg-query, over the connection) and the kernel
    module loaded (/proc/driver/nvidia/version, nvidia-smi).
    Next step: a reboot pending: `provision apply INVENTORY --limit NODE --reboot`; no module loaded: is it built
    for this kernel? (dkms status; dmesg | grep -i nvrm)"""
    wanted = node.inventory.settings.driver
    if wanted is None:
        pytest.skip("the inventory sets no driver block for this host")
    try:
        names = driver.package_names(wanted, node.facts.system.os_id)
    except ValueError as exc:
        pytest.skip(str(exc))
    # Read with testinfra (dpkg-query), apart from the facts batch: what apt really has installed now.
    installed = {name: host.package(name) for name in names}
    if not all(p.is_installed and driver.is_pinned(wanted, p.version) for p in installed.values()):
        pytest.skip("not judged while the packages are not the pinned version (as_intended[nvidia-driver] says so)")
    pinned = wanted.version or f"branch {wanted.branch}"
    reasons = driver.reboot_reasons(wanted, node.facts)
    if reasons:
        fail(f"driver {pinned} loaded, as installed", "reboot pending: " + "; ".join(reasons),
             node.apply_command("--reboot"))
    loaded = node.facts.driver.loaded or node.facts.nvidia.driver_version
    if loaded is None or not driver.is_pinned(wanted, loaded):
        fail(f"driver {pinned} loaded", loaded or "no NVIDIA kernel module loaded",
             "is the module built for this kernel? (dkms status; dmesg | grep -i nvrm)")


def check_the_next_boot_kernel_has_the_nvidia_module(node: Node) -> None:
    """A kernel upgrade that would strand the node is found before anyone reboots it (nextboot.py).

    Reads: provision_driver; /boot/vmlinuz-*, GRUB's default (/etc/default/grub, /boot/grub/grubenv), the module
    files under /lib/modules/KERNEL, `dkms status`, the linux-modules-nvidia-* packages.
    Next step: build or install the module for that kernel (`dkms autoinstall -k KERNEL`, or Ubuntu's
    linux-modules-nvidia-BRANCH-KERNEL), as the finding says"""
    boot = node.facts.driver.next_boot
    if boot is None:
        pytest.skip("the next boot's kernel was not read")
    kernel, basis = nextboot.next_kernel(boot)
    if kernel is None:
        pytest.skip(f"which kernel boots next is not known: {basis}")
    found = nextboot.driver_stranded(node.inventory.settings.driver, node.facts)
    if found is None and not nextboot.has_module(boot, kernel, nextboot.NVIDIA):
        pytest.skip("no NVIDIA driver here, and the inventory asks for none")
    if found is not None:
        fail(f"the kernel that boots next ({kernel}: {found.basis}) has the NVIDIA module",
             f"no nvidia.ko under /lib/modules/{kernel}: the node would come back without GPUs",
             f"{found.fix}, before the node reboots")
