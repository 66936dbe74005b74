"""Topology checks (`nvidia-smi topo -m`): every GPU has an RDMA NIC as close as the inventory requires. What
crosses the CPU interconnect (SYS) is always said, as a note: cross-socket traffic is what kills training on
8-GPU boxes, but a one-socket host or a TCP-only cluster may have nothing better."""

from __future__ import annotations

import pytest

from provision.capabilities.topology.topo import cross_socket_warnings
from provision.core.checks import fail, note


def check_every_gpu_has_a_nic_within_reach(node):
    topology = node.facts.topology
    matrix = topology.matrix if topology else None
    for warning in cross_socket_warnings(matrix) if matrix else []:
        note(node, warning)
    settings = node.inventory.settings.nccl
    want = settings.require_nic_within if settings else None
    if want is None:
        pytest.skip("the inventory sets no nccl.require_nic_within for this host")
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
             "rank to the GPUs near its NIC; if the layout is meant: lower nccl.require_nic_within")
