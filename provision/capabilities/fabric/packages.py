"""Whether a host wants NVIDIA Fabric Manager, which packages make it up, at which version, and why a host with it
installed waits for a reboot (../shared/reference/node-lifecycle-reference.md, 1.2 and 1.3).

Package names, per the driver block's source (provision_driver.source):

  Ubuntu's archive (distro), and a local mirror   nvidia-fabricmanager-<branch>, libnvidia-nscq-<branch>
  NVIDIA's CUDA repository (cuda)                  the same before R580; nvidia-fabricmanager, libnvidia-nscq from R580
  Debian's archive (distro)                        none: use source cuda, or a local mirror

Their version is the driver's exact version, always: the fabric manager refuses to start against a loaded driver
of any other ("fabric manager NVIDIA GPU driver interface version X don't match with driver version Y"), and
libnvidia-nscq must match it too. So the version is never written in the inventory: it is provision_driver.version,
or, with a branch alone, the version the driver's packages hold; on a host whose driver move is refused (its next
kernel would lack the new module: driver/heldback.py), the version it keeps.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from provision.capabilities.driver.facts import agreed_version, upstream
from provision.capabilities.fabric.facts import NVSWITCH_DEVICES, NVSWITCH_PCI_IDS, PROCESS

if TYPE_CHECKING:  # types only
    from provision.capabilities.driver.settings import DriverSettings
    from provision.capabilities.host import HostFacts
    from provision.inventory.model import Host

UNSUFFIXED_FROM = 580  # NVIDIA's repository drops the branch from the names at R580
NVSWITCH_WHERE = f"{NVSWITCH_DEVICES}, no NVSwitch bridge {' or '.join(NVSWITCH_PCI_IDS)} on the PCI bus"


def package_names(settings: DriverSettings, os_id: str) -> list[str]:
    """The fabric manager's packages on this host; ValueError (why) where provision has no names."""
    branch = settings.wanted_branch
    if settings.source == "cuda" and int(branch) >= UNSUFFIXED_FROM:
        return ["nvidia-fabricmanager", "libnvidia-nscq"]
    if settings.source == "distro" and os_id != "ubuntu":
        raise ValueError(f"no fabric manager package in {os_id or 'this system'}'s archive (Ubuntu's has them): "
                         "set provision_driver.source: cuda (NVIDIA's repository) or local (your mirror), or "
                         "provision_driver.fabric_manager: false and install it yourself")
    return [f"nvidia-fabricmanager-{branch}", f"libnvidia-nscq-{branch}"]


def candidate_names(settings: DriverSettings) -> list[str]:
    """Every name the packages may have here: read before the distribution is known."""
    names = set()
    for os_id in ("debian", "ubuntu"):
        try:
            names |= set(package_names(settings, os_id))
        except ValueError:
            pass
    return sorted(names)


def the_drivers_version(settings: DriverSettings, facts: HostFacts) -> str | None:
    """The version the fabric manager must have: the pinned driver's, else the one its packages hold (None: none)."""
    return settings.version or agreed_version(facts.driver.packages.values())


def not_wanted(settings: DriverSettings | None, facts: HostFacts) -> str:
    """Why this host runs no fabric manager provision manages ('' when it does). provision_driver.fabric_manager
    true on a board without NVSwitch is the input problem of board_problems, not a reason here."""
    if settings is not None and settings.fabric_manager is False:
        return "provision_driver.fabric_manager is false: left alone"
    if facts.fabric is None:
        return "the fabric facts were not read"
    if not facts.fabric.has_nvswitch:
        return f"no NVSwitch on this host (nothing in {NVSWITCH_WHERE})"
    return ""


def board_problems(settings: DriverSettings, facts: HostFacts) -> list[str]:
    """provision_driver.fabric_manager true where the facts show no NVSwitch: the inventory asks for what the
    board cannot have."""
    if settings.fabric_manager is True and facts.fabric is not None and not facts.fabric.has_nvswitch:
        return ["provision_driver.fabric_manager is true, but this host has no NVSwitch (nothing in "
                f"{NVSWITCH_WHERE}): fabric manager runs on NVSwitch boards (HGX/DGX A100, H100, H200) only; "
                "leave it out (auto) or set it false for this host"]
    return []


def installed(facts: HostFacts) -> dict[str, str]:
    """The fabric manager's installed packages -> their upstream version."""
    return {name: upstream(version) for name, version in (facts.fabric.packages if facts.fabric else {}).items()}


def running(facts: HostFacts) -> bool:
    return bool(facts.daemons.get(PROCESS))


def reboot_pending(host: Host, facts: HostFacts) -> list[str]:
    """Where no systemd runs (a container, the lab's nodes), an enabled fabric manager at the loaded driver's
    version that is not running starts only at the next boot."""
    settings = host.settings.driver
    if not_wanted(settings, facts) or facts.system.systemd_running or running(facts) or facts.fabric is None:
        return []
    versions = set(installed(facts).values())
    loaded = facts.driver.loaded
    if facts.fabric.unit == "enabled" and loaded is not None and versions == {loaded}:
        return [f"nvidia-fabricmanager {loaded} is enabled and not running, and no systemd runs here to start it: "
                "it starts at the next boot"]
    return []

