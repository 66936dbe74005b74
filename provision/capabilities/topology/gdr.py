"""GPUDirect RDMA: whether NCCL can move a GPU's data straight to an RDMA NIC on this node, where it would.

NCCL uses GPUDirect RDMA between a GPU and an RDMA NIC at NCCL_NET_GDR_LEVEL or closer in `nvidia-smi topo -m`
(default PXB: behind the same PCIe switches, not through the CPU; ../shared/reference section 2). It needs the
kernel to let the NIC reach GPU memory, one of two ways:
- a peer-memory module: nvidia_peermem (in the driver since R470) or Mellanox's older nv_peer_mem; NCCL tests
  for /sys/module/nvidia_peermem/version or /sys/kernel/mm/memory_peers/nv_mem[_nc]/version (driver/facts.py
  reads the same files). Not loaded by the driver's own boot: `modprobe nvidia-peermem`, and modules-load.d.
- DMA-BUF: the NVIDIA open kernel modules on Linux 5.12 or later (NVIDIA's GPU Operator docs recommend it over
  nvidia_peermem where supported); NCCL then registers GPU memory through the kernel's dma-buf.
Without either, NCCL says nothing and stages every transfer through host memory: slower, never broken.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from provision.capabilities.nccl import rdma
from provision.capabilities.topology.topo import LEVELS, Topology, level_of
from provision.core.checks import WARNING, Finding

if TYPE_CHECKING:  # types only
    from provision.capabilities.driver.facts import DriverFacts
    from provision.capabilities.host import HostFacts
    from provision.capabilities.nccl.settings import NcclSettings

DEFAULT_LEVEL = "PXB"  # NCCL_NET_GDR_LEVEL's default
TOPO_LEVEL = {"NVL": "NV"}  # NCCL's word -> topo -m's, where they differ (LOC: GDR off)
DMA_BUF_KERNEL = (5, 12)


@dataclass(frozen=True)
class GdrUse:
    """Where NCCL would use GPUDirect RDMA on a host: (GPU, NIC device, cell) pairs at `level` or closer, by `rule`."""

    pairs: list[tuple[str, str, str]]
    level: str
    rule: str  # "NCCL_NET_GDR_LEVEL=PIX" or "NCCL's default GDR level, PXB"


def nccl_would_use(settings: NcclSettings, facts: HostFacts) -> GdrUse | str:
    """Where NCCL, as the nccl block sets it, would use GPUDirect RDMA on this host; else why it would not."""
    if settings.ib_disable:
        return "not applicable: provision_nccl.ib_disable is set (NCCL uses no RDMA port)"
    matrix = facts.topology.matrix if facts.topology else None
    if matrix is None:
        return "the topology was not read (nvidia-smi topo -m)"
    if settings.net_gdr_level == "LOC":
        return "not applicable: provision_nccl.net_gdr_level LOC turns GPUDirect RDMA off"
    level = TOPO_LEVEL.get(settings.net_gdr_level or "", settings.net_gdr_level or DEFAULT_LEVEL)
    rule = f"NCCL_NET_GDR_LEVEL={settings.net_gdr_level}" if settings.net_gdr_level else \
        f"NCCL's default GDR level, {level}"
    nics = {port.hca for port in rdma.nccl_ports(settings.ib_hca, facts.rdma)} if settings.ib_hca and facts.rdma \
        else None
    pairs = near_pairs(matrix, nics, level)
    if not pairs:
        return (f"not applicable: no GPU has an RDMA NIC NCCL may use at {level} or closer ({rule}): NCCL would not "
                "use GPUDirect RDMA")
    return GdrUse(pairs, level, rule)


def near_pairs(matrix: Topology, nics: set[str] | None, level: str) -> list[tuple[str, str, str]]:
    """(GPU, NIC device, cell) for every GPU and RDMA NIC at `level` or closer; nics: the devices NCCL may use
    (None: every NIC of the matrix)."""
    limit = LEVELS.index(level)
    pairs = []
    for gpu in matrix.gpus:
        for label, device in matrix.nics.items():
            cell = matrix.link(gpu, label) or ""
            known = level_of(cell)
            if (nics is None or device in nics) and known is not None and LEVELS.index(known) <= limit:
                pairs.append((gpu, device, cell))
    return pairs


def kernel_at_least(release: str, wanted: tuple[int, int]) -> bool | None:
    """"6.1.0-27-amd64" against (5, 12); None where the release says no version."""
    match = re.match(r"(\d+)\.(\d+)", release)
    return (int(match[1]), int(match[2])) >= wanted if match else None


def dma_buf(driver: DriverFacts) -> bool:
    """The open kernel modules on a kernel with dma-buf for RDMA: NCCL needs no peer-memory module."""
    return bool(driver.loaded_open) and bool(kernel_at_least(driver.kernel, DMA_BUF_KERNEL))


# Where provision has each boot load the peer-memory module (topology/peermem.py writes it).
MODULES_LOAD = "/etc/modules-load.d/provision-nvidia-peermem.conf"


def finding(driver: DriverFacts, pairs: list[tuple[str, str, str]], level: str, rule: str) -> Finding | None:
    """None where GPUDirect RDMA has what it needs (a peer-memory module, or DMA-BUF); else the finding."""
    if driver.peer_memory or dma_buf(driver):
        return None
    shown = ", ".join(f"{gpu}-{nic} {cell}" for gpu, nic, cell in pairs[:4]) + (" ..." if len(pairs) > 4 else "")
    why = ("the proprietary kernel module has no DMA-BUF for it" if not driver.loaded_open
           else f"kernel {driver.kernel or 'unknown'} has no DMA-BUF for it (5.12 or later has)")
    return Finding(
        f"GPUDirect RDMA available where NCCL would use it ({rule}: {shown}): nvidia_peermem loaded, or DMA-BUF",
        f"no peer-memory module loaded (/sys/module/nvidia_peermem/version absent) and {why}",
        "`modprobe nvidia-peermem` on the node loads it now; `provision apply` (provision_driver.peermem) loads it "
        f"and writes {MODULES_LOAD} so each boot loads it; until then NCCL copies every transfer through host "
        "memory (slower, not broken)",
        severity=WARNING)
