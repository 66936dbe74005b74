"""Topology checks (`nvidia-smi topo -m`): every GPU has an RDMA NIC as close as the inventory requires. What
crosses the CPU interconnect (SYS) is always said, as a note: cross-socket traffic is what kills training on
8-GPU boxes, but a one-socket host or a TCP-only cluster may have nothing better."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from provision.capabilities.nccl.settings import NcclSettings
from provision.capabilities.topology import gdr, peermem
from provision.capabilities.topology.topo import cross_socket_warnings
from provision.core.checks import fail, fail_each, note

if TYPE_CHECKING:  # types only
    from provision.verify.model import Node


def check_every_gpu_has_a_nic_within_reach(node: Node) -> None:
    """Reads: provision_nccl.require_nic_within; the GPU and NIC topology matrix (nvidia-smi topo -m).
    Next step: move the NIC (or the GPU) behind the same PCIe switch or root complex, or bind each rank to the GPUs
    near its NIC; a layout meant so: lower provision_nccl.require_nic_within"""
    topology = node.facts.topology
    matrix = topology.matrix if topology else None
    for warning in cross_socket_warnings(matrix) if matrix else []:
        note(node, warning)
    settings = node.inventory.settings.nccl
    want = settings.require_nic_within if settings else None
    if want is None:
        pytest.skip("the inventory sets no provision_nccl.require_nic_within for this host")
    expected = f"every GPU with an RDMA NIC at {want} or closer (nvidia-smi topo -m)"
    if matrix is None:
        fail(expected, f"no topology: {topology.message if topology else 'not read'}",
             "is the driver loaded? nvidia-smi topo -m must run on the node")
    far = matrix.gpus_without_nic_within(want)
    if far:
        nearest = {gpu: matrix.nearest_nic(gpu) for gpu in far}
        fail(expected, ", ".join(f"{gpu} nearest {n[0]} at {n[1]}" if n else f"{gpu} no NIC" for gpu, n in
                                 nearest.items()),
             "move the NIC (or the GPU) into a slot behind the same PCIe switch or root complex, or bind each "
             "rank to the GPUs near its NIC; if the layout is meant: lower provision_nccl.require_nic_within")


def check_gpudirect_rdma_is_available_where_nccl_uses_it(node: Node) -> None:
    """A GPU and an RDMA NIC NCCL may use within NCCL_NET_GDR_LEVEL of each other (the 8-GPU boxes' GPUs and NICs
    behind one PCIe switch) need a peer-memory module or DMA-BUF: gdr.py.

    Reads: provision_nccl (ib_disable, ib_hca, net_gdr_level); the topology matrix (nvidia-smi topo -m), the RDMA
    ports and the peer-memory modules loaded.
    Next step: load a peer-memory module (nvidia-peermem) or use a driver and kernel with DMA-BUF, as the finding
    says; or set provision_nccl.net_gdr_level to LOC to turn GPUDirect RDMA off
    """
    why_not = peermem.left_alone(node.inventory, node.facts)
    if why_not:
        pytest.skip(why_not)
    use = gdr.nccl_would_use(node.inventory.settings.nccl or NcclSettings(), node.facts)
    if isinstance(use, str):
        pytest.skip(use)
    found = gdr.finding(node.facts.driver, use.pairs, use.level, use.rule)
    if found:
        fail_each([found])


def check_the_next_boot_kernel_has_nvidia_peermem_where_wanted(node: Node) -> None:
    """Where provision_driver.peermem wants nvidia-peermem, the kernel that boots next has it too (a boot without it
    comes back without GPUDirect RDMA: NCCL copies through host memory). The NVIDIA module itself missing there is
    the driver's check (the_next_boot_kernel_has_the_nvidia_module).

    Reads: provision_driver.peermem, provision_nccl; the topology; the next boot's kernel and its module files.
    Next step: build or install the modules for that kernel, as the finding says"""
    found = peermem.next_boot_stranded(node.inventory, node.facts)
    if found is None:
        pytest.skip("not applicable: nvidia-peermem not wanted here, or the next boot's kernel has it (or is not "
                    "known, or lacks the NVIDIA module itself: the driver's check)")
    fail(f"the kernel that boots next ({found.kernel}: {found.basis}) has nvidia-peermem, which this node wants",
         f"no nvidia-peermem.ko under /lib/modules/{found.kernel}: it would come back without GPUDirect RDMA",
         f"{found.fix}, before the node reboots")
