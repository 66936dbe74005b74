"""The topology's share of the facts batch: `nvidia-smi topo -m`, how far apart the GPUs and RDMA NICs are
(facts and verify read it; apply for the nvidia-peermem task alone)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from provision.capabilities.topology import topo
from provision.capabilities.topology.topo import TopologyFacts
from provision.core.facts import FactReader, FactSection, Section

if TYPE_CHECKING:  # types only
    from provision.capabilities.host import HostFacts


def _topology(section: Section) -> TopologyFacts:
    if section.rc != 0:
        return TopologyFacts(message=section.output.strip() or f"nvidia-smi topo -m exited {section.rc}")
    try:
        return TopologyFacts(matrix=topo.parse_topo(section.output))
    except topo.TopoParseError as exc:
        return TopologyFacts(message=str(exc))


def parse(sections: dict[str, Section], facts: HostFacts) -> None:
    if "topo" in sections:
        facts.topology = _topology(sections["topo"])


# apply reads it only for the nvidia-peermem task (auto: where NCCL would use GPUDirect RDMA).
READER = FactReader((FactSection("topo", "nvidia-smi topo -m", on_request=True,
                                 refresh_on=frozenset({"topology"})),),
                    parse)
