"""RDMA port checks (/sys/class/infiniband/HCA/ports/N, read with the network in the facts batch: nccl/facts.py):
every port NCCL may use, InfiniBand or RoCE, is ACTIVE and LinkUp, at the rate expected, and has counted no link
error since boot. A port down makes NCCL fail or fall back to sockets; a slow one sets the pace of every
collective; errors are a cable going bad. Hardware health: judged with or without an nccl block. The rules:
nccl/rdma.py."""

from __future__ import annotations

import pytest

from provision.capabilities.nccl import gdr, rdma
from provision.capabilities.nccl.settings import NcclSettings
from provision.core.checks import fail_each, note


def check_rdma_ports_are_up_at_rate_without_errors(node):
    settings = node.inventory.settings.nccl or NcclSettings()
    if settings.ib_disable:
        pytest.skip("not applicable: nccl.ib_disable is set (NCCL uses no RDMA port)")
    if node.facts.interfaces is None:
        pytest.skip("the network was not read")
    if not node.facts.rdma:
        pytest.skip("not applicable: no RDMA device (/sys/class/infiniband is empty)")
    ports = rdma.nccl_ports(settings.ib_hca, node.facts.rdma)
    if not ports:
        pytest.skip(f"not applicable: NCCL_IB_HCA={settings.ib_hca} leaves out every RDMA port here "
                    f"({', '.join(rdma.subject(p) for p in node.facts.rdma)})")
    for port in ports:
        if port.state is None and port.phys_state is None:
            note(node, f"{port.name}: its state could not be read (/sys/class/infiniband/{port.hca}/ports/"
                       f"{port.port}/state)")
    fail_each(rdma.findings(ports, settings.expected_ib_rate_gbps))


def check_gpudirect_rdma_is_available_where_nccl_uses_it(node):
    """A GPU and an RDMA NIC NCCL may use within NCCL_NET_GDR_LEVEL of each other (the 8-GPU boxes' GPUs and NICs
    behind one PCIe switch) need a peer-memory module or DMA-BUF: nccl/gdr.py."""
    settings = node.inventory.settings.nccl or NcclSettings()
    if settings.ib_disable:
        pytest.skip("not applicable: nccl.ib_disable is set (NCCL uses no RDMA port)")
    matrix = node.facts.topology.matrix if node.facts.topology else None
    if matrix is None:
        pytest.skip("the topology was not read (nvidia-smi topo -m)")
    if settings.net_gdr_level == "LOC":
        pytest.skip("not applicable: nccl.net_gdr_level LOC turns GPUDirect RDMA off")
    level = gdr.TOPO_LEVEL.get(settings.net_gdr_level or "", settings.net_gdr_level or gdr.DEFAULT_LEVEL)
    rule = f"NCCL_NET_GDR_LEVEL={settings.net_gdr_level}" if settings.net_gdr_level else \
        f"NCCL's default GDR level, {level}"
    if settings.ib_hca and node.facts.rdma:
        nics = {port.hca for port in rdma.nccl_ports(settings.ib_hca, node.facts.rdma)}
    else:
        nics = None
    pairs = gdr.near_pairs(matrix, nics, level)
    if not pairs:
        pytest.skip(f"not applicable: no GPU has an RDMA NIC NCCL may use at {level} or closer ({rule}): NCCL "
                    "would not use GPUDirect RDMA")
    found = gdr.finding(node.facts.driver, pairs, level, rule)
    if found:
        fail_each([found])
