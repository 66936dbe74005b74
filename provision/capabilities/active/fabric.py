"""The fabric part of an active run: every port NCCL will use, measured with iperf3 between neighbouring nodes of
each training group, against what the port should carry. Pure: commands/active.py runs the servers and clients.

The pairs are a ring over the group's nodes (inventory order): each node sends to the next and receives from the
one before, every port at once (full duplex: no two tests share a direction of a port), so N nodes take N tests
per port, not N^2. A node's port is in two tests; when both fall short, the port is that node's, and the finding
names it; when one does, the link between the two nodes (a cable, a switch port) is named. With two nodes there
is one test, and the finding names both ends.

What a port should carry: the most of what three things say (the finding names which it was held to):
- the inventory: `provision_active.expected_port_mbps`, the figure a site knows its ports reach;
- its kind: PEER_SHARE of the best other test of a port of the same name in the group (the same port of the same
  NIC on every node: NCCL's socket_ifname picks them alike), whatever speed it negotiated. A port that trained at
  1000 Mb/s where its kind trained at 10000 is held to what its kind carries, never to itself;
- its negotiated speed: PEER_SHARE of the best other test of the group's ports of that link speed.
The speed file alone is no promise of throughput (a lab's shaped links, a VM, a shared uplink; one iperf3 stream
on a 100GbE port), so it says which ports are peers, not a figure; whether a port negotiated the speed the
inventory expects is the passive check's, nccl_interfaces_are_up_at_speed. Ports of one kind on one switch carry
alike: one far below its best peer is a cable, a switch port or a NIC.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Callable

from provision.core.checks import WARNING, Finding

if TYPE_CHECKING:  # types only
    from provision.capabilities.nccl.facts import Interface

PEER_SHARE = 0.7  # a port below 70% of the best of its speed in the group
# A port whose speed file already says it is slow fails the passive check; what was measured follows from it.
LEADS = ("nccl_interfaces_are_up_at_speed",)
SHORT = 1.0  # a test below its expectation (the efficiency is the margin)
FIRST_PORT = 5201  # iperf3's own default, then one more per interface


@dataclass(frozen=True)
class PortTest:
    """One iperf3 test: client (sends) -> server (receives), on the interface both name `ifname`."""

    client: str
    server: str
    ifname: str
    client_address: str
    server_address: str
    port: int
    expected_mbps: float | None  # provision_active.expected_port_mbps; None: held to its peers (judge)
    rule: str  # how expected_mbps was had, in words
    speed_mbps: int | None = None  # the slower end's link speed: its peers are the ports of the same speed
    group: str = ""  # the training group: a port's peers are in it


@dataclass
class PortResult:
    test: PortTest
    mbps: float | None = None
    error: str = ""


@dataclass
class FabricPlan:
    tests: list[PortTest] = field(default_factory=list)
    notes: dict[str, list[str]] = field(default_factory=dict)  # host -> why a port of it is not tested


def ring(hosts: list[str]) -> list[tuple[str, str]]:
    """(client, server) pairs: each host to the next, the last to the first; one pair for two hosts."""
    if len(hosts) < 2:
        return []
    if len(hosts) == 2:
        return [(hosts[0], hosts[1])]
    return [(host, hosts[(i + 1) % len(hosts)]) for i, host in enumerate(hosts)]


def ipv4(interface: Interface) -> str | None:
    return next((a.split("/")[0] for a in interface.addresses or () if ":" not in a), None)


def plan(groups: dict[str, list[str]], used: dict[str, list[Interface]],
         expected_setting: dict[str, float | None]) -> FabricPlan:
    """The tests for every group (group -> its hosts, in inventory order). used: host -> the Interfaces NCCL will
    use there (nccl/interfaces.py select); expected_setting: host -> provision_active.expected_port_mbps."""
    found = FabricPlan()
    for group, hosts in groups.items():
        for client, server in ring(hosts):
            theirs = {i.name: i for i in used.get(server, [])}
            for k, mine in enumerate(used.get(client, [])):
                other = theirs.get(mine.name)
                if other is None or ipv4(mine) is None or ipv4(other) is None:
                    found.notes.setdefault(client, []).append(
                        f"{mine.name} not tested against {server}: it has no {mine.name} with an IPv4 address")
                    continue
                setting = expected_setting.get(client) or expected_setting.get(server)
                speeds = [sp for sp in (mine.speed_mbps, other.speed_mbps) if sp]
                found.tests.append(PortTest(client, server, mine.name, str(ipv4(mine)), str(ipv4(other)),
                                            FIRST_PORT + k, float(setting) if setting else None,
                                            "provision_active.expected_port_mbps" if setting else "",
                                            min(speeds) if speeds else None, group))
    return found


def iperf3_mbps(text: str) -> tuple[float | None, str]:
    """(Mb/s received, "") from `iperf3 -c ... -J`; (None, iperf3's error) when it failed."""
    try:
        data = json.loads(text)
    except ValueError:
        return None, (text.strip().splitlines() or ["no output"])[-1]
    if data.get("error"):
        return None, str(data["error"])
    bits = ((data.get("end") or {}).get("sum_received") or {}).get("bits_per_second")
    return (bits / 1e6, "") if isinstance(bits, (int, float)) else (None, "iperf3 reported no throughput")


def short(result: PortResult) -> bool:
    expected = result.test.expected_mbps
    return result.mbps is not None and expected is not None and result.mbps < expected * SHORT


def held_to_peers(results: list[PortResult]) -> list[PortResult]:
    """The results, each test held to the most that its inventory figure, its kind and its negotiated speed say
    (the module's docstring), with the rule that said most."""
    held = []
    for result in results:
        test = result.test
        said = [(test.expected_mbps, test.rule)] if test.expected_mbps is not None else []
        alike: list[tuple[str, Callable[[PortTest], object]]] = [  # called in this turn of the loop only
            (f"{test.ifname}", lambda t: t.ifname == test.ifname),
            (f"{test.speed_mbps} Mb/s port", lambda t: test.speed_mbps and t.speed_mbps == test.speed_mbps)]
        for of, same in alike:
            top = max((r.mbps for r in results if r is not result and r.mbps is not None and r.test.group == test.group
                       and same(r.test)), default=None)
            if top:
                said.append((top * PEER_SHARE, f"{PEER_SHARE:.0%} of the best other {of} measured in the group, "
                                               f"{top:.0f} Mb/s"))
        if said:
            expected, rule = max(said, key=lambda pair: pair[0])
            test = replace(test, expected_mbps=expected, rule=rule)
        held.append(PortResult(test, result.mbps, result.error))
    return held


def slow_ports(results: list[PortResult]) -> dict[tuple[str, str], list[PortResult]]:
    """(host, port) -> its tests, for each port short in both of its tests (results held to what they should
    carry): the port is that node's, not the link's or its neighbours'."""
    by_port: dict[tuple[str, str], list[PortResult]] = {}
    for result in results:
        for host in (result.test.client, result.test.server):
            by_port.setdefault((host, result.test.ifname), []).append(result)
    return {port: tests for port, tests in by_port.items() if len(tests) >= 2 and all(short(r) for r in tests)}


def judge(results: list[PortResult]) -> dict[str, list[Finding]]:
    """Host -> the fabric findings filed under it: a port of that node, or a link it is the sending end of."""
    results = held_to_peers(results)
    found: dict[str, list[Finding]] = {}
    blamed: set[int] = set()
    for (host, ifname), tests in slow_ports(results).items():  # both of its tests: the port is this node's
        blamed |= {id(r) for r in tests}
        found.setdefault(host, []).append(_port_finding(host, ifname, tests))
    for result in results:
        test = result.test
        if id(result) in blamed:
            continue
        if result.error:
            found.setdefault(test.client, []).append(Finding(
                f"iperf3 from {test.client} to {test.server} on {test.ifname}", f"it failed: {result.error}",
                f"run `iperf3 -s` on {test.server} and `iperf3 -c {test.server_address} -B {test.client_address}` on "
                f"{test.client}: a firewall, or no route between the two {test.ifname} ports", about=(test.ifname,),
                severity=WARNING))
        elif short(result):
            found.setdefault(test.client, []).append(Finding(
                f"{test.client} {test.ifname} -> {test.server} {test.ifname} at {test.expected_mbps:.0f} Mb/s "
                f"({test.rule})", f"{result.mbps:.0f} Mb/s",
                f"the link between them: the cables of both {test.ifname} ports and their switch ports (a port "
                "cabled to a slower switch?); `ethtool` on both", because=LEADS, about=(test.ifname,),
                severity=WARNING))
    return found


def measured(results: list[PortResult]) -> dict[str, dict[str, float]]:
    """Host -> port -> the slower of its directions as measured (what the port carries, both ways). A test that a
    slow port at its other end paced (slow_ports) says nothing of this end: a healthy neighbour of a slow port keeps
    what its other test measured (its only tests paced so: the slower of them all the same)."""
    slow = slow_ports(held_to_peers(results))
    rates: dict[str, dict[str, float]] = {}
    paced: dict[str, dict[str, float]] = {}
    for result in results:
        if result.mbps is None:
            continue
        test = result.test
        for host, other in ((test.client, test.server), (test.server, test.client)):
            by_other = (other, test.ifname) in slow and (host, test.ifname) not in slow
            ports = (paced if by_other else rates).setdefault(host, {})
            ports[test.ifname] = min(ports.get(test.ifname, result.mbps), result.mbps)
    for host, ports in paced.items():
        for ifname, mbps in ports.items():
            rates.setdefault(host, {}).setdefault(ifname, mbps)
    return rates


def _port_finding(host: str, ifname: str, tests: list[PortResult]) -> Finding:
    said = "; ".join(f"{r.test.client} -> {r.test.server} {r.mbps:.0f} Mb/s" for r in tests)
    expected = tests[0].test.expected_mbps or 0
    return Finding(f"{host} {ifname} carrying {expected:.0f} Mb/s each way ({tests[0].test.rule})", said,
                   f"{host}'s {ifname}: its cable and switch port (cabled to a slower switch, a damaged cable); "
                   f"`ethtool {ifname}` on {host}; every NCCL collective runs at this port's pace",
                   because=LEADS, about=(ifname,), severity=WARNING)
