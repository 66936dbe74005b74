"""The system's share of the facts batch: CPUs, memory and cgroups (slurm.conf), and the daemons provision
restarts (munged, slurmd, slurmctld) with their start times."""

from __future__ import annotations

from typing import TYPE_CHECKING

from provision.capabilities.system import cpu, daemons
from provision.core.facts import FactReader, FactSection, Section

if TYPE_CHECKING:  # types only
    from provision.capabilities.host import HostFacts


def parse(sections: dict[str, Section], facts: HostFacts) -> None:
    if "cpu" in sections:
        facts.cpu = cpu.parse_cpu(sections["cpu"].output)
    if "daemons" in sections:
        facts.daemons = daemons.parse_daemons(sections["daemons"].output)


# Apply reads them only for the tasks that ask (the Slurm tasks: slurm.conf's node lines, the daemons' restarts).
READER = FactReader((FactSection("cpu", cpu.CPU_SNIPPET, on_request=True),  # CPUs, memory, cgroups, GPUs' CPUs
                     FactSection("daemons", daemons.DAEMONS_SNIPPET, on_request=True)), parse)
