"""nvidia-smi topo -m: the GPUs' (and RDMA NICs') PCIe and NVLink topology."""

from __future__ import annotations

from collections import namedtuple

from .gpu import Gpu, Host

TOPO_LEGEND = """
Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks
"""
# DGX-1 (8x V100 SXM2) hybrid cube-mesh: the NVLink bond between each pair, as its topo -m prints it.
DGX1_LINKS = (
    (0, 1, 1, 2, 2, 0, 0, 0),
    (1, 0, 2, 1, 0, 2, 0, 0),
    (1, 2, 0, 2, 0, 0, 1, 0),
    (2, 1, 2, 0, 0, 0, 0, 1),
    (2, 0, 0, 0, 0, 1, 1, 2),
    (0, 2, 0, 0, 1, 0, 2, 1),
    (0, 0, 1, 0, 1, 2, 0, 2),
    (0, 0, 0, 1, 2, 1, 2, 0),
)


def numa_node(host: Host, index: int) -> int:
    return index * host.state["numa_nodes"] // max(1, len(host.gpus))


def cpu_affinity(host: Host, node: int) -> str:
    per_node = max(1, host.state["cpus"] // host.state["numa_nodes"])
    return f"{node * per_node}-{(node + 1) * per_node - 1}"


def nvlinks(a: Gpu, b: Gpu) -> int:
    """How many NVLinks bond two GPUs (0: none)."""
    if a.model is not b.model or not a.model.nvlink:
        return 0
    if a.model.nvlink == "all":
        return a.model.nvlink_links
    i, j = a.record["slot"], b.record["slot"]
    return DGX1_LINKS[i][j] if i < 8 and j < 8 else 0


# One row (and column) of topo -m, a GPU or a NIC, and where it sits. label: GPU0.., NIC0..; switch: the
# slot of the GPU whose PCIe switch it is behind (a GPU: its own; None: none); tail: its CPU Affinity, NUMA
# Affinity, (nvidia-smi's extra tab) and GPU NUMA ID cells; gpu: the Gpu (a NIC: None); name: a NIC's device
# name, for the NIC Legend.
TopoEnd = namedtuple("TopoEnd", "label numa switch tail gpu name", defaults=(None, ""))


def topo_ends(host: Host) -> list:
    ends = []
    for g in host.gpus:
        node = numa_node(host, g.index)
        ends.append(TopoEnd(f"GPU{g.index}", node, g.record["slot"], (cpu_affinity(host, node), str(node), "", "N/A"),
                            gpu=g))
    numa_of_slot = {end.switch: end.numa for end in ends}
    for k, nic in enumerate(host.nics):
        numa = nic["numa"] if nic.get("numa") is not None else numa_of_slot.get(nic.get("near_gpu"), 0)
        # A NIC row's affinity cells are empty, every tab still printed (the della H100 capture).
        ends.append(TopoEnd(f"NIC{k}", numa, nic.get("near_gpu"), ("", "", "", ""), name=nic["name"]))
    return ends


def topo_cell(host: Host, a: TopoEnd, b: TopoEnd) -> str:
    if a is b:
        return " X "
    links = nvlinks(a.gpu, b.gpu) if a.gpu is not None and b.gpu is not None else 0
    if links:
        return f"NV{links}"
    if a.switch is not None and a.switch == b.switch:  # two GPUs never share one: each has its own slot
        return "PIX"
    if host.state["numa_nodes"] == 1:
        return "PHB"
    return "NODE" if a.numa == b.numa else "SYS"


def render_topo(host: Host) -> str:
    ends = topo_ends(host)
    header = [end.label for end in ends] + ["CPU Affinity", "NUMA Affinity", "GPU NUMA ID"]
    lines = ["\t\x1b[4m" + "\t".join(header) + "\x1b[0m"]
    lines += ["\t".join([a.label] + [topo_cell(host, a, b) for b in ends] + list(a.tail)) for a in ends]
    nics = [f"  {end.label}: {end.name}\n" for end in ends if end.gpu is None]
    return "\n".join(lines) + "\n" + TOPO_LEGEND + ("\nNIC Legend:\n\n" + "".join(nics) if nics else "")

