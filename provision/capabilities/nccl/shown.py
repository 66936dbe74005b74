"""What `provision facts` shows of NCCL: the interfaces it will use and skip on the node (and why), and the
problems apply would refuse to write over; `facts --json` gives the same as a mapping under "nccl"."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from provision.capabilities.capability import PROBLEM, FactLine
from provision.capabilities.nccl.interfaces import summary

if TYPE_CHECKING:  # types only
    from provision.capabilities.host import HostFacts


def lines(host: Any, facts: HostFacts) -> list[FactLine]:
    said = summary(host.settings.nccl, facts.interfaces)
    uses = ", ".join(f"{i['name']} ({i['speed_mbps']} Mb/s)" if i["speed_mbps"] else f"{i['name']} (speed unknown)"
                     for i in said["uses"]) or "no interface"
    skips = "".join(f"; skips {i['name']}, which {i['why']}" for i in said["skips"])
    first = FactLine.labelled("nccl", f"{said['rule']}: uses {uses}{skips}" if said["rule"] else "interfaces not read")
    return [first, *(FactLine.labelled("nccl", problem, PROBLEM) for problem in said["problems"])]


def view(host: Any, facts: HostFacts) -> dict[str, Any]:
    """What NCCL will make of the host's network (the interfaces it takes and skips, and why): facts --json."""
    return summary(host.settings.nccl, facts.interfaces)
