"""The whole inventory and this run's facts, for the plans that look beyond one host (which hosts belong
together is the capabilities' business: capabilities/clusters.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable


if TYPE_CHECKING:
    from provision.inventory.model import Host
    from provision.capabilities.host import HostFacts


@dataclass
class Cluster:
    """The whole inventory and the facts read in this run, for tasks whose plan looks beyond one host."""

    everyone: list[Host]
    facts: dict[str, "HostFacts"] = field(default_factory=dict)
    unread: dict[str, str] = field(default_factory=dict)  # host name -> why its facts could not be read
    local_only: bool = False  # --local: this machine was read, no other host could be (their plans are skipped)

    def beyond_reach(self, names: Iterable[str]) -> str:
        """Why a plan that needs these hosts is not judged here ("" when it is)."""
        missing = [name for name in names if name not in self.facts]
        return (f"needs the facts of {', '.join(missing)}, and --local reads this machine only: run it from the "
                "control machine") if self.local_only and missing else ""
