"""Network checks: the interfaces the inventory's NCCL_SOCKET_IFNAME selects exist, are up, at the speed expected."""

from __future__ import annotations

import pytest

from provision import nccl
from provision.verify import fail


def check_nccl_interfaces_are_up_at_speed(node):
    settings = node.inventory.settings.nccl
    if settings is None or settings.socket_ifname is None:
        pytest.skip("the inventory sets no nccl.socket_ifname for this host")
    interfaces = {i.name: i for i in node.facts.interfaces or []}
    ifname, expected = settings.socket_ifname, settings.expected_link_speed_mbps
    selected = nccl.selected_interfaces(ifname, list(interfaces))
    want = "up" + (f" at {expected} Mb/s" if expected else "")
    if not selected:
        fail(f"NCCL_SOCKET_IFNAME={ifname} to select an interface {want}",
             f"none of {', '.join(interfaces) or 'no interface'} matches",
             "fix nccl.socket_ifname, or the interface names (a renamed NIC after a new card or kernel?)")
    wrong = []
    for name in selected:
        nic = interfaces[name]
        if nic.operstate != "up":
            wrong.append(f"{name} {nic.operstate}")
        elif expected and nic.speed_mbps != expected:
            wrong.append(f"{name} up at {nic.speed_mbps or 'unknown'} Mb/s")
    if wrong:
        fail(f"every interface NCCL_SOCKET_IFNAME={ifname} selects ({', '.join(selected)}) {want}", ", ".join(wrong),
             "a port down: check its cable and the switch port; a slow port: it is not the fabric (the 1GbE uplink?), "
             "make socket_ifname exact (=ens803f0,ens803f1) or move the cable")
