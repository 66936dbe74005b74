"""NVLink checks (`nvidia-smi nvlink -s` and `-e`): every link of a GPU with NVLink is up, at the speed of the
other links of its model, with no error counted. A link down or slow sends NCCL's traffic over the others or
over PCIe (a job runs, slower, or hangs); CRC errors, replays and recoveries are a link going bad."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from provision.capabilities.gpu.checks import gpu_node
from provision.capabilities.gpu.model import GpuFacts
from provision.capabilities.gpu.nvlink import INACTIVE, NvlinkGpu
from provision.core import pci
from provision.core.checks import fail

if TYPE_CHECKING:  # types only
    from provision.verify.model import Node


def nvlink_gpus(node: Node) -> list[tuple[str, str, NvlinkGpu]]:
    """(how to name it: "GPU1 00000000:11:00.0", its PCI slot, its NVLink) for each GPU with NVLink; skips the
    check where it does not apply."""
    nvidia = gpu_node(node)
    if not nvidia.gpus:
        pytest.skip("no GPU read here (see nvidia_smi_reads_the_gpus)")
    if node.facts.nvlink is None:
        pytest.skip("NVLink not read")
    read: dict[str | int | None, GpuFacts] = {g.uuid: g for g in nvidia.gpus} | {g.index: g for g in nvidia.gpus}
    found = []
    for link_gpu in node.facts.nvlink.gpus:
        gpu = read.get(link_gpu.uuid) or read.get(link_gpu.index)
        if link_gpu.links or link_gpu.all_inactive:
            found.append((f"{gpu.label} {gpu.bus_id}" if gpu else f"GPU{link_gpu.index}",
                          pci.slot(gpu.bus_id) if gpu else "", link_gpu))
    if not any(g.links for _, _, g in found):
        pytest.skip("not applicable: no NVLink on these GPUs")
    return found


def check_nvlink_links_are_up_at_speed(node: Node) -> None:
    """A link is down when nvidia-smi says <inactive>, or every link of a GPU is when its model's others have
    links up; below speed when slower than the fastest link of the same model (a model's links all train at
    one speed).

    Reads: provision_gpu; each link's state and speed (nvidia-smi nvlink -s).
    Next step: power the node off and reseat the NVLink bridge (SXM boards: have the baseboard serviced), then check
    again with nvidia-smi nvlink -s
    """
    gpus = nvlink_gpus(node)
    fastest: dict[str, float] = {}  # model -> GB/s
    for _, _, gpu in gpus:
        for link in gpu.links.values():
            if link.speed is not None:
                fastest[gpu.name] = max(fastest.get(gpu.name, 0.0), link.speed)
    wrong: list[str] = []
    slots: dict[str, None] = {}  # an ordered set
    for named, slot, gpu in gpus:
        said = []
        for number, link in sorted(gpu.links.items()):
            if link.state == INACTIVE:
                said.append(f"link {number} inactive")
            elif link.speed is not None and link.speed < fastest[gpu.name]:
                said.append(f"link {number} at {link.speed:g} GB/s of {fastest[gpu.name]:g}")
        if gpu.all_inactive and gpu.name in fastest:
            said.append("every link inactive")
        if said:
            wrong += [f"{named} {words}" for words in said]
            slots[slot] = None
    if wrong:
        fail("every NVLink link up, at the speed of its model's other links", ", ".join(wrong),
             "power the node off and reseat the NVLink bridge (SXM boards: have the baseboard serviced), then "
             "check again with nvidia-smi nvlink -s", about=tuple(s for s in slots if s))


def check_nvlink_has_no_errors(node: Node) -> None:
    """Every counter nvidia-smi names "... Errors" (Replay, Recovery, CRC) at 0: they count since the driver
    loaded, and each one is a retransmission or a retraining of the link.

    Reads: provision_gpu; each link's error counters (nvidia-smi nvlink -e).
    Next step: drain the node and watch nvidia-smi nvlink -e under load: counts that grow mean a failing link
    (reseat the bridge or have the board serviced)
    """
    counted: list[str] = []
    slots: dict[str, None] = {}  # an ordered set
    for named, slot, gpu in nvlink_gpus(node):
        for number, counters in sorted(gpu.error_counts().items()):
            counted.append(f"{named} link {number}: " + ", ".join(f"{name} {n}" for name, n in counters.items()))
            slots[slot] = None
    if counted:
        fail("no NVLink error counted since the driver loaded", "; ".join(counted),
             f"drain {node.name} and watch nvidia-smi nvlink -e under load: counts that grow mean a failing link "
             "(reseat the bridge or have the board serviced); counts that stay came from one event",
             about=tuple(s for s in slots if s))
