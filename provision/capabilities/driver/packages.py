"""Which NVIDIA driver packages a host needs, whether they are the pinned version, and whether a reboot is pending.

Package names per distribution and source (what each ships; explicit `provision_driver.packages` overrides them):

  Ubuntu's archive    nvidia-driver-580[-server][-open]; compute only: nvidia-headless-580[-server][-open]
                      plus nvidia-utils-580[-server] (nvidia-smi is not in the headless metapackage)
  Debian's archive    nvidia-driver (one branch per release, no branch in the name); compute only:
                      nvidia-kernel-dkms (nvidia-open-kernel-dkms) plus nvidia-smi and libcuda1
  NVIDIA's CUDA repo  cuda-drivers-580, or nvidia-open-580 for the open kernel modules

packages.ubuntu.com (nvidia-graphics-drivers-580[-server]), packages.debian.org (nvidia-graphics-drivers),
docs.nvidia.com/datacenter/tesla/driver-installation-guide.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from provision.capabilities.driver.facts import agreed_version, upstream
from provision.capabilities.driver.settings import DriverSettings

if TYPE_CHECKING:  # types only
    from provision.capabilities.gpu.model import GpuFacts
    from provision.capabilities.host import HostFacts
    from provision.inventory.model import Host

DEBIAN_FAMILY = {"debian", "ubuntu"}  # apt and dpkg: what the driver task installs with
# The open kernel modules run on the GPU's GSP, which came with Turing (compute capability 7.5): they cannot drive
# Volta, Pascal or Maxwell (NVIDIA/open-gpu-kernel-modules#19). The proprietary ones drive those up to the 580
# branch, which is their last (the branches after it leave them to "legacy 580").
TURING = (7, 5)
LAST_BRANCH_BEFORE_TURING = 580


def package_names(settings: DriverSettings, os_id: str) -> list[str]:
    """The packages that make up the driver on this distribution; ValueError (why) where provision has no names."""
    branch = settings.wanted_branch
    if settings.packages:
        return [name.replace("{branch}", branch) for name in settings.packages]
    if settings.source == "cuda":
        return [f"nvidia-open-{branch}" if settings.open else f"cuda-drivers-{branch}"]
    if os_id == "ubuntu":
        flavour = ("-server" if settings.server else "") + ("-open" if settings.open else "")
        if settings.headless:
            return [f"nvidia-headless-{branch}{flavour}", f"nvidia-utils-{branch}{'-server' if settings.server else ''}"]
        return [f"nvidia-driver-{branch}{flavour}"]
    if os_id == "debian":
        if settings.server:
            raise ValueError("Debian has no -server driver packages: leave provision_driver.server out, or name the "
                             "packages (provision_driver.packages)")
        module = "nvidia-open-kernel-dkms" if settings.open else "nvidia-kernel-dkms"
        return [module, "nvidia-smi", "libcuda1"] if settings.headless else ["nvidia-driver"]
    raise ValueError(f"no default driver package names for {os_id or 'this system'!r} (Debian and Ubuntu only): "
                     "name them in provision_driver.packages")


def candidate_names(settings: DriverSettings) -> list[str]:
    """Every name the packages may have on any supported distribution: read before the distribution is known."""
    names = []
    for os_id in sorted(DEBIAN_FAMILY):
        try:
            names += package_names(settings, os_id)
        except ValueError:
            pass
    return sorted(set(names) | ({"cuda-keyring"} if settings.source == "cuda" else set()))


def is_pinned(settings: DriverSettings, debian_version: str | None) -> bool:
    """Is this installed version (Debian's, with revision) the one the inventory pins?"""
    if debian_version is None:
        return False
    version = upstream(debian_version)
    return version == settings.version if settings.version else version.split(".")[0] == settings.branch


def installed_version(names: list[str], facts: HostFacts) -> str | None:
    """The driver version the named packages hold, when all are installed at one version; else None."""
    versions = [version for name in names if (version := facts.packages.get(name)) is not None]
    return agreed_version(versions) if len(versions) == len(names) else None


def reboot_reasons(settings: DriverSettings | None, facts: HostFacts) -> list[str]:
    """Why the host must reboot before its GPUs run the driver it has installed; empty when it need not."""
    reasons = []
    driver, mismatch = facts.driver, facts.nvidia.state == "mismatch"
    installed = agreed_version(driver.packages.values())  # without a driver block: what the driver packages hold
    if settings is not None:
        try:
            installed = installed_version(package_names(settings, facts.system.os_id), facts)
        except ValueError:
            pass
    if installed and (installed != driver.loaded or mismatch):
        reasons.append(f"driver {installed} is installed, " +
                       (f"{driver.loaded} is loaded" if driver.loaded else "no NVIDIA module is loaded") +
                       (" (nvidia-smi: Driver/library version mismatch)" if mismatch else "") +
                       ("; Secure Boot is on: the module loads only if signed with an enrolled key (mokutil)"
                        if driver.secure_boot == "enabled" and not driver.loaded else ""))
    elif mismatch:
        reasons.append(f"nvidia-smi: {facts.nvidia.message}" + (f"; loaded: {driver.loaded}" if driver.loaded else ""))
    if settings is not None and settings.blacklist_nouveau and driver.nouveau_loaded:
        reasons.append("nouveau is loaded (blacklisted for the next boot)")
    return reasons


def reboot_pending(host: Host, facts: HostFacts) -> list[str]:
    """Why this host waits for a reboot after a run (Extensions.reboot_pending); [] when it does not."""
    return reboot_reasons(host.settings.driver, facts)


def what_the_gpus_wait_for(settings: DriverSettings | None, facts: HostFacts) -> str:
    """What must happen before the GPUs can be used with the driver the inventory pins: a reboot (why), or the
    driver itself (the nvidia-driver task installs it; it loads at the next boot); '' when nothing."""
    pending = reboot_reasons(settings, facts)
    if pending:
        return f"a reboot: {pending[0]}"
    if settings is None:
        return ""
    from provision.capabilities.driver.heldback import as_kept  # it judges moves with this module's is_pinned

    settings = as_kept(settings, facts)  # a refused move: the GPUs run the driver the host keeps
    try:
        names = package_names(settings, facts.system.os_id)
    except ValueError:
        return ""
    if not all(is_pinned(settings, facts.packages.get(name)) for name in names):
        pinned = settings.version or f"branch {settings.branch}"
        return f"driver {pinned}, which the nvidia-driver task installs (it loads at the next boot: apply --reboot)"
    return ""


def unfit_for_the_gpus(settings: DriverSettings, facts: HostFacts) -> list[str]:
    """Why the pinned driver cannot drive this host's GPUs, where nvidia-smi told their compute capability
    (a host with no driver loaded yet is not judged)."""
    older = before_turing(facts.nvidia.gpus)
    if not older:
        return []
    named = ", ".join(f"GPU{g.index} {g.name} ({g.compute_cap})" for g in older[:2]) + (" ..." if len(older) > 2 else "")
    problems = []
    if settings.open:
        problems.append(f"provision_driver.open: the open kernel modules drive Turing and newer GPUs only (they need the "
                        f"GPU's GSP), and this host has older ones: {named}; leave open out")
    if int(settings.wanted_branch) > LAST_BRANCH_BEFORE_TURING:
        problems.append(f"driver branch {settings.wanted_branch} does not drive GPUs older than Turing, and this host "
                        f"has {named}: {LAST_BRANCH_BEFORE_TURING} is their last branch")
    return problems


def before_turing(gpus: list[GpuFacts]) -> list[GpuFacts]:
    """The GPUs nvidia-smi says are older than Turing (a GPU whose compute capability it did not tell is not)."""
    return [gpu for gpu in gpus if _capability(gpu.compute_cap) < TURING]


def _capability(text: str | None) -> tuple[int, int]:
    try:
        major, minor = (text or "").split(".")
        return int(major), int(minor)
    except ValueError:
        return TURING  # not told: not judged
