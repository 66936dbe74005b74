"""What `provision facts` shows of the container toolkit, in one line where the host has any of it: the toolkit's
version, each CDI spec and the driver it names (a warning when not the loaded one), each engine's nvidia runtime."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from provision.capabilities.capability import WARNING, FactLine
from provision.capabilities.containers.facts import TOOLKIT_PACKAGES
from provision.capabilities.containers.tasks import spec_state
from provision.capabilities.driver.facts import agreed_version

if TYPE_CHECKING:  # types only
    from provision.capabilities.host import HostFacts


def lines(host: Any, facts: HostFacts) -> list[FactLine]:
    found, loaded = facts.containers, facts.driver.loaded
    if not (found.packages or found.specs or found.ctk):
        return []
    toolkit = [found.packages[name] for name in TOOLKIT_PACKAGES if name in found.packages]
    version = agreed_version(toolkit) or "mixed: " + ", ".join(f"{n} {v}" for n, v in sorted(found.packages.items()))
    held = " (held)" if set(found.packages) <= set(found.held) else ""
    parts: list[tuple[str, str]] = [(f"containers: toolkit {version}{held}", "")]
    for path, spec in sorted(found.specs.items()):
        parts.append((f"; CDI {path}: {spec_state(spec)}", "" if spec.drivers == [loaded] else WARNING))
    for engine, problem in sorted(found.runtime_problems.items()):
        parts.append((f"; {engine}: {problem or 'nvidia runtime'}", WARNING if problem else ""))
    return [FactLine(tuple(parts))]
