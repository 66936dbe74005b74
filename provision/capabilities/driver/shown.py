"""What `provision facts` shows of the driver, in one line: the loaded module, the installed packages, what stands
in its way, a pending reboot."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from provision.capabilities.capability import WARNING, FactLine
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
    if not pending:
        return [FactLine.plain(f"driver: {'; '.join(words)}")]
    return [FactLine(((f"driver: {'; '.join(words)}; ", ""), (f"reboot pending: {'; '.join(pending)}", WARNING)))]
