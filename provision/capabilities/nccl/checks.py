"""Network checks: the interfaces NCCL will use on the node (by NCCL's own rules, provision/capabilities/nccl/interfaces.py) are the
ones the inventory's nccl block means: all there, up, addressed, at the expected speed, none of them lo."""

from __future__ import annotations

import pytest

from provision.capabilities.nccl import interfaces as nccl
from provision.core.checks import fail


def check_nccl_interfaces_are_up_at_speed(node):
    settings = node.inventory.settings.nccl
    if settings is None:
        pytest.skip("the inventory sets no nccl block for this host")
    wrong = nccl.node_problems(settings, node.facts)
    if wrong:
        rule = f"NCCL_SOCKET_IFNAME={settings.socket_ifname}" if settings.socket_ifname else "NCCL's own choice"
        speed = f" at {settings.expected_link_speed_mbps} Mb/s" if settings.expected_link_speed_mbps else ""
        fail(f"every interface NCCL will use ({rule}) up, addressed{speed}",
             "; ".join(wrong),
             "a port down: check its cable and the switch port; a slow port: it is not the fabric (the 1GbE "
             "uplink?), make socket_ifname exact (=ens803f0,ens803f1) or move the cable; none matched: a NIC "
             "renamed after a new card or kernel? fix nccl.socket_ifname")
