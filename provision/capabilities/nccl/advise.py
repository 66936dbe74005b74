"""provision advise: how well a data-parallel training job scales over the cluster's links, what would help, and
how many GPUs its model state needs. Pure arithmetic, no I/O: the command reads the inventory and prints.

The model (../shared/reference, section 7, from nccl-tests' doc/PERFORMANCE.md):

- a ring all-reduce of S gradient bytes over N ranks sends 2(N-1)/N x S bytes from every rank, and the same
  through every node's links (each ring enters and leaves a node once), so Tc = 2(N-1)/N x S / node bandwidth;
- under weak scaling (the same batch per GPU), a step takes Ts + Tc where one GPU takes Ts: eta = Ts/(Ts+Tc).

Its limits: no overlap of communication and compute (DDP overlaps some: real eta can be higher), bandwidth only
(no per-message latency: small models on many nodes do worse), links inside a node (PCIe, NVLink) not counted.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import math
import re
from dataclasses import dataclass, replace

from provision.capabilities.nccl.interfaces import parse_ifname

if TYPE_CHECKING:  # types only
    from provision.inventory.model import Host

GIB = 2**30
BF16_BYTES = 2
# Mixed-precision training with Adam keeps, per parameter (Hugging Face Transformers docs, "Model training
# anatomy", section "Anatomy of Model's Memory": "A typical model trained in mixed precision with AdamW requires
# 18 bytes per model parameter plus activation memory"; docs/source/en/model_memory_anatomy.md):
#   weights 6 = an fp16/bf16 copy for forward and backward (2) + an fp32 master copy for the update (4),
#   gradients 4 (that page keeps them in fp32), Adam's two moments 8 (fp32 momentum 4 + fp32 variance 4).
# The ZeRO paper (Rajbhandari et al., 2019, section 3.1) counts 16, with 2-byte gradients: 18 is the safer side.
BYTES_PER_PARAM_MIXED_ADAM = 18
# Activations, temporary buffers, the CUDA context and fragmentation come on top; 25% is a rule of thumb.
HEADROOM = 1.25
MODEL_LIMITS = ("weak scaling, eta = Ts/(Ts+Tc); communication not overlapped with compute; "
                "bandwidth only, no latency")


# --- sizes -------------------------------------------------------------------------------------------------

SUFFIXES = {"": 1, "k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}
COUNT = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(e[+-]?\d+)?\s*([kmbgt]?)", re.IGNORECASE)


def parse_count(text: str) -> int:
    """A parameter count as people write it: 25M, 25.6M, 1.5B, 7e9, 350k (M is million, not milli).
    Raises ValueError for anything else, or a count below 1."""
    match = COUNT.fullmatch(text.strip())
    if not match:
        raise ValueError(f"{text!r} is not a count: write it like 25M, 25.6M, 1.5B, 7e9 or 350k")
    number, exponent, suffix = match.groups()
    count = round(float(number + (exponent or "")) * SUFFIXES[suffix.lower()])
    if count < 1:
        raise ValueError(f"{text!r}: a model has at least 1 parameter")
    return count


def format_count(count: float) -> str:
    """25000000 -> 25M, 1.5e9 -> 1.5B: the way --params takes it."""
    for suffix, size in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if count >= size:
            return f"{count / size:.4g}{suffix}"
    return f"{count:g}"


def format_bytes(count: float) -> str:
    """SI, like link speeds: 1.5e8 -> 150 MB."""
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if count >= size:
            return f"{count / size:.4g} {unit}"
    return f"{count:g} B"


def format_seconds(seconds: float) -> str:
    return f"{seconds:.2f} s" if seconds >= 1 else f"{seconds * 1000:.1f} ms"


def format_speed(mbps: float) -> str:
    return f"{mbps / 1000:g} Gb/s" if mbps >= 1000 else f"{mbps:g} Mb/s"


# --- the cluster's network, from the options or the inventory -----------------------------------------------

@dataclass(frozen=True)
class Network:
    nodes: int
    gpus_per_node: int
    link_mbps: int  # per link, the slowest link of the cluster: a ring runs at its slowest hop
    links: int  # per node, that NCCL spreads the traffic over

    @property
    def ranks(self) -> int:
        return self.nodes * self.gpus_per_node


def network_from_hosts(hosts: list[Host], nodes: int | None = None, gpus_per_node: int | None = None,
                       link_mbps: int | None = None, links: int | None = None) -> tuple[Network, list[str]]:
    """The figures the options leave out, taken from the selected hosts' settings; the notes say what was assumed.
    Raises ValueError, naming the option, when a figure is given nowhere."""
    notes: list[str] = []
    nodes = len(hosts) if nodes is None else nodes
    if nodes < 2:
        raise ValueError(f"{nodes} host selected: its all-reduce crosses no network between nodes, which is what "
                         "this estimate is about; select 2 or more hosts, or give --nodes N")
    if gpus_per_node is None:
        gpus_per_node = _gpus_per_node(hosts, notes)
    link_mbps = _slowest_link_mbps(hosts) if link_mbps is None else link_mbps
    if link_mbps is None:
        raise ValueError("no link speed: give --link-mbps (10 GbE: 10000), or set provision_nccl.expected_link_speed_mbps "
                         "for the hosts in the inventory")
    if links is None:
        links = _links_per_node(hosts, notes)
    return Network(nodes, gpus_per_node, link_mbps, links), notes


def _gpus_per_node(hosts: list[Host], notes: list[str]) -> int:
    counts = {h.name: (h.settings.gpu.count if h.settings.gpu else None) for h in hosts}
    unset = [name for name, count in counts.items() if count is None]
    if unset:
        notes.append(f"provision_gpu.count is not set for {_names(unset)}: 1 GPU per node assumed (--gpus-per-node G)")
    distinct = {count or 1 for count in counts.values()} or {1}
    if len(distinct) > 1:
        raise ValueError(f"the selected hosts have different GPU counts ({', '.join(map(str, sorted(distinct)))}): "
                         "select hosts of one kind with --limit, or give --gpus-per-node")
    return distinct.pop()


def _slowest_link_mbps(hosts: list[Host]) -> int | None:
    speeds = [h.settings.nccl.expected_link_speed_mbps for h in hosts if h.settings.nccl]
    return min((s for s in speeds if s is not None), default=None)


def _links_per_node(hosts: list[Host], notes: list[str]) -> int:
    """An exact list (=a,b) names the links; a prefix or an exclusion may take any number of ports (only the
    host knows, and this reads nothing from it): 1 assumed, and said."""
    ifnames = {h.settings.nccl.socket_ifname if h.settings.nccl else None for h in hosts}
    counts = []
    for ifname in ifnames:
        exclude, exact, items = parse_ifname(ifname) if ifname else (False, False, [])
        if exact and not exclude:
            counts.append(len(items))
            continue
        counts.append(1)
        kind = "not set" if not ifname else f"{ifname}, {'an exclusion' if exclude else 'a prefix'}: it may take " \
            "more than one port"
        notes.append(f"provision_nccl.socket_ifname is {kind}; 1 link per node assumed, --links N says how many")
    return min(counts, default=1)  # the node with the fewest links slows the ring


def _names(names: list[str]) -> str:
    return ", ".join(names[:3]) + (f" (+{len(names) - 3} more)" if len(names) > 3 else "")


# --- the model ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Job:
    params: int
    network: Network
    bytes_per_grad: int = 4
    steps_per_allreduce: int = 1  # > 1: gradient accumulation
    step_s: float | None = None  # Ts, measured: one step's compute on one GPU
    comm_s: float | None = None  # Tc, measured: one all-reduce


def allreduce_bytes_per_rank(job: Job) -> float:
    """What each rank (and each node's links) sends in one ring all-reduce of the gradients: 2(N-1)/N x S."""
    ranks = job.network.ranks
    return 2 * (ranks - 1) / ranks * job.params * job.bytes_per_grad


def node_bytes_per_second(network: Network) -> float:
    """The node's links added up; Mb/s are SI megabits (10 GbE = 10e9 bit/s)."""
    return network.link_mbps * 1e6 * network.links / 8


def estimated_comm_s(job: Job) -> float:
    return allreduce_bytes_per_rank(job) / node_bytes_per_second(job.network)


def efficiency(step_s: float, comm_s: float, steps_per_allreduce: int = 1) -> float:
    """eta = k*Ts / (k*Ts + Tc): with accumulation over k steps, one all-reduce per k steps of compute."""
    compute_s = steps_per_allreduce * step_s
    return compute_s / (compute_s + comm_s)


@dataclass(frozen=True)
class Scenario:
    key: str  # for scripts: as_configured, bf16_gradients, accumulation, second_link
    what: str
    comm_s: float  # one all-reduce
    steps_per_allreduce: int
    eta: float | None  # None without a measured step time
    basis: str  # "measured" (Tc as measured) or "model"


def what_if(job: Job, accumulate: int = 2) -> tuple[list[Scenario], list[str]]:
    """The job as configured, then each change added to the ones before; and why a change was left out.

    Each scenario's Tc is the starting Tc (measured when given, else the estimate) scaled by what the model says
    the change does to it, so a measured Tc carries the cluster's real overheads into every line."""
    start_s = job.comm_s if job.comm_s is not None else estimated_comm_s(job)
    measured = job.comm_s is not None
    scenarios = [_scenario("as_configured", "as configured", job, job, start_s, "measured" if measured else "model")]
    skipped = []
    current = job
    for key, change in CHANGES:
        what, changed = change(current, accumulate)
        if changed is None:
            skipped.append(what)
            continue
        current = changed
        scenarios.append(_scenario(key, what, job, current, start_s, "model"))
    return scenarios, skipped


def _scenario(key: str, what: str, start: Job, job: Job, start_s: float, basis: str) -> Scenario:
    comm_s = start_s * estimated_comm_s(job) / estimated_comm_s(start)
    eta = efficiency(job.step_s, comm_s, job.steps_per_allreduce) if job.step_s else None
    return Scenario(key, what, comm_s, job.steps_per_allreduce, eta, basis)


# A change: (what it is, the job with it), or (why it does not apply, None).

def _bf16_gradients(job: Job, accumulate: int) -> tuple[str, Job | None]:
    if job.bytes_per_grad <= BF16_BYTES:
        return f"bf16 gradients: already {job.bytes_per_grad} bytes per gradient", None
    return (f"+ bf16 gradients ({BF16_BYTES} bytes, not {job.bytes_per_grad})",
            replace(job, bytes_per_grad=BF16_BYTES))


def _accumulation(job: Job, accumulate: int) -> tuple[str, Job | None]:
    return f"+ accumulate gradients over {accumulate} steps", replace(job, steps_per_allreduce=accumulate)


def _second_link(job: Job, accumulate: int) -> tuple[str, Job | None]:
    links, speed = job.network.links, format_speed(job.network.link_mbps)
    if links >= 2:
        return f"a second link per node: the cluster already uses {links} links per node", None
    return f"+ a second {speed} link per node", replace(job, network=replace(job.network, links=2))


CHANGES = (("bf16_gradients", _bf16_gradients), ("accumulation", _accumulation), ("second_link", _second_link))


# --- memory ------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class MemoryEstimate:
    bytes_needed: float  # the model state with headroom, activations not counted
    gpu_memory_gib: float
    min_gpus: int


def memory_estimate(params: int, gpu_memory_gib: float) -> MemoryEstimate:
    """The fewest GPUs of gpu_memory_gib that can hold the training state of mixed-precision Adam (sharded: plain
    data parallelism keeps a whole copy on every GPU)."""
    needed = params * BYTES_PER_PARAM_MIXED_ADAM * HEADROOM
    return MemoryEstimate(needed, gpu_memory_gib, math.ceil(needed / (gpu_memory_gib * GIB)))


# --- output ------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Advice:
    job: Job
    estimated_comm_s: float
    scenarios: list[Scenario]
    skipped: list[str]
    memory: MemoryEstimate | None
    notes: list[str]


def advise(job: Job, accumulate: int = 2, gpu_memory_gib: float | None = None,
           notes: list[str] | None = None) -> Advice:
    scenarios, skipped = what_if(job, accumulate)
    memory = memory_estimate(job.params, gpu_memory_gib) if gpu_memory_gib else None
    return Advice(job, estimated_comm_s(job), scenarios, skipped, memory, list(notes or []))


def report_lines(advice: Advice) -> list[str]:
    """The human report: the inputs, the estimate, the what-if table, the memory line, the notes."""
    lines = [*_input_lines(advice), "",
             f"  {'what if (each line adds to the ones above)':<46} {'Tc':>8}  {'eta':>6}  figures"]
    for s in advice.scenarios:
        eta = f"{s.eta:.1%}" if s.eta is not None else "-"
        basis = "measured Tc" if s.basis == "measured" else "model estimate"
        lines.append(f"  {s.what:<46} {format_seconds(s.comm_s):>8}  {eta:>6}  {basis}")
    lines += [f"  skipped: {why}" for why in advice.skipped]
    if advice.memory:
        lines += ["", *memory_lines(advice.job.params, advice.memory)]
    lines += [""] + [f"note: {note}" for note in advice.notes]
    lines.append(f"model: {MODEL_LIMITS}")
    return lines


def _input_lines(advice: Advice) -> list[str]:
    job, net = advice.job, advice.job.network
    gpus, links = _plural(net.gpus_per_node, "GPU"), _plural(net.links, "link")
    step = f"step {job.step_s * 1000:g} ms" if job.step_s else "no step time (--step-ms): no efficiency"
    measured = f", {format_seconds(job.comm_s)} measured" if job.comm_s is not None else ""
    return [f"{net.nodes} nodes x {gpus} = {net.ranks} ranks; {links} of {format_speed(net.link_mbps)} per node; "
            f"{format_count(job.params)} parameters, {job.bytes_per_grad}-byte gradients; {step}",
            f"ring all-reduce: 2(N-1)/N x {format_bytes(job.params * job.bytes_per_grad)} = "
            f"{format_bytes(allreduce_bytes_per_rank(job))} per rank; "
            f"Tc {format_seconds(advice.estimated_comm_s)} estimated (model){measured}"]


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def memory_lines(params: int, memory: MemoryEstimate) -> list[str]:
    need = (f"memory: {format_count(params)} x {BYTES_PER_PARAM_MIXED_ADAM} bytes (mixed-precision Adam) "
            f"x {HEADROOM:g} headroom = {memory.bytes_needed / GIB:.3g} GiB")
    if memory.min_gpus == 1:
        return [f"{need}: fits on one {memory.gpu_memory_gib:g} GiB GPU"]
    return [f"{need}: at least {memory.min_gpus} GPUs of {memory.gpu_memory_gib:g} GiB,",
            "  with the state sharded across them (ZeRO, FSDP): plain data parallelism keeps a whole copy on each"]


def to_json(advice: Advice) -> dict[str, Any]:
    job, net = advice.job, advice.job.network
    return {
        "inputs": {"params": job.params, "bytes_per_grad": job.bytes_per_grad, "nodes": net.nodes,
                   "gpus_per_node": net.gpus_per_node, "ranks": net.ranks, "link_mbps": net.link_mbps,
                   "links": net.links, "step_s": job.step_s, "comm_s_measured": job.comm_s},
        "allreduce_bytes_per_rank": allreduce_bytes_per_rank(job),
        "comm_s_estimated": advice.estimated_comm_s,
        "scenarios": [{"scenario": s.key, "what": s.what, "comm_s": s.comm_s,
                       "steps_per_allreduce": s.steps_per_allreduce, "eta": s.eta, "basis": s.basis}
                      for s in advice.scenarios],
        "skipped": advice.skipped,
        "memory": None if advice.memory is None else {
            "bytes_per_param": BYTES_PER_PARAM_MIXED_ADAM, "headroom": HEADROOM,
            "bytes_needed": advice.memory.bytes_needed, "gpu_memory_gib": advice.memory.gpu_memory_gib,
            "min_gpus": advice.memory.min_gpus},
        "notes": advice.notes,
        "model": MODEL_LIMITS,
    }
