"""The fabric part of verify --active (capabilities/active/fabric.py): the ring of port tests over a training
group, what each port is held to, iperf3's JSON, and which node or link a slow result names."""

from __future__ import annotations

import json

from provision.capabilities.active import fabric
from provision.capabilities.nccl.facts import Interface

UP = ("BROADCAST", "UP", "LOWER_UP")


def blade(n: int, speeds=(10000, 10000)) -> list[Interface]:
    return [Interface(f"ens803f{k}", "up", speed, UP, (f"10.{214 + k}.0.{10 + n}/24",)) for k, speed in enumerate(speeds)]


def test_a_ring_is_one_test_per_node_and_port():
    assert fabric.ring(["a"]) == [] and fabric.ring(["a", "b"]) == [("a", "b")]
    assert fabric.ring(["a", "b", "c", "d"]) == [("a", "b"), ("b", "c"), ("c", "d"), ("d", "a")]
    hosts = [f"rtx3090-{n}" for n in range(1, 5)]
    planned = fabric.plan({"rtx3090": hosts}, {h: blade(n) for n, h in enumerate(hosts, 1)}, {})
    assert len(planned.tests) == 8 and planned.notes == {}
    first = planned.tests[0]
    assert (first.client, first.server, first.ifname, first.client_address, first.server_address, first.port) == \
        ("rtx3090-1", "rtx3090-2", "ens803f0", "10.214.0.11", "10.214.0.12", 5201)
    assert (first.expected_mbps, first.rule) == (9000.0, "90% of its 10000 Mb/s link")
    slow_end = fabric.plan({"g": hosts[:2]}, {hosts[0]: blade(1), hosts[1]: blade(2, (10000, 1000))}, {})
    assert slow_end.tests[1].expected_mbps == 900.0  # the slower end's speed
    said = fabric.plan({"g": hosts[:2]}, {hosts[0]: blade(1), hosts[1]: blade(2)}, {hosts[0]: 90.0})
    assert (said.tests[0].expected_mbps, said.tests[0].rule) == (90.0, "active.expected_port_mbps")
    lonely = fabric.plan({"g": hosts[:2]}, {hosts[0]: blade(1), hosts[1]: blade(2)[:1]}, {})
    assert lonely.notes == {hosts[0]: [f"ens803f1 not tested against {hosts[1]}: it has no ens803f1 with an IPv4 "
                                       "address"]}


def test_iperf3_json_reads_the_received_rate_or_its_error():
    done = {"start": {}, "intervals": [], "end": {"sum_sent": {"bits_per_second": 9.5e8, "retransmits": 0},
                                                  "sum_received": {"bits_per_second": 9.41e8}}}
    assert fabric.iperf3_mbps(json.dumps(done)) == (941.0, "")
    refused = {"start": {}, "intervals": [], "end": {}, "error": "unable to connect to server: Connection refused"}
    assert fabric.iperf3_mbps(json.dumps(refused)) == (None, "unable to connect to server: Connection refused")
    assert fabric.iperf3_mbps("iperf3: error - unable to bind") == (None, "iperf3: error - unable to bind")


def results(hosts, slow: dict[tuple[str, str], float], expected=90.0) -> list:
    planned = fabric.plan({"g": hosts}, {h: blade(n) for n, h in enumerate(hosts, 1)}, {h: expected for h in hosts})
    return [fabric.PortResult(t, slow.get((t.client, t.server, t.ifname), 94.0)) for t in planned.tests]


def test_a_node_whose_port_is_short_both_ways_is_named_and_a_short_link_names_both_ends():
    hosts = [f"rtx3090-{n}" for n in range(1, 5)]
    # rtx3090-3's ens803f1 cabled to the 1GbE switch: its test from -2 and its test to -4 fall short
    found = fabric.judge(results(hosts, {("rtx3090-2", "rtx3090-3", "ens803f1"): 9.4,
                                         ("rtx3090-3", "rtx3090-4", "ens803f1"): 9.4}))
    assert list(found) == ["rtx3090-3"]
    [finding] = found["rtx3090-3"]
    assert finding.expected == "rtx3090-3 ens803f1 carrying 90 Mb/s each way (active.expected_port_mbps)"
    assert finding.found == "rtx3090-2 -> rtx3090-3 9 Mb/s; rtx3090-3 -> rtx3090-4 9 Mb/s"
    assert finding.about == ("ens803f1",) and "rtx3090-3's ens803f1" in finding.fix
    one_link = fabric.judge(results(hosts, {("rtx3090-1", "rtx3090-2", "ens803f0"): 40.0}))
    [link] = one_link["rtx3090-1"]
    assert link.expected.startswith("rtx3090-1 ens803f0 -> rtx3090-2 ens803f0 at 90 Mb/s") and link.found == "40 Mb/s"
    pair = fabric.judge(results(hosts[:2], {("rtx3090-1", "rtx3090-2", "ens803f1"): 9.4}))
    assert list(pair) == ["rtx3090-1"] and "the link between them" in pair["rtx3090-1"][0].fix
    assert fabric.judge(results(hosts, {})) == {}
