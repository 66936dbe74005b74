"""The NVIDIA driver as the host has it: the packages installed, the kernel module loaded, nouveau, Secure Boot.

One section of the facts batch (snippet beside its parser). The loaded version is the kernel module's own line,
/proc/driver/nvidia/version, in both formats the driver prints:

  NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.173.02  Tue Jun 23 08:38:17 UTC 2026
  NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  565.57.01  Release Build  (dvs-builder@U16-A24-9-2)  ...

so it is known even when nvidia-smi cannot say (after an upgrade its library no longer matches the loaded module:
"Failed to initialize NVML: Driver/library version mismatch", exit 18).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from provision.capabilities.driver.nextboot import NEXTBOOT_SNIPPET, NextBoot, parse_nextboot
from provision.core import debversion, dpkg
from provision.core.facts import FactReader, FactSection, Section

if TYPE_CHECKING:  # types only
    from collections.abc import Iterable
    from provision.capabilities.host import HostFacts



# The packages that carry a driver version (not nvidia-settings, nvidia-container-toolkit, ... with their own):
# Ubuntu's nvidia-driver-N[-server][-open], nvidia-headless-N, nvidia-utils-N, nvidia-kernel-common-N; NVIDIA's
# cuda-drivers-N and nvidia-open-N; Debian's nvidia-driver and nvidia-kernel-dkms.
# nvidia-dkms*: Ubuntu's DKMS flavour of a branch (nvidia-dkms-580[-server][-open]), held where the inventory names it:
# a move to another branch must remove the old one's in the same apt-get, as the driver's own.
DRIVER_PACKAGE_PATTERNS = ("nvidia-driver*", "nvidia-headless*", "nvidia-utils*", "nvidia-kernel-*", "nvidia-dkms*",
                           "nvidia-open*", "cuda-drivers*")
SECURE_BOOT_VAR = "/sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"

# GPUDirect RDMA's peer-memory modules, by the files NCCL itself tests for (net_ib's GDR support: any one of them
# there): nvidia_peermem (the driver's, R470 on) and the older nv_peer_mem of Mellanox OFED (its memory_peers).
PEER_MEMORY = ("/sys/module/nvidia_peermem/version", "/sys/kernel/mm/memory_peers/nv_mem/version",
               "/sys/kernel/mm/memory_peers/nv_mem_nc/version")

# "loaded LINE" (none when no module is loaded), "nouveau" when loaded, "peermem PATH" per peer-memory file there,
# "kernel RELEASE", "secureboot VALUE", then "pkg NAME VERSION STATUS" per package dpkg knows by those names
# (core/dpkg.py). An efivar is 4 bytes of attributes, then the value (1: enabled).
DRIVER_SNIPPET = (
    "read -r v 2>/dev/null </proc/driver/nvidia/version && echo \"loaded $v\"; "
    "[ -d /sys/module/nouveau ] && echo nouveau; "
    f"for p in {' '.join(PEER_MEMORY)}; do [ -e \"$p\" ] && echo \"peermem $p\"; done; "
    "read k 2>/dev/null </proc/sys/kernel/osrelease && echo \"kernel $k\"; "
    "if [ ! -d /sys/firmware/efi ]; then echo 'secureboot no-efi'; "
    f"elif b=$(od -An -tu1 -j4 -N1 {SECURE_BOOT_VAR} 2>/dev/null) && [ -n \"$b\" ]; then echo \"secureboot $b\"; "
    "else echo 'secureboot unknown'; fi; "
    + dpkg.status_snippet(list(DRIVER_PACKAGE_PATTERNS), "pkg ")
)

LOADED = re.compile(r"Kernel Module(?: for \S+)?\s+(\d+(?:\.\d+)+)\s")
SECURE_BOOT = {"1": "enabled", "0": "disabled", "no-efi": "no-efi"}


def parse_driver(text: str) -> DriverFacts:
    found = DriverFacts()
    for line in text.splitlines():
        kind, _, rest = line.partition(" ")
        if kind == "loaded":
            match = LOADED.search(rest + " ")
            found.loaded = match.group(1) if match else None
            found.loaded_open = "Open Kernel Module" in rest
            found.loaded_line = rest.strip()
        elif kind == "nouveau":
            found.nouveau_loaded = True
        elif kind == "peermem":
            found.peer_memory.append(rest.strip())
        elif kind == "kernel":
            found.kernel = rest.strip()
        elif kind == "secureboot":
            found.secure_boot = SECURE_BOOT.get(rest.strip(), "unknown")
        elif kind == "pkg":
            words = rest.split()
            if len(words) >= 3 and words[2][1:2] == "i":  # installed (ii, hi; not un, rc)
                found.packages[words[0]] = words[1]
                found.held += [words[0]] if words[2][0] == "h" else []
    return found


def upstream(debian_version: str) -> str:
    """580.159.04-0ubuntu0.22.04.1 -> 580.159.04: the driver's own version, without epoch and Debian revision."""
    return debversion.upstream(debian_version)


def agreed_version(debian_versions: Iterable[str]) -> str | None:
    """The one driver version these packages hold (Debian versions, upstream compared); None when none or several."""
    versions = {upstream(v) for v in debian_versions}
    return versions.pop() if len(versions) == 1 else None


@dataclass
class DriverFacts:
    """The NVIDIA driver on the host (capabilities/driver/facts.py): installed packages, the loaded module, what stands in its way."""

    loaded: str | None = None  # the loaded kernel module's version; None: no NVIDIA module loaded
    loaded_open: bool | None = None  # the open kernel modules (None: none loaded)
    loaded_line: str = ""  # /proc/driver/nvidia/version's first line, as printed
    nouveau_loaded: bool = False
    peer_memory: list[str] = field(default_factory=list)  # PEER_MEMORY files there: a peer-memory module loaded
    kernel: str = ""  # the running kernel's release ("6.1.0-27-amd64"); "" unread
    secure_boot: str = "unknown"  # "enabled", "disabled", "no-efi" (booted without UEFI) or "unknown"
    packages: dict[str, str] = field(default_factory=dict)  # installed driver packages -> Debian version
    held: list[str] = field(default_factory=list)  # of those, the ones on hold (apt-mark hold)
    next_boot: NextBoot | None = None  # the kernel that boots next and its modules (nextboot.py); None: not read


def parse(sections: dict[str, Section], facts: HostFacts) -> None:
    if "driver" in sections:
        facts.driver = parse_driver(sections["driver"].output)
    if "nextboot" in sections:
        facts.driver.next_boot = parse_nextboot(sections["nextboot"].output)


# Installed packages, the loaded module, nouveau, Secure Boot; the next boot's kernel and its modules.
READER = FactReader((FactSection("driver", DRIVER_SNIPPET), FactSection("nextboot", NEXTBOOT_SNIPPET)), parse)
