"""What `provision facts` shows of the driver: the loaded module, the installed packages, what stands in its way, a
pending reboot; and, where it is known, the kernel the next boot takes and whether the NVIDIA module is built for it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from provision.capabilities.capability import WARNING, FactLine
from provision.capabilities.driver import nextboot
from provision.capabilities.driver.packages import reboot_reasons

if TYPE_CHECKING:  # types only
    from provision.capabilities.host import HostFacts


def lines(host: Any, facts: HostFacts) -> list[FactLine]:
    d = facts.driver
    loaded = (f"{d.loaded} loaded ({'open' if d.loaded_open else 'proprietary'} kernel module)" if d.loaded
              else "no NVIDIA module loaded")
    packages = ", ".join(f"{name} {version}" for name, version in sorted(d.packages.items())) or "no driver package"
    words = [loaded, f"installed: {packages}"]
    words += ["nouveau loaded"] if d.nouveau_loaded else []
    words += [f"Secure Boot {d.secure_boot}"] if d.secure_boot in ("enabled", "unknown") else []
    # Without the inventory's driver block, as the packages installed say: facts shows the host as it is.
    pending = reboot_reasons(None, facts)
    said = FactLine.plain(f"driver: {'; '.join(words)}") if not pending else \
        FactLine(((f"driver: {'; '.join(words)}; ", ""), (f"reboot pending: {'; '.join(pending)}", WARNING)))
    return [said, *next_boot_lines(facts)]


def next_boot_lines(facts: HostFacts) -> list[FactLine]:
    """The next boot's kernel and its NVIDIA module, on a host with a driver where that kernel is known."""
    boot, driver = facts.driver.next_boot, facts.driver
    kernel = nextboot.next_kernel(boot)[0] if boot else None
    if boot is None or kernel is None or not (driver.packages or driver.loaded):
        return []
    stranded = nextboot.driver_stranded(None, facts)
    if stranded is None:
        return [FactLine.labelled("next boot", f"{kernel}, NVIDIA module built for it")]
    return [FactLine.labelled("next boot", f"{kernel}, no NVIDIA module built for it: {stranded.fix}", WARNING)]
