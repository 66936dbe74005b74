"""Slurm's configuration from facts: slurm.conf, gres.conf and cgroup.conf for one Slurm cluster. Pure: no I/O.

slurm.conf and gres.conf are one file for the whole cluster, identical on every host (Slurm compares them):
they are built from every host of the cluster and its facts, even when a run is limited to one host, and
refused, naming the hosts, when any host's hardware is not known. cgroup.conf is each node's own.

The target is Debian's Slurm packages (22.05 in bookworm): option names and values are checked against
its man pages (slurm.conf(5), gres.conf(5), cgroup.conf(5) of slurm-22-05-8-1).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

from provision.capabilities.clusters import partition_of, slurm_cluster
from provision.capabilities.slurm import mig_gres
from provision.capabilities.system import cpu as cpu_facts
from provision.core import pci

if TYPE_CHECKING:  # types only
    from provision.capabilities.host import HostFacts
    from provision.capabilities.gpu.model import NvidiaFacts
    from provision.capabilities.slurm.settings import SlurmSettings
    from provision.capabilities.system.cpu import CpuFacts
    from provision.inventory.model import Host

# RealMemory is a little below MemTotal: a node that registers with less memory than slurm.conf says is
# drained, and a kernel or driver update can keep a few more MiB for itself. 98% of MemTotal, floored, is
# never above what slurmd -C reports (MemTotal in MiB) and leaves 2% for such changes.
REAL_MEMORY_PERCENT = 98

# nvidia-smi prefixes that say nothing about the model; what is left names it ("V100-SXM2-16GB" -> v100).
VENDOR_WORDS = ("nvidia", "tesla", "geforce", "quadro")
SERIES_WORDS = ("rtx", "gtx", "titan")  # a series word and the model number after it make one type: rtx3090
SUFFIX_WORDS = ("ti", "super", "ada")  # kept: an RTX 3090 Ti is not an RTX 3090

CGROUP_PLUGINS: dict[str | None, str] = {"v1": "cgroup/v1", "v2": "cgroup/v2"}  # else "autodetect" (cgroup.conf(5): the default)


def gpu_type(name: str) -> str:
    """A short gres Type from nvidia-smi's GPU name: "Tesla V100-SXM2-16GB" -> v100, "NVIDIA GeForce RTX
    3090" -> rtx3090, "NVIDIA RTX A6000" -> rtxa6000, "NVIDIA H100 80GB HBM3" -> h100."""
    words = _model_words(name)
    return _slurm_word("".join(words)) or detected_name(name)


def detected_name(name: str) -> str:
    """The type slurmd's AutoDetect (nvml, nvidia) gives a GPU: its name in lower case, spaces as underscores
    (gpu_common_underscorify_tolower in Slurm's src/plugins/gpu/common/gpu_common.c)."""
    return _slurm_word(name.strip().lower().replace(" ", "_")) or "gpu"


def autodetect_type(name: str) -> str:
    """A short type that AutoDetect accepts: gres.conf's Type must be a substring of the detected name
    (gres.conf(5), Type; _find_type_in_gres_list in src/plugins/gres/gpu/gres_gpu.c). gpu_type() where it is
    one (v100, h100, a100), else the same words joined by underscores (rtx_3090, rtx_a6000)."""
    detected = detected_name(name)
    for candidate in (gpu_type(name), _slurm_word("_".join(_model_words(name)))):
        if candidate and candidate in detected:
            return candidate
    return detected


def _model_words(name: str) -> list[str]:
    words = name.strip().lower().split()
    while words and words[0] in VENDOR_WORDS:
        words.pop(0)
    if not words:
        return []
    if words[0] in SERIES_WORDS and len(words) > 1:
        model, rest = [words[0]], words[1:]
        if rest[0] == "pro" and len(rest) > 1:  # "RTX PRO 6000 Blackwell"
            model.append(rest.pop(0))
        model.append(rest.pop(0).split("-")[0])
        while rest and rest[0] in SUFFIX_WORDS:
            model.append(rest.pop(0))
        return model
    return [words[0].split("-")[0]]  # "v100-sxm2-16gb", "h100", "a100-pcie-40gb", "l40s"


def _slurm_word(text: str) -> str:
    return re.sub(r"[^a-z0-9_.-]", "", text).lstrip("_.-")


HOSTNAME_LABEL = re.compile(r"^[A-Za-z0-9_]([A-Za-z0-9_-]*[A-Za-z0-9_])?$")  # RFC 1123, and _ as systemd allows


def short_hostname(hostname: str) -> str:
    """slurmd finds its NodeName by its short hostname (gethostname_short in slurmd.c)."""
    return hostname.strip().split(".")[0]


def real_memory(memory_mib: int) -> int:
    return max(1, memory_mib * REAL_MEMORY_PERCENT // 100)


# Settings that slurm.conf holds once for the cluster: every host of the cluster must say the same.
CLUSTER_KEYS = ("cluster_name", "health_check_interval")


def cluster_context(hosts: Sequence[Host], facts: Mapping[str, HostFacts | None], *,
                    unread: Mapping[str, str] | None = None,
                    health_check_program: str | None = None) -> dict[str, Any] | list[str]:
    """The render context of slurm.conf and gres.conf for one Slurm cluster (clusters.slurm_cluster()), or,
    when they cannot be written right, the problems, each naming its host.

    facts: host name -> HostFacts; None or absent for a host whose facts could not be read, and unread may
    say why (host name -> reason). health_check_program: what slurmd runs every provision_slurm.health_check_interval.
    """
    unread = unread or {}
    problems: list[str] = []
    if not hosts:
        return ["a Slurm cluster with no host"]
    first = slurm_of(hosts[0])
    controller_name = first.controller
    problems += _disagreements(hosts)
    by_name = {h.name: h for h in hosts}
    controller = by_name.get(controller_name) if controller_name is not None else None
    if controller is None:
        problems.append(f"provision_slurm.controller {controller_name!r} is not a host of this Slurm cluster "
                        f"({', '.join(by_name)}): give it a slurm block naming itself as controller")
    for host in hosts:
        if slurm_of(host).role_of(host.name) in ("controller", "both") and host.name != controller_name:
            problems.append(f"{host.name} has provision_slurm.role {slurm_of(host).role_of(host.name)} but the cluster's "
                            f"controller is {controller_name}: one slurmctld per cluster")

    nodes: list[dict[str, Any]] = []
    gres_nodes: list[dict[str, Any]] = []
    seen_names: dict[str, str] = {}  # hostname -> the host that has it
    for host in hosts:
        role = slurm_of(host).role_of(host.name)
        is_node = role in ("compute", "both")
        host_facts = facts.get(host.name)
        if host_facts is None:
            why = unread.get(host.name, "its facts were not gathered")
            needs = "every node's hardware" if is_node else "the controller's hostname"
            problems.append(f"slurm.conf needs {needs}: {host.name} was not read ({why})")
            continue
        name = short_hostname(host_facts.system.hostname)
        if not name:
            problems.append(f"{host.name}: its hostname could not be read (slurmd finds its NodeName by hostname)")
            continue
        if not HOSTNAME_LABEL.match(name):  # it goes into every node's slurm.conf and gres.conf, unquoted
            problems.append(f"{host.name}: its hostname {name!r} is not a host name (letters, digits and -), "
                            "and slurm.conf names each node by it: set the node's hostname (hostnamectl)")
            continue
        if name in seen_names:
            problems.append(f"{seen_names[name]} and {host.name} both have the hostname {name}: "
                            "each Slurm node needs its own")
        seen_names[name] = host.name
        if not is_node:
            continue
        node, gres, node_problems = _node(host, host_facts, name)
        problems += node_problems
        if node is not None:
            nodes.append(node)
            if gres is not None:
                gres_nodes.append(gres)
    if not nodes and not problems:
        problems.append(f"the Slurm cluster of {controller_name} has no compute node "
                        "(provision_slurm.role compute or both on some host)")
    controller_facts = facts.get(controller.name) if controller else None
    if problems or controller is None or controller_facts is None:  # either is one of the problems
        return problems

    partitions: dict[str, list[str]] = {}
    for node in nodes:
        partitions.setdefault(node["partition"], []).append(node["name"])
    autodetect = {g["autodetect"] for g in gres_nodes}
    everywhere = autodetect.pop() if len(autodetect) == 1 else None  # one AutoDetect line, else one per node
    return {
        "cluster_name": first.cluster_name,
        "controller": {"name": short_hostname(controller_facts.system.hostname), "address": controller.address,
                       "host": controller.name},
        "nodes": nodes,
        "partitions": [{"name": name, "nodes": members, "default": i == 0}
                       for i, (name, members) in enumerate(partitions.items())],
        "health_check": {"program": health_check_program, "interval": first.health_check_interval}
        if first.health_check_interval and health_check_program else None,
        "gres_autodetect": everywhere,
        "gres_nodes": gres_nodes,
        "autodetect_nvidia": any(g["autodetect"] == "nvidia" for g in gres_nodes),
    }


def host_context(cluster: dict[str, Any], host: Host, facts: HostFacts | None) -> dict[str, Any]:
    """cluster_context() plus what is this host's own: its NodeName (None on a controller-only host) and its
    cgroup.conf's CgroupPlugin, from the layout of its /sys/fs/cgroup (autodetect where not known)."""
    cgroup = facts.cpu.cgroup if facts is not None and facts.cpu is not None else None
    node = next((n["name"] for n in cluster["nodes"] if n["host"] == host.name), None)
    return {**cluster, "node_name": node, "cgroup_plugin": CGROUP_PLUGINS.get(cgroup, "autodetect")}


def slurm_context(host: Host, everyone: Iterable[Host], facts: Mapping[str, HostFacts | None], *,
                  unread: Mapping[str, str] | None = None,
                  health_check_program: str | None = None) -> dict[str, Any] | list[str]:
    """The context of host's three Slurm files: its whole cluster (every host of `everyone` with the same
    provision_slurm.controller), and its own cgroup layout; or the problems (a list) that keep them from being written."""
    slurm_of(host)  # raises ValueError without one
    cluster = cluster_context(slurm_cluster(host, everyone), facts, unread=unread,
                              health_check_program=health_check_program)
    if isinstance(cluster, list):
        return cluster
    return host_context(cluster, host, facts.get(host.name))


def slurm_of(host: Host) -> SlurmSettings:
    """The host's slurm block: every host of a Slurm cluster has one (slurm_cluster)."""
    if host.settings.slurm is None:
        raise ValueError(f"{host.name} has no slurm block")
    return host.settings.slurm


def _disagreements(hosts: Sequence[Host]) -> list[str]:
    problems = []
    for key in CLUSTER_KEYS:
        values: dict[object, list[str]] = {}
        for host in hosts:
            values.setdefault(getattr(slurm_of(host), key), []).append(host.name)
        if len(values) > 1:
            said = "; ".join(f"{', '.join(names)} say{'s' if len(names) == 1 else ''} {value!r}"
                             for value, names in values.items())
            problems.append(f"provision_slurm.{key} must be the same on every host of the Slurm cluster "
                            f"(slurm.conf is one file): {said}")
    return problems


def _node(host: Host, facts: HostFacts, name: str) -> tuple[dict[str, Any] | None, dict[str, Any] | None, list[str]]:
    """host's NodeName entry and its gres.conf entry (None without GPUs), or the problems."""
    cpu = facts.cpu
    gaps = cpu_facts.unusable(cpu)
    if gaps or cpu is None or cpu.memory_mib is None:  # unusable names both
        return None, None, [f"slurm.conf needs {host.name}'s CPUs and memory: {'; '.join(gaps)}"]
    gpus, problems = _gpus(host, facts.nvidia, cpu)
    gpus, mig_problems = _with_mig_slices(host, gpus, facts)
    problems += mig_problems
    if problems:
        return None, None, problems
    counts: dict[str, int] = {}
    for gpu in gpus:
        counts[gpu["type"]] = counts.get(gpu["type"], 0) + 1
    node = {
        "name": name, "address": host.address, "host": host.name, "partition": partition_of(host),
        # As slurmd -C prints them (Boards=1 SocketsPerBoard=...: slurm.conf(5) reads Sockets with Boards
        # as SocketsPerBoard).
        "cpus": cpu.cpus, "boards": 1, "sockets": cpu.sockets, "cores_per_socket": cpu.cores_per_socket,
        "threads_per_core": cpu.threads_per_core, "memory_mib": cpu.memory_mib,
        "real_memory": real_memory(cpu.memory_mib),
        "gres": ",".join(f"gpu:{t}:{n}" for t, n in counts.items()),
    }
    if not gpus:
        return node, None, []
    autodetect = slurm_of(host).gres_autodetect
    if autodetect == "off":
        lines = sorted(gpus, key=lambda g: g["minor"])  # File= in increasing numeric order (gres.conf(5))
        lines = [{"type": g["type"], "count": None, "cores": g["cores"],
                  "file": None if g.get("files") else f"/dev/nvidia{g['minor']}", "files": g.get("files")}
                 for g in lines]
    else:  # slurmd finds the device files and cores itself; the lines give each type's count
        lines = [{"type": t, "count": n, "file": None, "files": None, "cores": None} for t, n in counts.items()]
    gres = {"name": name, "host": host.name, "autodetect": None if autodetect == "off" else autodetect,
            "gpus": lines, "mig": any("files" in g for g in gpus)}
    return node, gres, []


def _with_mig_slices(host: Host, gpus: list[dict[str, Any]],
                     facts: HostFacts) -> tuple[list[dict[str, Any]], list[str]]:
    """The node's GPUs with each GPU in MIG mode replaced by its MIG devices (mig_gres.py)."""
    in_mig = {g.index for g in facts.nvidia.gpus if g.mig_mode}
    autodetect = slurm_of(host).gres_autodetect != "off"
    listed: list[dict[str, Any]] = []
    problems: list[str] = []
    for gpu in gpus:
        if gpu["index"] not in in_mig:
            listed.append(gpu)
            continue
        slices, why = mig_gres.mig_slices(host, gpu, facts.mig, autodetect)
        listed += slices
        problems += why
    return listed, problems


def _gpus(host: Host, nvidia: NvidiaFacts, cpu: CpuFacts) -> tuple[list[dict[str, Any]], list[str]]:
    """The node's GPUs with their gres Type, device minor and Cores=; or why they cannot be listed."""
    on_bus = len(cpu.gpu_cpulists)
    if nvidia.state == "missing":
        if on_bus:
            return [], [f"{host.name} has {on_bus} NVIDIA GPU(s) on its PCI bus and no NVIDIA driver "
                        "(nvidia-smi is not installed): slurm.conf would list it without GPUs"]
        return [], []  # a CPU-only node
    if nvidia.state == "no-devices" and not on_bus:
        return [], []
    if nvidia.state != "ok":
        return [], [f"{host.name}: its GPUs could not be read ({nvidia.message or nvidia.state}): "
                    "slurm.conf needs their number and model"]
    if nvidia.lost:
        lost = "; ".join(str(g) for g in nvidia.lost)
        return [], [f"{host.name}: {lost}: slurm.conf would count {len(nvidia.gpus)} GPU(s) where the node has "
                    f"{len(nvidia.gpus) + len(nvidia.lost)}"]
    settings = slurm_of(host)
    autodetect = settings.gres_autodetect != "off"
    all_cores = len(cpu_facts.core_order(cpu))
    gpus, problems = [], []
    for gpu in nvidia.gpus:
        address = pci.address(gpu.bus_id)
        if settings.gpu_type:
            kind = settings.gpu_type
            if autodetect and kind not in detected_name(gpu.name):
                problems.append(
                    f"{host.name}: provision_slurm.gpu_type {kind!r} is not part of the name AutoDetect="
                    f"{settings.gres_autodetect} gives {gpu.label} ({detected_name(gpu.name)}): slurmd would not "
                    f"match them (gres.conf(5), Type); use e.g. {autodetect_type(gpu.name)!r}")
        else:
            kind = autodetect_type(gpu.name) if autodetect else gpu_type(gpu.name)
        # /dev/nvidiaN: N is the driver's device minor, read from /proc/driver/nvidia where the driver says it;
        # else the nvidia-smi index, which is the minor in the normal case (both follow PCI bus order).
        minor = cpu.gpu_minors.get(address, gpu.index)
        cpulist = cpu.gpu_cpulists.get(address)
        cores = cpu_facts.abstract_cores(cpu, cpulist) if cpulist else None
        if cores is not None and len(cores) == all_cores:
            cores = None  # every core is as close as any other (one socket, a VM): gres.conf(5) says omit Cores
        gpus.append({"index": gpu.index, "type": kind, "minor": minor,
                     "cores": cpu_facts.format_ranges(cores) if cores else None})
    return gpus, problems
