"""Network checks: the interfaces NCCL will use on the node (by NCCL's own rules, provision/capabilities/nccl/interfaces.py) are the
ones the inventory's nccl block means: all there, up, addressed, at the expected speed, none of them lo."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from provision.capabilities.nccl import interfaces as nccl
from provision.core.checks import Finding, fail_each

if TYPE_CHECKING:  # types only
    from provision.verify.model import Node


def check_nccl_interfaces_are_up_at_speed(node: Node) -> None:
    """Reads: provision_nccl (socket_ifname, expected_link_speed_mbps, allow_mixed_speeds); the node's interfaces,
    addresses and speeds (ip -j addr, /sys/class/net/*).
    Next step: as each finding says: bring the interface up or address it, fix the cable or the switch port, or
    change provision_nccl.socket_ifname to the interfaces meant"""
    settings = node.inventory.settings.nccl
    if settings is None:
        pytest.skip("the inventory sets no nccl block for this host")
    wrong = nccl.node_problems(settings, node.facts)
    if wrong:
        rule = f"NCCL_SOCKET_IFNAME={settings.socket_ifname}" if settings.socket_ifname else "NCCL's own choice"
        speed = f" at {settings.expected_link_speed_mbps} Mb/s" if settings.expected_link_speed_mbps else ""
        # one finding per kind (each has its own next step), and per cause where another check names it
        kinds = dict.fromkeys((p.kind, p.because) for p in wrong)
        fail_each([Finding(f"every interface NCCL will use ({rule}) up, addressed{speed}",
                           "; ".join(p.text for p in wrong if (p.kind, p.because) == kind), nccl.KINDS[kind[0]],
                           because=kind[1])
                   for kind in kinds])
