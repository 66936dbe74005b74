"""What `provision facts` shows of the topology: the GPU pairs whose traffic crosses the CPU sockets."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from provision.capabilities.capability import WARNING, FactLine
from provision.capabilities.topology import topo

if TYPE_CHECKING:  # types only
    from provision.capabilities.host import HostFacts


def lines(host: Any, facts: HostFacts) -> list[FactLine]:
    matrix = facts.topology.matrix if facts.topology else None
    if matrix is None or facts.nvidia.state != "ok":  # nvidia-smi that cannot list the GPUs says nothing of them
        return []
    return [FactLine.labelled("topology", warning, WARNING) for warning in topo.cross_socket_warnings(matrix)]
