"""The fabric part of an active run: every port NCCL will use, measured with iperf3 between neighbouring nodes of
each training group, against what the port should carry. Pure: commands/active.py runs the servers and clients.

The pairs are a ring over the group's nodes (inventory order): each node sends to the next and receives from the
one before, every port at once (full duplex: no two tests share a direction of a port), so N nodes take N tests
per port, not N^2. A node's port is in two tests; when both fall short, the port is that node's, and the finding
names it; when one does, the link between the two nodes (a cable, a switch port) is named. With two nodes there
is one test, and the finding names both ends.

What a port should carry: `active.expected_port_mbps` where the inventory says it (the figure a site knows its
ports reach); else PEER_SHARE of the best port of the same link speed measured in the group. The speed file
alone is no promise of throughput (a lab's shaped links, a VM, a shared uplink; whether a port negotiated the
speed the inventory expects is the passive check's, nccl_interfaces_are_up_at_speed), but ports of one speed
on one switch carry alike: one far below its best peer is a cable, a switch port or a NIC.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace

from provision.core.checks import WARNING, Finding

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
    expected_mbps: float | None  # active.expected_port_mbps; None: held to its peers (judge)
    rule: str  # how expected_mbps was had, in words
    speed_mbps: int | None = None  # the slower end's link speed: its peers are the ports of the same speed


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


def ipv4(interface) -> str | None:
    return next((a.split("/")[0] for a in interface.addresses or () if ":" not in a), None)


def plan(groups: dict[str, list[str]], used: dict[str, list], expected_setting: dict[str, float | None]) -> FabricPlan:
    """The tests for every group (group -> its hosts, in inventory order). used: host -> the Interfaces NCCL will
    use there (nccl/interfaces.py select); expected_setting: host -> active.expected_port_mbps."""
    found = FabricPlan()
    for hosts in groups.values():
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
                                            "active.expected_port_mbps" if setting else "",
                                            min(speeds) if speeds else None))
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
    """The results, each test without a figure of its own held to PEER_SHARE of the best one measured among the
    tests of its link speed."""
    best: dict[int | None, float] = {}
    for result in results:
        if result.mbps is not None:
            best[result.test.speed_mbps] = max(best.get(result.test.speed_mbps, 0.0), result.mbps)
    held = []
    for result in results:
        test, top = result.test, best.get(result.test.speed_mbps)
        if test.expected_mbps is None and top:
            speed = f"{test.speed_mbps} Mb/s " if test.speed_mbps else ""
            test = replace(test, expected_mbps=top * PEER_SHARE,
                           rule=f"{PEER_SHARE:.0%} of the best {speed}port measured in the group, {top:.0f} Mb/s")
        held.append(PortResult(test, result.mbps, result.error))
    return held


def judge(results: list[PortResult]) -> dict[str, list[Finding]]:
    """Host -> the fabric findings filed under it: a port of that node, or a link it is the sending end of."""
    results = held_to_peers(results)
    found: dict[str, list[Finding]] = {}
    by_port: dict[tuple[str, str], list[PortResult]] = {}
    for result in results:
        for host in (result.test.client, result.test.server):
            by_port.setdefault((host, result.test.ifname), []).append(result)
    blamed: set[int] = set()
    for (host, ifname), tests in by_port.items():
        if len(tests) >= 2 and all(short(r) for r in tests):  # both of its tests: the port is this node's
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
    """Host -> port -> the slower of its two directions as measured (what the port carries, both ways)."""
    rates: dict[str, dict[str, float]] = {}
    for result in results:
        if result.mbps is None:
            continue
        for host in (result.test.client, result.test.server):
            ports = rates.setdefault(host, {})
            ports[result.test.ifname] = min(ports.get(result.test.ifname, result.mbps), result.mbps)
    return rates


def _port_finding(host: str, ifname: str, tests: list[PortResult]) -> Finding:
    said = "; ".join(f"{r.test.client} -> {r.test.server} {r.mbps:.0f} Mb/s" for r in tests)
    expected = tests[0].test.expected_mbps or 0
    return Finding(f"{host} {ifname} carrying {expected:.0f} Mb/s each way ({tests[0].test.rule})", said,
                   f"{host}'s {ifname}: its cable and switch port (cabled to a slower switch, a damaged cable); "
                   f"`ethtool {ifname}` on {host}; every NCCL collective runs at this port's pace",
                   because=LEADS, about=(ifname,), severity=WARNING)
