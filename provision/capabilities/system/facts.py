"""The system's share of the facts batch: CPUs, memory and cgroups (slurm.conf), and the daemons provision
restarts (munged, slurmd, slurmctld) with their start times."""

from __future__ import annotations

from provision.capabilities.system import cpu, daemons
from provision.core.facts import FactReader, FactSection, Section


def parse(sections: dict[str, Section], facts) -> None:
    if "cpu" in sections:
        facts.cpu = cpu.parse_cpu(sections["cpu"].output)
    if "daemons" in sections:
        facts.daemons = daemons.parse_daemons(sections["daemons"].output)


READER = FactReader((FactSection("cpu", cpu.CPU_SNIPPET),  # CPUs, memory, cgroup layout, each GPU's local CPUs
                     FactSection("daemons", daemons.DAEMONS_SNIPPET)), parse)
