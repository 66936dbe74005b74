"""A driver move held back where the next boot could not load the new driver: the host keeps the driver it runs.

The new driver's user space (nvidia-smi, libcuda, NVML) is installed by apt at once, its kernel module loads at the
next boot. Where that boot's kernel will have no module of the new version, installing it would leave the host
answering "Failed to initialize NVML: Driver/library version mismatch" from then on, with a reboot that cannot be
allowed (nextboot.reboot_refusals). So the nvidia-driver task refuses the move itself at plan time, and the packages
that follow the driver's version (fabric manager, DCGM's CUDA flavour) stay with the driver the host keeps.

Where the next kernel's module comes from, as apt installs a new driver:
  DKMS           the driver's dkms package builds it for every installed kernel whose headers are there
                 (/lib/modules/KERNEL/build): fine where the next kernel's headers are installed
  prebuilt       Ubuntu's linux-modules-nvidia-BRANCH[-server][-open]-KERNEL, one package per kernel ABI: the
                 driver's apt-get installs the new branch's package for the next kernel with it
  the driver's   a module already under /lib/modules/KERNEL with neither of them (a local mirror's package that
                 ships it): its package is taken to move it, as before
  nothing        no module there, no DKMS, no prebuilt package: refused, with the command that fixes it (the one
                 the reboot refusal names)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from provision.capabilities.driver import nextboot
from provision.capabilities.driver import packages as driver
from provision.capabilities.driver.facts import agreed_version

if TYPE_CHECKING:  # types only
    from provision.capabilities.driver.nextboot import NextBoot
    from provision.capabilities.driver.settings import DriverSettings
    from provision.capabilities.host import HostFacts

# The verify check that finds a next kernel without the module: a move refused for that reason is filed under it.
NEXT_BOOT_CHECK = "the_next_boot_kernel_has_the_nvidia_module"


@dataclass(frozen=True)
class HeldBack:
    """A driver move refused on this host: the version it keeps, the one it was to move to, and why."""

    installed: str  # the driver version the host keeps ("580.159.04")
    wanted: str  # "570.195.03", or "branch 570"
    kernel: str  # the next boot's
    basis: str  # why that kernel boots next
    why: str  # why its module of the new driver would not be there
    fix: str  # the command that fixes it, as the reboot refusal names it
    cause: str  # the verify check that reports the same cause ("" none)

    @property
    def reason(self) -> str:
        return (f"refused: driver {self.wanted} is not installed, the host keeps driver {self.installed}: the next "
                f"boot's kernel {self.kernel} ({self.basis}) would have no nvidia module of it ({self.why}), and "
                f"until then nvidia-smi and CUDA would answer 'Driver/library version mismatch'; fix: {self.fix}, "
                "then apply again")


def moving_from(wanted: DriverSettings, facts: HostFacts) -> str | None:
    """The driver version the host holds where the inventory moves it to another; None where it holds none (a
    first install: no driver to keep), several, or the pinned one."""
    installed = agreed_version(facts.driver.packages.values())
    return installed if installed is not None and not driver.is_pinned(wanted, installed) else None


def dkms_builds(boot: NextBoot) -> bool:
    """The driver is a DKMS module here (`dkms status` lists nvidia): its package builds for every kernel."""
    return any(module.module == nextboot.NVIDIA for module in boot.dkms)


def no_module_source(boot: NextBoot, kernel: str) -> str:
    """Why a new driver installed now would leave KERNEL without its module; '' when the module would be there."""
    if dkms_builds(boot):
        return "" if kernel in boot.headers else f"the driver is a DKMS module and {kernel}'s headers are not installed"
    if boot.module_packages or nextboot.has_module(boot, kernel, nextboot.NVIDIA):
        return ""  # the prebuilt package goes in the driver's apt-get (module_packages); else the driver's own
    return "no DKMS, no prebuilt linux-modules-nvidia package"


def refusal(wanted: DriverSettings, facts: HostFacts) -> HeldBack | None:
    """The driver move this host must not take now (None: none to refuse, or which kernel boots next is not known)."""
    installed, boot = moving_from(wanted, facts), facts.driver.next_boot
    if installed is None or boot is None:
        return None
    kernel, basis = nextboot.next_kernel(boot)
    why = no_module_source(boot, kernel) if kernel else ""
    if kernel is None or not why:
        return None
    stranded = nextboot.driver_stranded(wanted, facts)  # the reboot refusal, where it applies: its very command
    _, flavour = nextboot.module_package_of(wanted)
    fix = stranded.fix if stranded else nextboot.fix_for(boot, kernel, installed.split(".")[0], flavour)
    return HeldBack(installed, wanted.version or f"branch {wanted.branch}", kernel, basis, why, fix,
                    NEXT_BOOT_CHECK if stranded else "")


def module_packages(wanted: DriverSettings, facts: HostFacts) -> list[str]:
    """Ubuntu's prebuilt module package of the pinned driver for the next boot's kernel, where the host takes its
    modules prebuilt: named in the driver's own apt-get, installed or not, since Ubuntu's depends on its driver's
    exact version and must move with it (a kernel the archive has none for fails that apt-get, which then changes
    nothing)."""
    boot = facts.driver.next_boot
    kernel = boot.kernel if boot is not None else None
    if boot is None or kernel is None or not boot.module_packages or dkms_builds(boot):
        return []
    branch, flavour = nextboot.module_package_of(wanted)
    return [f"linux-modules-nvidia-{branch}{flavour}-{kernel}"]


def as_kept(wanted: DriverSettings, facts: HostFacts) -> DriverSettings:
    """The driver block as this run leaves the host: the inventory's, or, where its move is refused, pinned at the
    version the host keeps. What follows the driver's version (fabric manager, DCGM's CUDA flavour) plans from it."""
    held = refusal(wanted, facts)
    return wanted.model_copy(update={"version": held.installed, "branch": None}) if held else wanted
