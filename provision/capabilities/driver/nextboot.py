"""The kernel a host boots next, and whether the NVIDIA module is built for it (Debian and Ubuntu, GRUB).

A kernel upgrade (unattended-upgrades, an apt-get upgrade) installs a new /boot/vmlinuz-X; the next boot runs it,
and without nvidia.ko built for X the node comes back without GPUs ("modprobe: FATAL: Module nvidia not found").
This reads what decides it, in one section of the facts batch, so that verify says so before anyone reboots and
`apply --reboot` refuses that host's reboot (../shared/reference/node-lifecycle-reference.md, section 4):

- Which kernel: grub-reboot's one-shot `next_entry` in /boot/grub/grubenv comes first (GRUB's 00_header loads it
  whatever GRUB_DEFAULT says); then GRUB_DEFAULT (/etc/default/grub, then /etc/default/grub.d/*.cfg, sourced
  after it): `saved` takes grubenv's `saved_entry`; `0` (or none) the top entry, which Ubuntu's and Debian's
  10_linux make the highest-versioned /boot/vmlinuz-*; a title or id names its kernel ("... with Linux X",
  "gnulinux-X-advanced-UUID"). An entry given by its place in a submenu ("1>2") depends on grub.cfg's order, and
  no /boot/vmlinuz-* at all is a kernel this host's disk does not hold (a container, a network boot): both are
  said as not known, never guessed.
- Built for it: nvidia.ko (or .ko.zst, .ko.xz) anywhere under /lib/modules/X: dkms puts it in updates/dkms on
  Debian and Ubuntu, Ubuntu's prebuilt linux-modules-nvidia-* packages under kernel/. `dkms status` (both of its
  formats) and those packages say which command builds or installs it when it is missing.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from provision.core import debversion, dpkg

if TYPE_CHECKING:  # types only
    from provision.capabilities.driver.settings import DriverSettings
    from provision.capabilities.host import HostFacts
    from provision.inventory.model import Host

GRUBENV = "/boot/grub/grubenv"
GRUB_DEFAULTS = ("/etc/default/grub", "/etc/default/grub.d/*.cfg")  # sourced in this order: the last one wins
MODULE_FILES = ("nvidia.ko*", "nvidia-peermem.ko*")
NVIDIA, PEERMEM = "nvidia", "nvidia-peermem"  # the modules' file names (nvidia-peermem.ko loads as nvidia_peermem)
MODULE_PACKAGES = "linux-modules-nvidia-*"  # Ubuntu's prebuilt, signed modules, one package per kernel ABI

# "vmlinuz X" per /boot/vmlinuz-X; "grubenv saved_entry=..." / "grubenv next_entry=..."; "grub-default VALUE" (the
# last GRUB_DEFAULT line, as the shell sourcing them keeps it); "grub" where GRUB is configured at all; per kernel
# (the installed ones and the running one) "module X PATH" for each module file and "headers X" where its build
# tree is there (dkms needs it); "dkms LINE" per line of `dkms status`; "modpkg NAME VERSION STATUS" per package.
_FIND = " -o ".join(f"-name {shlex.quote(name)}" for name in MODULE_FILES)
NEXTBOOT_SNIPPET = (
    "for f in /boot/vmlinuz-*; do [ -e \"$f\" ] && echo \"vmlinuz ${f#/boot/vmlinuz-}\"; done; "
    f"[ -r {GRUBENV} ] && grep -E '^(saved_entry|next_entry)=' {GRUBENV} | sed 's/^/grubenv /'; "
    f"{{ [ -e {GRUB_DEFAULTS[0]} ] || [ -e {GRUBENV} ]; }} && echo grub; "
    f"grep -h '^GRUB_DEFAULT=' {' '.join(GRUB_DEFAULTS)} 2>/dev/null | tail -n 1 | sed 's/^GRUB_DEFAULT=/grub-default /'; "
    "for k in $(ls /boot 2>/dev/null | sed -n 's/^vmlinuz-//p') $(uname -r); do "
    "[ -d \"/lib/modules/$k\" ] || continue; "
    f"find \"/lib/modules/$k\" \\( {_FIND} \\) 2>/dev/null | sed \"s|^|module $k |\"; "
    "[ -e \"/lib/modules/$k/build\" ] && echo \"headers $k\"; done | sort -u; "
    "command -v dkms >/dev/null 2>&1 && dkms status 2>/dev/null | sed 's/^/dkms /'; "
    + dpkg.status_snippet([MODULE_PACKAGES], "modpkg ")
)

# dkms 2.8.7 and later: "nvidia/580.95.05, 6.8.0-45-generic, x86_64: installed (...)" or "nvidia/580.95.05: added";
# before: "nvidia, 396.45, 4.17.11-200.fc28.x86_64, x86_64: installed". 2.8.6 mixes them (its added lines keep the
# commas), and "installed-weak from KERNEL" lines keep them in every dkms (test_dkms_status_formats.py).
DKMS_LINE = re.compile(r"^(?P<module>[^/,\s]+)(?:/|, )(?P<version>[^,:\s]+)"
                       r"(?:, (?P<kernel>[^,:\s]+), (?P<arch>[^,:\s]+))?: (?P<state>.+)$")
ENTRY_TITLE = re.compile(r"with Linux (\S+?)(?: \(recovery mode\))?$")
ENTRY_ID = re.compile(r"^gnulinux-(\S+?)-(?:advanced|recovery)-[0-9a-fA-F-]+$")
MODULE_PACKAGE = re.compile(r"^(linux-modules-nvidia-\d+(?:-server)?(?:-open)?)-(\d\S*)$")


@dataclass(frozen=True)
class DkmsModule:
    """One line of `dkms status`: a module version, for one kernel (none while only added), in a state."""

    module: str
    version: str
    kernel: str | None
    state: str  # "installed", "built", "added", "broken", "installed-weak from X", with dkms's note after it


@dataclass
class NextBoot:
    """What decides the next boot's kernel and its modules (capabilities/driver/nextboot.py)."""

    kernels: list[str] = field(default_factory=list)  # /boot/vmlinuz-X, as listed
    grub: bool = False  # /etc/default/grub or /boot/grub/grubenv is there
    grub_default: str | None = None  # GRUB_DEFAULT's value, unquoted; None where no file sets it
    grubenv: dict[str, str] = field(default_factory=dict)  # saved_entry, next_entry (set ones only)
    modules: dict[str, list[str]] = field(default_factory=dict)  # kernel -> module files found under /lib/modules/X
    headers: list[str] = field(default_factory=list)  # kernels whose /lib/modules/X/build is there
    dkms: list[DkmsModule] = field(default_factory=list)
    module_packages: dict[str, str] = field(default_factory=dict)  # installed linux-modules-nvidia-* -> version

    @property
    def kernel(self) -> str | None:
        return next_kernel(self)[0]


def parse_nextboot(text: str) -> NextBoot:
    found = NextBoot()
    for line in text.splitlines():
        kind, _, rest = line.partition(" ")
        rest = rest.strip()
        if kind == "vmlinuz" and rest:
            found.kernels.append(rest)
        elif kind == "grub":
            found.grub = True
        elif kind == "grubenv" and "=" in rest:
            name, _, value = rest.partition("=")
            if value:
                found.grubenv[name] = value
        elif kind == "grub-default":
            found.grub_default = _unquoted(rest)
        elif kind == "module":
            kernel, _, path = rest.partition(" ")
            found.modules.setdefault(kernel, []).append(path)
        elif kind == "headers":
            found.headers.append(rest)
        elif kind == "dkms":
            module = parse_dkms_line(rest)
            found.dkms += [module] if module else []
        elif kind == "modpkg":
            words = rest.split()
            if len(words) >= 3 and words[2][1:2] == "i":  # installed (ii, hi)
                found.module_packages[words[0]] = words[1]
    return found


def parse_dkms_line(line: str) -> DkmsModule | None:
    """One `dkms status` line in either format; None for a line that is no module's (a warning dkms prints)."""
    match = DKMS_LINE.match(line.strip())
    if match is None:
        return None
    return DkmsModule(match["module"], match["version"], match["kernel"], match["state"].strip())


def _unquoted(value: str) -> str:
    """A shell assignment's value as the shell reads it: one pair of quotes around it gone."""
    try:
        words = shlex.split(value, comments=True)
    except ValueError:  # an unbalanced quote: as written
        return value
    return " ".join(words)


def newest(kernels: list[str]) -> str | None:
    """The highest kernel release, compared as a Debian version (6.8.0-100 after 6.8.0-45, 6.1.0-40-amd64 after
    6.1.0-40~rc1-amd64): the order in which Debian's and Ubuntu's 10_linux put the top entry first."""
    return debversion.newest(kernels)


def next_kernel(boot: NextBoot) -> tuple[str | None, str]:
    """(the kernel that boots next, how that is known) or (None, why it cannot be known)."""
    top = newest(boot.kernels)
    if top is None:
        return None, ("no /boot/vmlinuz-* on this host: the kernel it boots is not on its disk (a container, or a "
                      "network boot)")
    if not boot.grub:
        return top, "the newest /boot/vmlinuz-* (no GRUB configuration: the boot loader's choice is not read)"
    if "next_entry" in boot.grubenv:
        return _entry_kernel(boot, boot.grubenv["next_entry"], f"next_entry in {GRUBENV} (grub-reboot, this boot only)")
    default = boot.grub_default or "0"
    if default == "saved":
        saved = boot.grubenv.get("saved_entry")
        if saved is None:
            return top, "GRUB_DEFAULT=saved with no saved_entry: the top entry, the newest /boot/vmlinuz-*"
        return _entry_kernel(boot, saved, f"GRUB_DEFAULT=saved, saved_entry in {GRUBENV}")
    return _entry_kernel(boot, default, f"GRUB_DEFAULT={default}")


def _entry_kernel(boot: NextBoot, entry: str, source: str) -> tuple[str | None, str]:
    top = newest(boot.kernels)
    if entry == "0":
        return top, f"{source}: the top entry, the newest /boot/vmlinuz-*"
    last = entry.split(">")[-1].strip()
    match = ENTRY_TITLE.search(last) or ENTRY_ID.match(last)
    if match is None:
        return None, (f"{source} names the entry {entry!r} by its place in the menu or a title without a kernel: "
                      "which kernel that is depends on /boot/grub/grub.cfg, not read")
    kernel = match[1]
    if kernel not in boot.kernels:  # GRUB boots its first entry when the default is gone
        return top, f"{source} names kernel {kernel}, not installed: GRUB falls back to the top entry, the newest"
    return kernel, f"{source}"


def has_module(boot: NextBoot, kernel: str, module: str) -> bool:
    """Whether MODULE.ko (compressed or not) is under /lib/modules/KERNEL."""
    pattern = re.compile(rf"/{re.escape(module)}\.ko(\.(zst|xz|gz))?$")
    return any(pattern.search(path) for path in boot.modules.get(kernel, []))


def fix_for(boot: NextBoot, kernel: str, branch: str | None = None, flavour: str = "") -> str:
    """The command that puts the driver's modules into KERNEL: DKMS builds them where the driver is a DKMS
    module; Ubuntu's prebuilt modules come in the package for that kernel ABI. Both where neither shows."""
    dkms_built = any(m.module == NVIDIA for m in boot.dkms)
    headers = "" if kernel in boot.headers else f"apt-get install linux-headers-{kernel} && "
    dkms = f"`{headers}dkms autoinstall -k {kernel}`"
    prefixes = sorted({match[1] for name in boot.module_packages if (match := MODULE_PACKAGE.match(name))})
    if branch and not prefixes:
        prefixes = [f"linux-modules-nvidia-{branch}{flavour}"]
    package = " ".join(f"{prefix}-{kernel}" for prefix in prefixes)
    if dkms_built:
        return dkms + " (the driver is a DKMS module)"
    if boot.module_packages:
        return f"`apt-get install {package}` (the driver's prebuilt modules for that kernel)"
    return (f"{dkms} where the driver is built by DKMS" +
            (f", or `apt-get install {package}` where it comes as prebuilt modules" if package else ""))


@dataclass(frozen=True)
class Stranded:
    """A module the next boot's kernel lacks: what is missing, why that kernel, and the command that fixes it."""

    kernel: str
    module: str
    basis: str
    fix: str

    @property
    def reason(self) -> str:
        return (f"the next boot's kernel {self.kernel} ({self.basis}) has no {self.module} module: it would come back "
                f"without {'GPUs' if self.module == NVIDIA else 'GPUDirect RDMA'}; fix: {self.fix}")


def stranded(boot: NextBoot | None, module: str, branch: str | None = None, flavour: str = "") -> Stranded | None:
    """The next boot's kernel lacks MODULE (None: it has it, or which kernel boots next is not known)."""
    if boot is None:
        return None
    kernel, basis = next_kernel(boot)
    if kernel is None or has_module(boot, kernel, module):
        return None
    return Stranded(kernel, module, basis, fix_for(boot, kernel, branch, flavour))


def driver_stranded(settings: DriverSettings | None, facts: HostFacts) -> Stranded | None:
    """The next boot's kernel lacks the NVIDIA module, on a host that has or wants the driver; None otherwise."""
    driver = facts.driver
    if settings is None and not driver.packages and not driver.loaded:
        return None  # no NVIDIA driver here, nor wanted: no GPUs to come back without
    branch, flavour = module_package_of(settings)
    # The branch on the disk boots: the installed one's module package is what a host that keeps it can install
    # (the pinned branch's depends on that driver, which a refused move did not install: driver/heldback.py).
    installed = {version.split(":")[-1].split(".")[0] for version in driver.packages.values()}
    branch = installed.pop() if len(installed) == 1 else branch
    return stranded(driver.next_boot, NVIDIA, branch, flavour)


def module_package_of(settings: DriverSettings | None) -> tuple[str | None, str]:
    """(branch, flavour) of Ubuntu's prebuilt module packages for this driver block: ("580", "-server-open")."""
    if settings is None:
        return None, ""
    return settings.wanted_branch, ("-server" if settings.server else "") + ("-open" if settings.open else "")


def reboot_refusals(host: Host, facts: HostFacts) -> list[str]:
    """Why this host must not be rebooted now (Capability.reboot_refusals): its next kernel has no NVIDIA module."""
    found = driver_stranded(host.settings.driver, facts)
    return [found.reason] if found else []
