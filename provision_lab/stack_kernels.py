"""Kernels in the lab: a newer kernel installed without the NVIDIA module (the `kernel-without-module` fault), and
Ubuntu's prebuilt module packages that put the module into it.

A lab node runs this machine's kernel and its image has no /boot/vmlinuz-* (so which kernel it boots next is not
known there, and provision says so). The fault installs NEXT_KERNEL as an unattended upgrade would, without its
NVIDIA module: /boot/vmlinuz-NEXT_KERNEL and /lib/modules/NEXT_KERNEL with no nvidia.ko. With no GRUB configuration,
the newest /boot/vmlinuz-* is the one provision takes for the next boot: a reboot would strand the node. The fix
provision names, `apt-get install linux-modules-nvidia-<branch>-NEXT_KERNEL`, installs from the lab's repository
one of the packages below: nvidia.ko and nvidia-peermem.ko under /lib/modules/NEXT_KERNEL/kernel/nvidia-<branch>/,
as Ubuntu's linux-modules-nvidia-<branch>-<abi> put them (../shared/reference/node-lifecycle-reference.md, 4.2).
The lab's boot does not change kernels: what the fault sets up stays until `clear`.
"""

from __future__ import annotations

import shlex

from provision_lab.deb import REVISION, Deb
from provision_lab.layout import DRIVERS

NEXT_KERNEL = "6.1.0-40-amd64"  # a Debian bookworm kernel release, newer than none a node has installed
MODULES = ("nvidia", "nvidia-peermem")


def module_package(branch: str, kernel: str = NEXT_KERNEL) -> str:
    return f"linux-modules-nvidia-{branch}-{kernel}"


def debs() -> list[Deb]:
    """One prebuilt module package per driver branch the repository serves, for NEXT_KERNEL."""
    packages = []
    for name, driver in DRIVERS.items():
        branch = driver.split(".")[0]
        where = f"/lib/modules/{NEXT_KERNEL}/kernel/nvidia-{branch}"
        packages.append(Deb(
            module_package(branch), driver + REVISION, depends=name,
            files={f"{where}/{module}.ko": (0o644, f"simulated {module} {driver} for {NEXT_KERNEL}\n")
                   for module in MODULES},
            description=f"NVIDIA {branch} kernel modules for Linux {NEXT_KERNEL} (simulated, provision lab)"))
    return packages


def fault_script() -> str:
    """sh, in the node: NEXT_KERNEL installed without the NVIDIA module (an unattended kernel upgrade, no DKMS)."""
    kernel = shlex.quote(NEXT_KERNEL)
    return (f"mkdir -p /boot /lib/modules/{kernel}/kernel && "
            f"echo 'simulated Linux {NEXT_KERNEL} (provision lab)' > /boot/vmlinuz-{kernel} && "
            f": > /lib/modules/{kernel}/modules.dep")


def clear_script() -> str:
    """sh, in the node: NEXT_KERNEL gone again, with any module package installed for it since."""
    kernel = shlex.quote(NEXT_KERNEL)
    packages = " ".join(shlex.quote(module_package(d.split(".")[0])) for d in DRIVERS.values())
    return (f"dpkg --purge {packages} >/dev/null 2>&1; "
            f"rm -rf /boot/vmlinuz-{kernel} /lib/modules/{kernel}")
