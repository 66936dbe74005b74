"""RDMA port checks (/sys/class/infiniband/HCA/ports/N, read with the network in the facts batch: nccl/facts.py):
every port NCCL may use, InfiniBand or RoCE, is ACTIVE and LinkUp, at the rate expected, and has counted no link
error since boot. A port down makes NCCL fail or fall back to sockets; a slow one sets the pace of every
collective; errors are a cable going bad. Hardware health: judged with or without an nccl block. The rules:
nccl/rdma.py."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from provision.capabilities.nccl import rdma
from provision.capabilities.nccl.settings import NcclSettings
from provision.core.checks import fail_each, note

if TYPE_CHECKING:  # types only
    from provision.verify.model import Node


def check_rdma_ports_are_up_at_rate_without_errors(node: Node) -> None:
    """Reads: provision_nccl (ib_disable, ib_hca, expected_ib_rate_gbps); each RDMA port's state, physical state, rate
    and error counters (/sys/class/infiniband/*/ports/*).
    Next step: a port down or slow: check its cable, transceiver and switch port (ibstat); errors counted: replace
    the cable going bad"""
    settings = node.inventory.settings.nccl or NcclSettings()
    if settings.ib_disable:
        pytest.skip("not applicable: provision_nccl.ib_disable is set (NCCL uses no RDMA port)")
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

