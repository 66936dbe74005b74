"""The NVIDIA driver: its packages, the repository they come from, nouveau blacklisted, a pending reboot."""

from provision.capabilities.capability import Capability
from provision.capabilities.driver import facts, nextboot, packages, shown
from provision.capabilities.driver.settings import DriverSettings
from provision.capabilities.driver.tasks import DriverRepository, NouveauBlacklist, NvidiaDriver

CAPABILITY = Capability(
    name="driver", settings=DriverSettings, facts=facts.READER,
    tasks=(NouveauBlacklist, DriverRepository, NvidiaDriver),
    checks=(f"{__name__}.checks",),
    pending=(packages.reboot_pending,),
    reboot_refusals=(nextboot.reboot_refusals,),
    # State its tasks change that no fact holds: the initramfs (nouveau's blacklist), apt's package index.
    fact_keys=frozenset({"initramfs", "apt_index"}),
    show=shown.lines)
