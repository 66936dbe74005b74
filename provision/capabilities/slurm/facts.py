"""What Slurm's controller says of a node (scontrol show node), read by verify."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from provision.capabilities.slurm import pyxis_facts
from provision.core.facts import FactReader, FactSection, Section

if TYPE_CHECKING:  # types only
    from provision.capabilities.host import HostFacts


@dataclass
class SlurmNodeState:
    """This node as slurmctld sees it (`scontrol show node`), or why it could not be asked."""

    name: str = ""
    states: tuple[str, ...] = ()  # "IDLE", "DRAIN", "DOWN", "NOT_RESPONDING", ...
    reason: str = ""
    error: str = ""  # scontrol's own words when it could not answer
    gres: str = ""  # its Gres= as slurmctld holds it: "gpu:3g.40gb:2(S:0),gpu:v100:1(S:1)"

    @property
    def out_of_service(self) -> bool:
        return bool({"DRAIN", "DRAINED", "DRAINING", "DOWN", "FAIL", "NOT_RESPONDING"} & set(self.states))


# The node as slurmctld sees it (verify only): its own NodeName is its short hostname (slurm.conf by provision).
# `timeout`: a controller that does not answer must not hold the whole batch (scontrol waits MessageTimeout).
SLURM_NODE_SNIPPET = ("command -v scontrol >/dev/null || { echo no-scontrol; exit 0; }; "
                      "timeout 15 scontrol -o show node \"$(hostname -s)\" 2>&1")
DRAIN_REASON_PREFIX = "provision-verify:"  # a drain verify set, and so the one `verify --resume` may undo


def parse_slurm_node(text: str) -> SlurmNodeState | None:
    """`scontrol -o show node` of this node: its state words and reason; None where scontrol is not installed."""
    text = text.strip()
    if text == "no-scontrol":
        return None
    state = re.search(r"(?:^| )State=(\S+)", text)
    if not text.startswith("NodeName=") or state is None:
        return SlurmNodeState(error=text.splitlines()[-1] if text else "scontrol printed nothing")
    reason = re.search(r" Reason=(.*?)(?: \[[^]]*\])?(?= \w+=|$)", text)
    gres = re.search(r"(?:^| )Gres=(\S+)", text)
    return SlurmNodeState(name=text.split()[0].removeprefix("NodeName="),
                          states=tuple(state.group(1).split("+")), reason=reason.group(1) if reason else "",
                          gres=gres.group(1) if gres and gres.group(1) != "(null)" else "")


def parse(sections: dict[str, Section], facts: HostFacts) -> None:
    if "slurm-node" in sections:
        facts.slurm_node = parse_slurm_node(sections["slurm-node"].output)
    if pyxis_facts.SECTION.name in sections:
        facts.slurmd_plugins = pyxis_facts.parse_slurmd_plugins(sections[pyxis_facts.SECTION.name].output)


READER = FactReader((FactSection("slurm-node", SLURM_NODE_SNIPPET, read_by=frozenset({"verify"})),
                     pyxis_facts.SECTION), parse)
