"""Kernels in the lab: a newer kernel installed without the NVIDIA module (the `kernel-without-module` fault), and
the two ways the module gets into it: Ubuntu's prebuilt module packages, and DKMS.

A lab node runs this machine's kernel and its image has no /boot/vmlinuz-* (so which kernel it boots next is not
known there, and provision says so). The fault installs NEXT_KERNEL as an unattended upgrade would, without its
NVIDIA module: /boot/vmlinuz-NEXT_KERNEL and /lib/modules/NEXT_KERNEL with no nvidia.ko. With no GRUB configuration,
the newest /boot/vmlinuz-* is the one provision takes for the next boot: a reboot would strand the node. The fix
provision names, `apt-get install linux-modules-nvidia-<branch>-NEXT_KERNEL`, installs from the lab's repository
one of the packages below: nvidia.ko and nvidia-peermem.ko under /lib/modules/NEXT_KERNEL/kernel/nvidia-<branch>/,
as Ubuntu's linux-modules-nvidia-<branch>-<abi> put them (../shared/reference/node-lifecycle-reference.md, 4.2).
The lab's boot does not change kernels: what the fault sets up stays until `clear`.

DKMS: the repository serves `dkms` (dkmsim.py as /usr/sbin/dkms: Debian bullseye's 2.8.4 and bookworm's 3.0.10,
whose `dkms status` lines differ), NEXT_KERNEL's headers (linux-headers-NEXT_KERNEL: /usr/src/linux-headers-X and
the /lib/modules/X/build link dkms looks for) and one nvidia-dkms-<branch> per driver: NVIDIA's dkms.conf in
/usr/src/nvidia-VERSION, registered by its postinst as dh_dkms's is (dkms add, then build and install for the
running kernel and the newest one whose headers are installed), removed by its prerm (dkms remove --all). A node
whose driver is named with it (provision_driver.packages) has a DKMS-built driver; the fault with the headers
installed after it is the host where DKMS could build the module but did not, and `dkms autoinstall -k X` does.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from provision_lab import dkmsim
from provision_lab.deb import REVISION, Deb
from provision_lab.layout import DRIVERS

NEXT_KERNEL = "6.1.0-40-amd64"  # a Debian bookworm kernel release, newer than none a node has installed
MODULES = ("nvidia", "nvidia-peermem")
DKMS_VERSIONS = ("2.8.4", "3.0.10")  # Debian bullseye's (the old `dkms status` format) and bookworm's (the new)
DKMS_SOURCE = Path(dkmsim.__file__)
HEADERS = f"linux-headers-{NEXT_KERNEL}"
# NVIDIA's dkms.conf for its kernel modules (the driver's kernel/dkms.conf as the distributions fill it in).
DKMS_CONF = """PACKAGE_NAME="nvidia"
PACKAGE_VERSION="@VERSION@"
AUTOINSTALL="yes"

MAKE[0]="'make' -j`nproc` NV_EXCLUDE_BUILD_MODULES='' KERNEL_UNAME=${kernelver} modules"

BUILT_MODULE_NAME[0]="nvidia"
DEST_MODULE_LOCATION[0]="/kernel/drivers/video"
BUILT_MODULE_NAME[1]="nvidia-uvm"
DEST_MODULE_LOCATION[1]="/kernel/drivers/video"
BUILT_MODULE_NAME[2]="nvidia-modeset"
DEST_MODULE_LOCATION[2]="/kernel/drivers/video"
BUILT_MODULE_NAME[3]="nvidia-drm"
DEST_MODULE_LOCATION[3]="/kernel/drivers/video"
BUILT_MODULE_NAME[4]="nvidia-peermem"
DEST_MODULE_LOCATION[4]="/kernel/drivers/video"
"""
# As dh_dkms's postinst (dkms's common.postinst): register the module, then build and install it for the running
# kernel and the newest installed one, each where its headers are; without any, it says so and only registers.
DKMS_POSTINST = r"""#!/bin/sh
set -e
[ "$1" = configure ] || exit 0
name=nvidia version=@VERSION@
echo "Loading new $name-$version DKMS files..."
dkms status -m $name -v $version | grep -q . || dkms add -m $name -v $version > /dev/null
current=$(uname -r)
newest=$(ls -dv /lib/modules/*/build 2>/dev/null | sed 's|/lib/modules/\(.*\)/build||' | tail -n 1)
kernels=$( { [ -e /lib/modules/$current/build ] && echo $current; [ -n "$newest" ] && echo $newest; } | sort -u)
if [ -z "$kernels" ]; then
    echo "WARNING: No kernel headers were found, skipping module build."
    echo "         To get the headers for the running kernel ($current)"
    echo "         please install the linux-headers-$current package."
    exit 0
fi
echo "Building for $(echo $kernels)"
for kernel in $kernels; do
    echo ""
    echo "Building initial module $name/$version for $kernel"
    dkms install -m $name -v $version -k $kernel
done
"""
DKMS_PRERM = """#!/bin/sh
set -e
# as dh_dkms's prerm: the module out of every kernel and the DKMS tree, before its source goes
dkms remove -m nvidia -v @VERSION@ --all || true
"""


def module_package(branch: str, kernel: str = NEXT_KERNEL) -> str:
    return f"linux-modules-nvidia-{branch}-{kernel}"


def debs() -> list[Deb]:
    """One prebuilt module package per driver branch the repository serves, for NEXT_KERNEL; dkms_debs."""
    packages = []
    for name, driver in DRIVERS.items():
        branch = driver.split(".")[0]
        where = f"/lib/modules/{NEXT_KERNEL}/kernel/nvidia-{branch}"
        packages.append(Deb(
            module_package(branch), driver + REVISION, depends=name,
            files={f"{where}/{module}.ko": (0o644, f"simulated {module} {driver} for {NEXT_KERNEL}\n")
                   for module in MODULES},
            description=f"NVIDIA {branch} kernel modules for Linux {NEXT_KERNEL} (simulated, provision lab)"))
    return packages + dkms_debs()


def dkms_package(branch: str) -> str:
    return f"nvidia-dkms-{branch}"


def dkms_script(version: str) -> str:
    """dkmsim.py as one release of dkms: its VERSION set, which decides the words it prints."""
    source = DKMS_SOURCE.read_text()
    line = f'VERSION = "{dkmsim.VERSION}"'
    assert line in source, f"{DKMS_SOURCE} has no {line!r} line"
    return source.replace(line, f'VERSION = "{version}"', 1)


def dkms_debs() -> list[Deb]:
    """dkms at each release, NEXT_KERNEL's headers, and the DKMS flavour of every driver (see the module's text)."""
    packages = [Deb("dkms", version + REVISION, depends="python3", files={"/usr/sbin/dkms": (0o755, dkms_script(version))},
                    description=f"Dynamic Kernel Module System {version} (simulated, provision lab)")
                for version in DKMS_VERSIONS]
    source = f"/usr/src/{HEADERS}"
    packages.append(Deb(  # the build link: a Deb carries no symlinks, so its postinst makes it
        HEADERS, "6.1.158" + REVISION, files={f"{source}/Makefile": (0o644, f"# simulated {HEADERS}\n")},
        postinst=f"#!/bin/sh\nset -e\nmkdir -p /lib/modules/{NEXT_KERNEL}\nln -sfn {source} /lib/modules/{NEXT_KERNEL}/build\n",
        prerm=f"#!/bin/sh\nrm -f /lib/modules/{NEXT_KERNEL}/build\n",
        description=f"Header files for Linux {NEXT_KERNEL} (simulated, provision lab)"))
    for driver in DRIVERS.values():
        packages.append(Deb(
            dkms_package(driver.split(".")[0]), driver + REVISION, depends="dkms",
            provides="nvidia-dkms-kernel", conflicts="nvidia-dkms-kernel", replaces="nvidia-dkms-kernel",
            files={f"/usr/src/nvidia-{driver}/dkms.conf": (0o644, DKMS_CONF.replace("@VERSION@", driver))},
            postinst=DKMS_POSTINST.replace("@VERSION@", driver), prerm=DKMS_PRERM.replace("@VERSION@", driver),
            description=f"NVIDIA DKMS package {driver} (simulated, provision lab)"))
    return packages


def fault_script() -> str:
    """sh, in the node: NEXT_KERNEL installed without the NVIDIA module (an unattended kernel upgrade, no DKMS)."""
    kernel = shlex.quote(NEXT_KERNEL)
    return (f"mkdir -p /boot /lib/modules/{kernel}/kernel && "
            f"echo 'simulated Linux {NEXT_KERNEL} (provision lab)' > /boot/vmlinuz-{kernel} && "
            f": > /lib/modules/{kernel}/modules.dep")


def clear_script() -> str:
    """sh, in the node: NEXT_KERNEL gone again, with its headers and any module package installed for it since;
    what DKMS built for it goes with its tree."""
    kernel = shlex.quote(NEXT_KERNEL)
    packages = " ".join(shlex.quote(module_package(d.split(".")[0])) for d in DRIVERS.values()) + f" {HEADERS}"
    return (f"dpkg --purge {packages} >/dev/null 2>&1; "
            f"rm -rf /boot/vmlinuz-{kernel} /lib/modules/{kernel} /var/lib/dkms/*/*/{kernel}")
