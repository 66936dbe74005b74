"""What `provision facts` shows of the fabric manager, in one line, where the host has NVSwitches or its packages:
where the switches were seen, its packages (held or not), its unit, whether it runs, and a version that is not the
loaded driver's."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from provision.capabilities.capability import WARNING, FactLine
from provision.capabilities.fabric import packages as fabric

if TYPE_CHECKING:  # types only
    from provision.capabilities.host import HostFacts


def lines(host: Any, facts: HostFacts) -> list[FactLine]:
    found = facts.fabric
    if found is None or not (found.has_nvswitch or found.packages):
        return []
    held = set(found.held)
    installed = ", ".join(f"{name} {version}{' (held)' if name in held else ''}"
                          for name, version in sorted(found.packages.items())) or "not installed"
    words = [f"NVSwitches: {found.seen() or 'none'}", f"fabric manager: {installed}",
             f"unit {found.unit or 'not installed'}", "running" if fabric.running(facts) else "not running"]
    loaded = facts.driver.loaded
    other = sorted(v for v in set(fabric.installed(facts).values()) if loaded and v != loaded)
    if not other:
        return [FactLine.plain(f"fabric: {'; '.join(words)}")]
    return [FactLine(((f"fabric: {'; '.join(words)}; ", ""),
                      (f"not the loaded driver's version ({loaded}): {', '.join(other)}", WARNING)))]
