"""What `provision facts` shows of DCGM, in one line where it is installed: its packages' version and the host
engine's (a warning when none answers, or it runs another version)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from provision.capabilities.capability import WARNING, FactLine
from provision.capabilities.driver.facts import agreed_version

if TYPE_CHECKING:  # types only
    from provision.capabilities.host import HostFacts


def lines(host: Any, facts: HostFacts) -> list[FactLine]:
    found = facts.dcgm
    if not found.packages:
        return []
    version = agreed_version(found.packages.values()) or "mixed"
    names = ", ".join(sorted(found.packages))
    engine = f"host engine {found.hostengine}" if found.hostengine else "no host engine answers"
    return [FactLine(((f"dcgm: {version} ({names}); ", ""),
                      (engine, "" if found.hostengine == version else WARNING)))]
