"""The CPUs, memory and cgroup layout of a host, as slurmd -C sees them: one section of the facts batch.

slurmd counts what hwloc shows it: the online logical CPUs, their packages (sockets) and cores, and
MemTotal (sysconf(_SC_PHYS_PAGES), src/slurmd/slurmd/get_mach_stat.c). The same numbers come from /sys and
/proc without slurmd installed. Each NVIDIA GPU's local_cpulist says which CPUs sit next to it (gres.conf
Cores=), and /proc/driver/nvidia its device minor (/dev/nvidiaN, gres.conf File=).

A file that is not there is a state (None), never an error: a container without /sys/fs/cgroup, a kernel
without topology files, a GPU whose driver is not loaded.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from provision.core import pci



# "online LIST", then "cpu N PACKAGE CORE" per CPU directory, "mem KB", "cgroup FSTYPE", and for each NVIDIA
# display-class PCI device "gpu ADDRESS LOCAL_CPULIST MINOR". One word per field, "-" where a file is missing.
# In every batch, so it reads with the shell's own `read` (no process per CPU or PCI device: a 224-thread node
# would otherwise fork hundreds of times per run); `2>/dev/null` first, so a missing file is silent.
CPU_SNIPPET = (
    "o=-; read o 2>/dev/null </sys/devices/system/cpu/online; echo \"online ${o:--}\"; "
    "for c in /sys/devices/system/cpu/cpu[0-9]*; do [ -d \"$c\" ] || continue; p=-; k=-; "
    "read p 2>/dev/null <\"$c/topology/physical_package_id\"; read k 2>/dev/null <\"$c/topology/core_id\"; "
    "echo \"cpu ${c##*/cpu} ${p:--} ${k:--}\"; done; "
    "m=$(sed -n 's/^MemTotal:[[:space:]]*\\([0-9]*\\).*/\\1/p' /proc/meminfo 2>/dev/null); echo \"mem ${m:--}\"; "
    "t=$(stat -f -c %T /sys/fs/cgroup 2>/dev/null); echo \"cgroup ${t:--}\"; "
    "for d in /sys/bus/pci/devices/*; do v=; read v 2>/dev/null <\"$d/vendor\"; [ \"$v\" = 0x10de ] || continue; "
    "x=; read x 2>/dev/null <\"$d/class\"; case $x in 0x03*) ;; *) continue;; esac; "
    "a=${d##*/}; l=-; read l 2>/dev/null <\"$d/local_cpulist\"; "
    "n=$(sed -n 's/^Device Minor:[[:space:]]*//p' \"/proc/driver/nvidia/gpus/$a/information\" 2>/dev/null); "
    "echo \"gpu $a ${l:--} ${n:--}\"; done; true"
)

CGROUP_FS = {"cgroup2fs": "v2", "tmpfs": "v1"}  # stat -f %T of /sys/fs/cgroup: the unified or the v1 layout


def parse_cpu(text: str) -> CpuFacts:
    """CPU_SNIPPET's output -> CpuFacts. Counts are None where the files that give them were missing."""
    online: set[int] | None = None
    listed: list[LogicalCpu] = []
    facts = CpuFacts()
    for line in text.splitlines():
        words = line.split()
        if len(words) == 2 and words[0] == "online":
            online = parse_cpulist(words[1]) if words[1] != "-" else None
        elif len(words) == 4 and words[0] == "cpu" and words[1].isdigit():
            listed.append(LogicalCpu(int(words[1]), _int(words[2]), _int(words[3])))
        elif len(words) == 2 and words[0] == "mem":
            kb = _int(words[1])
            facts.memory_mib = kb // 1024 if kb is not None else None
        elif len(words) == 2 and words[0] == "cgroup":
            facts.cgroup = CGROUP_FS.get(words[1])
        elif len(words) == 4 and words[0] == "gpu":
            address = pci.address(words[1])
            facts.gpu_cpulists[address] = None if words[2] == "-" else words[2]
            minor = _int(words[3])
            if minor is not None:
                facts.gpu_minors[address] = minor
    # Offline CPUs keep their directory (and, on older kernels, their topology files): slurmd counts online ones.
    facts.topology = sorted((c for c in listed if online is None or c.cpu in online), key=lambda c: c.cpu)
    if online is not None:
        facts.cpus = len(online)
    elif facts.topology:
        facts.cpus = len(facts.topology)
    known = [c for c in facts.topology if c.package is not None and c.core is not None]
    if facts.topology and len(known) == len(facts.topology) == facts.cpus:
        sockets = {c.package for c in known}
        cores = {(c.package, c.core) for c in known}
        # As slurmd: cores per socket and threads per core are whole-node averages (hwloc counts, divided).
        facts.sockets = len(sockets)
        facts.cores_per_socket = len(cores) // len(sockets)
        facts.threads_per_core = len(known) // len(cores)
    return facts


def unusable(cpu: CpuFacts | None) -> list[str]:
    """Why these facts cannot give slurm.conf's NodeName line, in words; empty when they can."""
    if cpu is None:
        return ["CPU facts were not read"]
    gaps = []
    if cpu.cpus is None:
        gaps.append("no online CPUs in /sys/devices/system/cpu")
    elif cpu.sockets is None or cpu.cores_per_socket is None or cpu.threads_per_core is None:  # set together
        gaps.append("no socket and core ids for every online CPU in /sys/devices/system/cpu/cpu*/topology")
    elif cpu.cpus != cpu.sockets * cpu.cores_per_socket * cpu.threads_per_core:
        # slurmd itself logs "Thread count not multiple of core count": some cores have a thread offline
        gaps.append(f"an uneven topology: {cpu.cpus} online CPUs are not {cpu.sockets} socket(s) x "
                    f"{cpu.cores_per_socket} cores x {cpu.threads_per_core} thread(s) (some CPUs offline?)")
    if cpu.memory_mib is None:
        gaps.append("no MemTotal in /proc/meminfo")
    return gaps


def parse_cpulist(text: str) -> set[int]:
    """A kernel CPU list ("0-19,40-59", "3", "") -> its CPU numbers. Raises ValueError on anything else."""
    cpus: set[int] = set()
    for item in text.strip().split(","):
        if not item:
            continue
        first, _, last = item.partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return cpus


def format_ranges(numbers: Iterable[int]) -> str:
    """[0, 1, 2, 5, 7, 8] -> "0-2,5,7-8": the range syntax of Slurm's Cores= and the kernel's CPU lists."""
    runs: list[list[int]] = []  # [first, last] of each run of consecutive numbers
    for n in sorted(set(numbers)):
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return ",".join(str(first) if first == last else f"{first}-{last}" for first, last in runs)


def core_order(cpu: CpuFacts) -> list[tuple[int, int]]:
    """The physical cores (package id, core id) in slurmd's abstract numbering: core 0 is the first core of the
    first socket, core 1 the second core of that socket (gres.conf(5), Cores). slurmd takes hwloc's logical
    order, which sorts sockets and cores by their first CPU: on ordinary machines the same as sorting by
    package id, then core id."""
    first_cpu: dict[tuple[int, int], int] = {}
    socket_first: dict[int, int] = {}
    for c in cpu.topology:
        if c.package is None or c.core is None:
            return []
        first_cpu.setdefault((c.package, c.core), c.cpu)
        socket_first.setdefault(c.package, c.cpu)
    return sorted(first_cpu, key=lambda core: (socket_first[core[0]], first_cpu[core]))


def abstract_cores(cpu: CpuFacts, cpulist: str) -> list[int] | None:
    """The abstract core indices (gres.conf Cores=) of the cores that have a CPU in cpulist (a GPU's
    local_cpulist); None where the topology or the list is not known, or names no online CPU."""
    try:
        wanted = parse_cpulist(cpulist)
    except ValueError:
        return None
    order = core_order(cpu)
    if not order:
        return None
    index = {core: i for i, core in enumerate(order)}
    found = sorted({index[(c.package, c.core)] for c in cpu.topology
                    if c.cpu in wanted and c.package is not None and c.core is not None})  # all are: core_order
    return found or None


def _int(word: str) -> int | None:
    try:
        return int(word)
    except ValueError:
        return None


@dataclass(frozen=True)
class LogicalCpu:
    """One online logical CPU and where it sits (/sys/devices/system/cpu/cpuN/topology); None: not readable."""

    cpu: int
    package: int | None  # physical_package_id: the socket
    core: int | None  # core_id, unique within its package only


@dataclass
class CpuFacts:
    """What slurm.conf's NodeName line needs, read as slurmd -C reads it (capabilities/system/cpu.py); None: not known."""

    cpus: int | None = None  # online logical CPUs
    sockets: int | None = None
    cores_per_socket: int | None = None
    threads_per_core: int | None = None
    memory_mib: int | None = None  # MemTotal kB // 1024
    cgroup: str | None = None  # "v1" or "v2": the layout of /sys/fs/cgroup
    # Each NVIDIA GPU on the PCI bus, "0000:3b:00.0" -> its local_cpulist "0-19,40-59" (None: not readable)
    gpu_cpulists: dict[str, str | None] = field(default_factory=dict)
    gpu_minors: dict[str, int] = field(default_factory=dict)  # "0000:3b:00.0" -> N of /dev/nvidiaN (driver loaded)
    topology: list[LogicalCpu] = field(default_factory=list)  # the online CPUs, by number
