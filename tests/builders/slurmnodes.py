"""The nodes of a small Slurm cluster as the facts read them: a DGX-1-like compute node with 4 V100s and the
controller without GPUs, their CPUs as CPU_SNIPPET (capabilities/system/cpu.py) prints them."""

from __future__ import annotations

from collections.abc import Sequence

from provision.capabilities.host import HostFacts
from provision.capabilities.system import cpu as cpu_facts
from provision.core import pci
from provision.core.facts import SystemFacts

from builders.facts import facts as host_facts
from builders.gpus import gpu as card

V100_BUSES = ["00000000:1A:00.0", "00000000:1C:00.0", "00000000:88:00.0", "00000000:8A:00.0"]


def sys_text(sockets: int, cores: int, threads: int, mem_kb: int, cgroup: str = "cgroup2fs",
             gpus: Sequence[tuple[str, str | None, int | None]] = ()) -> str:
    """CPU_SNIPPET's output on a machine numbered as Linux numbers Intel CPUs: first threads socket by socket,
    then the second threads. gpus: (PCI address, local_cpulist, minor)."""
    lines = [f"online 0-{sockets * cores * threads - 1}"]
    for n in range(sockets * cores * threads):
        lines.append(f"cpu {n} {(n // cores) % sockets} {n % cores}")
    lines += [f"mem {mem_kb}", f"cgroup {cgroup}"]
    lines += [f"gpu {a} {cpus or '-'} {'-' if m is None else m}" for a, cpus, m in gpus]
    return "\n".join(lines)


def v100_node(hostname: str, mem_kb: int = 394832112, minors: Sequence[int] = (0, 1, 2, 3),
              cgroup: str = "cgroup2fs") -> HostFacts:
    """A 2 x 20-core (SMT) box with 4 V100s: two on each socket's PCIe root, as in a DGX-1-like layout."""
    v100s = [card(i, "V100", uuid=f"GPU-{hostname}-{i}", bus_id=bus) for i, bus in enumerate(V100_BUSES)]
    on_pci = [(pci.address(bus), "0-19,40-59" if i < 2 else "20-39,60-79", minors[i])
              for i, bus in enumerate(V100_BUSES)]
    return host_facts(system=SystemFacts(hostname=hostname), gpus=v100s,
                      cpu=cpu_facts.parse_cpu(sys_text(2, 20, 2, mem_kb, cgroup, on_pci)))


def head_facts(hostname: str = "head.basement.example", cgroup: str = "tmpfs") -> HostFacts:
    """The controller: 8 cores, no NVIDIA driver."""
    return host_facts(system=SystemFacts(hostname=hostname), state="missing",
                      cpu=cpu_facts.parse_cpu(sys_text(1, 8, 1, 32768000, cgroup)))
