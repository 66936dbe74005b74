"""The fabric part of verify --active (capabilities/active/fabric.py, collective.py): the ring of port tests over
a training group, what each port is held to (the inventory's figure, else its best peer of the same speed),
iperf3's JSON, which node or link a slow result names, and the group's all-reduce held to what the ports carry."""

from __future__ import annotations

import json

from provision.capabilities.active import fabric

from builders.interfaces import blade


def test_a_ring_is_one_test_per_node_and_port():
    assert fabric.ring(["a"]) == [] and fabric.ring(["a", "b"]) == [("a", "b")]
    assert fabric.ring(["a", "b", "c", "d"]) == [("a", "b"), ("b", "c"), ("c", "d"), ("d", "a")]
    hosts = [f"rtx3090-{n}" for n in range(1, 5)]
    planned = fabric.plan({"rtx3090": hosts}, {h: blade(n) for n, h in enumerate(hosts, 1)}, {})
    assert len(planned.tests) == 8 and planned.notes == {}
    first = planned.tests[0]
    assert (first.client, first.server, first.ifname, first.client_address, first.server_address, first.port) == \
        ("rtx3090-1", "rtx3090-2", "ens803f0", "10.214.0.11", "10.214.0.12", 5201)
    assert (first.expected_mbps, first.speed_mbps) == (None, 10000)  # held to its peers (judge)
    slow_end = fabric.plan({"g": hosts[:2]}, {hosts[0]: blade(1), hosts[1]: blade(2, (10000, 1000))}, {})
    assert slow_end.tests[1].speed_mbps == 1000  # the slower end's speed: its peers are the 1000 Mb/s ports
    said = fabric.plan({"g": hosts[:2]}, {hosts[0]: blade(1), hosts[1]: blade(2)}, {hosts[0]: 90.0})
    assert (said.tests[0].expected_mbps, said.tests[0].rule) == (90.0, "provision_active.expected_port_mbps")
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


def results(hosts, slow: dict[tuple[str, str, str], float], expected: float | None = 90.0) -> list:
    setting = {h: expected for h in hosts} if expected else {}
    planned = fabric.plan({"g": hosts}, {h: blade(n) for n, h in enumerate(hosts, 1)}, setting)
    return [fabric.PortResult(t, slow.get((t.client, t.server, t.ifname), 94.0)) for t in planned.tests]


def test_without_a_figure_a_port_is_held_to_its_best_peer_of_the_same_speed():
    hosts = [f"rtx3090-{n}" for n in range(1, 5)]
    slow = {("rtx3090-2", "rtx3090-3", "ens803f1"): 9.4, ("rtx3090-3", "rtx3090-4", "ens803f1"): 9.4}
    found = fabric.judge(results(hosts, slow, expected=None))
    [finding] = found["rtx3090-3"]
    assert finding.expected == ("rtx3090-3 ens803f1 carrying 66 Mb/s each way (70% of the best other ens803f1 "
                                "measured in the group, 94 Mb/s)")
    assert list(found) == ["rtx3090-3"] and fabric.judge(results(hosts, {}, expected=None)) == {}
    carried = fabric.measured(results(hosts, slow, expected=None))
    assert carried["rtx3090-3"] == {"ens803f0": 94.0, "ens803f1": 9.4} and carried["rtx3090-1"]["ens803f1"] == 94.0


def test_a_node_whose_port_is_short_both_ways_is_named_and_a_short_link_names_both_ends():
    hosts = [f"rtx3090-{n}" for n in range(1, 5)]
    # rtx3090-3's ens803f1 cabled to the 1GbE switch: its test from -2 and its test to -4 fall short
    found = fabric.judge(results(hosts, {("rtx3090-2", "rtx3090-3", "ens803f1"): 9.4,
                                         ("rtx3090-3", "rtx3090-4", "ens803f1"): 9.4}))
    assert list(found) == ["rtx3090-3"]
    [finding] = found["rtx3090-3"]
    assert finding.expected == "rtx3090-3 ens803f1 carrying 90 Mb/s each way (provision_active.expected_port_mbps)"
    assert finding.found == "rtx3090-2 -> rtx3090-3 9 Mb/s; rtx3090-3 -> rtx3090-4 9 Mb/s"
    assert finding.about == ("ens803f1",) and "rtx3090-3's ens803f1" in finding.fix
    one_link = fabric.judge(results(hosts, {("rtx3090-1", "rtx3090-2", "ens803f0"): 40.0}))
    [link] = one_link["rtx3090-1"]
    assert link.expected.startswith("rtx3090-1 ens803f0 -> rtx3090-2 ens803f0 at 90 Mb/s") and link.found == "40 Mb/s"
    pair = fabric.judge(results(hosts[:2], {("rtx3090-1", "rtx3090-2", "ens803f1"): 9.4}))
    assert list(pair) == ["rtx3090-1"] and "the link between them" in pair["rtx3090-1"][0].fix
    assert fabric.judge(results(hosts, {})) == {}


def test_the_groups_all_reduce_is_read_from_every_node_and_held_to_its_ports():
    from provision.capabilities.active import collective

    ports = {f"rtx3090-{n}": blade(n) for n in range(1, 5)}
    carried = {h: {"ens803f0": 94.0, "ens803f1": 93.0} for h in ports} | {"rtx3090-3": {"ens803f0": 94.0,
                                                                                       "ens803f1": 9.4}}
    gbs, rule = collective.expected(ports, {}, carried)
    assert gbs == 103.4 * collective.ALLREDUCE_EFFICIENCY / 8000
    assert rule == "35% of the 103 Mb/s the ports of rtx3090-3 carry, the least"
    assert collective.expected(ports, {h: 90.0 for h in ports}, {})[0] == 180 * collective.ALLREDUCE_EFFICIENCY / 8000
    assert collective.expected(ports, {}, {})[0] is None  # nothing measured, nothing set: not judged
    line = ("rank {r} of 4 on lab-rtx3090-{n} (local rank 0): gloo via GLOO_SOCKET_IFNAME=ens803f0,ens803f1: "
            "all_reduce sum 10, 4 MiB in {ms} ms (bus bandwidth {bw} GB/s)")
    outputs = {f"rtx3090-{n}": line.format(r=n - 1, n=n, ms=350.1, bw=bw) for n, bw in
               ((1, "0.01797"), (2, "0.01801"), (3, "0.009012"), (4, "0.018"))}
    outputs["rtx3090-1"] += "\nall_reduce ok: 4 processes on 4 node(s) (lab-rtx3090-1, ...), backend gloo"
    result = collective.read(outputs, collective.Collective("rtx3090", list(ports), 0.01125, "the rule"))
    assert (result.busbw_gbs, result.slowest, result.backend, result.error) == (0.009012, "rtx3090-3", "gloo", "")
    finding = collective.finding(result, "/usr/local/bin/rtx3090-torchrun")
    assert finding.found == "0.00901 GB/s (gloo; slowest rank on rtx3090-3)" and finding.about == ("rtx3090",)
    result.busbw_gbs = 0.0179
    assert collective.finding(result, "w") is None
    broken = collective.read({"rtx3090-1": "torch.distributed.DistStoreError: timed out"},
                             collective.Collective("rtx3090", ["rtx3090-1"], 0.01, "r"))
    assert collective.finding(broken, "w").found == "it failed: torch.distributed.DistStoreError: timed out"


def test_the_ring_of_pairs_runs_in_rounds_where_no_node_is_twice():
    from provision.capabilities.active import collective
    assert collective.rounds(["a", "b"]) == []  # the group's own run is the pair
    assert collective.rounds(["a", "b", "c", "d"]) == [[("a", "b"), ("c", "d")], [("b", "c"), ("d", "a")]]
    for n in range(3, 12):
        hosts = [f"n{k}" for k in range(n)]
        rounds = collective.rounds(hosts)
        pairs = [pair for round_ in rounds for pair in round_]
        assert len(pairs) == n and len(rounds) == (2 if n % 2 == 0 else 3)  # O(N) pairs, a constant of rounds
        assert all(len({h for pair in round_ for h in pair}) == 2 * len(round_) for round_ in rounds)
        assert sorted(h for pair in pairs for h in pair) == sorted(hosts * 2)  # each node in two pairs


def pair(a: str, b: str, gbs: float | None, error: str = ""):
    from provision.capabilities.active import collective
    return collective.Collective(f"g: {a} and {b}", [a, b], 0.0112 * 0.7, "the rule", gbs, a, "gloo", error)


def test_pairwise_names_the_node_whose_pairs_all_fall_short_else_the_link():
    from provision.capabilities.active import collective
    assert collective.pair_findings([pair("b1", "b2", 0.011), pair("b3", "b4", 0.011)]) == {}
    link_only = [pair("b1", "b2", 0.011), pair("b3", "b4", 0.011), pair("b2", "b3", 0.0017), pair("b4", "b1", 0.011)]
    [(host, link)] = collective.pair_findings(link_only).items()  # b2 and b3 are clean with their other neighbours
    assert host == "b2" and link.about == ("b2+b3",) and "the link between b2 and b3" in link.fix
    ring = [pair("b1", "b2", 0.011), pair("b3", "b4", 0.0016), pair("b2", "b3", 0.0017), pair("b4", "b1", 0.011)]
    [(host, node)] = collective.pair_findings(ring).items()
    assert host == "b3" and node.about == ("b3",)
    assert node.found == "with b4: 0.0016 GB/s (gloo); with b2: 0.0017 GB/s (gloo)"
    assert node.expected.startswith("b3 in an all-reduce with each of its neighbours at 0.00784 GB/s (the rule)")
    failed = [pair("b1", "b2", 0.011), pair("b3", "b4", None, "DistStoreError"), pair("b2", "b3", None, "timed out"),
              pair("b4", "b1", 0.011)]
    assert collective.pair_findings(failed)["b3"].found == "with b4: failed: DistStoreError; with b2: failed: timed out"


def test_a_nodes_own_all_reduce_is_held_to_the_best_node_of_its_kind():
    from provision.capabilities.active import collective

    def own(host: str, gbs: float | None, kind: str = "4 processes on Tesla V100-SXM2-32GB", error: str = ""):
        return collective.Collective(host, [host], None, "", gbs, host, "nccl", error, kind)

    results = [own("v1", 120.0), own("v2", 131.0), own("v3", 40.0), own("p1", 9.0, "8 processes on RTX 4090"),
               own("v4", None, error="NCCL WARN NET/Socket")]
    found = collective.node_findings(results, {r.hosts[0]: "/usr/local/bin/v100-torchrun" for r in results})
    assert sorted(found) == ["v3", "v4"]  # p1 has no peer of its kind: nothing to hold it to
    assert found["v3"].expected == ("all-reduce bus bandwidth within v3 at 91.7 GB/s (70% of the best node of its "
                                    "kind (4 processes on Tesla V100-SXM2-32GB) in the group, v2 at 131 GB/s)")
    assert found["v3"].found == "40 GB/s (nccl)" and found["v4"].found == "it failed: NCCL WARN NET/Socket"
    assert "PROVISION_NNODES=1 PROVISION_RDZV_HOST=127.0.0.1 /usr/local/bin/v100-torchrun" in found["v4"].fix
