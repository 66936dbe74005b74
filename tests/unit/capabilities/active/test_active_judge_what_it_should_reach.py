"""Issue 42's judging of verify --active, pure: a locked clock range held to its top under load (not its floor),
a port held to the most that its kind, its negotiated speed and the inventory say (never to itself), one
finding for GPUs a load loses one after another, a pairwise expectation that names only the slow node, the
passive checks of a cause the load found filed under the load's finding, and the last good run kept per
machine (two clusters with the same node names never share it)."""

from __future__ import annotations

from types import SimpleNamespace

from provision.capabilities.active import collective, fabric, history, judge, sampler
from provision.capabilities.gpu.model import GpuFacts
from provision.core.checks import CRITICAL
from provision.verify import Failure, by_cause

from builders.facts import facts
from builders.gpus import gpu
from builders.hosts import host
from builders.interfaces import blade
from builders.samples import HEADER, row

RTX4090 = dict(locked={"sm": "210,2520"}, max_clock_sm=3105, power_enforced=400.0)


def sampled(i: int, model: str, **more) -> GpuFacts:
    """GPU `i` of the node the sampler's rows describe (builders.samples: their UUIDs and buses), of `model`."""
    return gpu(i, model, uuid=f"GPU-v100-{i}", bus_id=f"00000000:{0x1a + i:02X}:00.0", **more)


def gpu4090(i: int, **more) -> GpuFacts:
    return sampled(i, "RTX 4090", **(RTX4090 | more))


def judged_4090(rows: list[str]) -> list:
    targets = [judge.target_of(gpu4090(i)) for i in range(2)]
    return judge.judge(targets, sampler.by_gpu(sampler.parse("\n".join([HEADER, *rows]))), duration=10).findings


def test_a_locked_range_is_held_to_its_top_under_load_not_its_floor():
    target = judge.target_of(gpu4090(0))
    assert (target.sm_clock, target.clock_rule) == (2520, "the top of its locked clocks 210,2520 MHz")
    # at the top, or a bin or two below it as the GPU warms: nothing to say
    assert judged_4090([row(t / 10, g, sm="2400", reasons="0x2") for t in range(50) for g in (0, 1)]) == []
    # GPU0 stuck at the floor of its range with no power or thermal reason: held back
    stuck = judged_4090([row(t / 10, g, sm="210" if g == 0 else "2520", reasons="0x2")
                         for t in range(50) for g in (0, 1)])
    assert [(f.expected, f.found) for f in stuck] == [(
        "GPU0 (0000:1a:00.0) at the top of its locked clocks 210,2520 MHz under load (90% of 2520 MHz or more, "
        "unless a power or thermal reason says why)",
        "GPU0 (0000:1a:00.0): SM clock median 210 MHz over 50 samples under load with no power or thermal reason "
        "active")]
    # held down by its power cap (SW Power Cap): the reason says why, no finding
    assert judged_4090([row(t / 10, g, sm="2332", reasons="0x4") for t in range(50) for g in (0, 1)]) == []
    # a range above what the GPU reaches: held to its own maximum; one clock: held to it as application clocks
    above = judge.target_of(gpu4090(0, locked={"sm": "210,3500"}))
    assert (above.sm_clock, above.clock_rule) == (3105, "its maximum 3105 MHz within its locked clocks 210,3500 MHz")
    one = judge.target_of(gpu4090(0, locked={"sm": "2100,2100"}))
    assert (one.sm_clock, one.clock_share) == (2100, judge.CLOCK_SHORT)
    assert judge.target_of(gpu4090(0, locked={"sm": "[N/A]"})).sm_clock is None  # no target, not a made-up one


def test_gpus_a_load_loses_one_after_another_are_one_finding():
    rows = [row(t / 10, g, instant="290.00") for t in range(30) for g in (0, 1)]
    rows += [row(3.0, 1, *(["[GPU is lost]"] * 2))] + [row(t / 10, 0) for t in range(31, 50)]
    rows += [row(5.0, 0, *(["[GPU is lost]"] * 2))]
    targets = [judge.target_of(sampled(i, "V100", power_enforced=300.0)) for i in range(2)]
    samples = sampler.by_gpu(sampler.parse("\n".join([HEADER, *rows])))
    [lost] = judge.judge(targets, samples, duration=10, budget=500).findings
    assert lost.severity == CRITICAL and lost.about == ("0000:1b:00", "0000:1a:00")  # in the order they went
    assert lost.expected == "every GPU answering through the load"
    assert lost.found == (
        "GPU1 (0000:1b:00.0) lost under load: GPU is lost at +3.0 s; its last peak 290 W against a 300 W cap; then "
        "GPU0 (0000:1a:00.0) lost under load: GPU is lost at +5.0 s; its last peak 290 W against a 300 W cap; the "
        "GPUs' instant draws added up to 580 W at +0.0 s, past the 500 W provision_active.power_budget_watts gives them")


BLADES = [f"rtx3090-{n}" for n in range(1, 5)]


def ring(slow_speed: dict[str, int], measured: dict[tuple[str, str, str], float], expected=None) -> list:
    """The blades' port tests (blade 3's ens803f1 trained at slow_speed), 94 Mb/s each but those measured."""
    used = {h: blade(n, (10000, slow_speed.get(h, 10000))) for n, h in enumerate(BLADES, 1)}
    planned = fabric.plan({"rtx3090": BLADES}, used, {h: expected for h in BLADES} if expected else {})
    return [fabric.PortResult(t, measured.get((t.client, t.server, t.ifname), 94.0)) for t in planned.tests]


SLOW = {("rtx3090-2", "rtx3090-3", "ens803f1"): 9.4, ("rtx3090-3", "rtx3090-4", "ens803f1"): 9.4}


def test_a_port_that_trained_slower_than_its_kind_is_held_to_its_kind_not_to_itself():
    results = ring({"rtx3090-3": 1000}, SLOW)
    assert {r.test.speed_mbps for r in results if (r.test.client, r.test.server) in {k[:2] for k in SLOW}
            and r.test.ifname == "ens803f1"} == {1000}  # its only peers of the same speed: itself
    [finding] = fabric.judge(results)["rtx3090-3"]
    assert finding.expected == ("rtx3090-3 ens803f1 carrying 66 Mb/s each way (70% of the best other ens803f1 "
                                "measured in the group, 94 Mb/s)")
    assert list(fabric.judge(results)) == ["rtx3090-3"]
    # the inventory's figure where it says more; the kind where the inventory says less
    assert fabric.judge(ring({"rtx3090-3": 1000}, SLOW, expected=90.0))["rtx3090-3"][0].expected.endswith(
        "(provision_active.expected_port_mbps)")
    assert "best other ens803f1" in fabric.judge(ring({"rtx3090-3": 1000}, SLOW, expected=20.0))["rtx3090-3"][0] \
        .expected
    # a group of two has one test per port: its other ports of the same speed are its peers
    two = fabric.plan({"g": BLADES[:2]}, {BLADES[0]: blade(1), BLADES[1]: blade(2)}, {})
    found = fabric.judge([fabric.PortResult(t, 9.4 if t.ifname == "ens803f1" else 94.0) for t in two.tests])
    assert found[BLADES[0]][0].expected.endswith("(70% of the best other 10000 Mb/s port measured in the group, "
                                                 "94 Mb/s)")


def test_the_pairwise_expectation_names_the_slow_node_never_its_healthy_neighbour():
    carried = fabric.measured(ring({"rtx3090-3": 1000}, SLOW))
    # rtx3090-2's ens803f1 sent to the slow port (9 Mb/s) and received 94 from rtx3090-1: it carries 94
    assert carried["rtx3090-2"] == {"ens803f0": 94.0, "ens803f1": 94.0}
    assert carried["rtx3090-3"] == {"ens803f0": 94.0, "ens803f1": 9.4}
    ports = {h: blade(n) for n, h in enumerate(BLADES, 1)}
    _, rule = collective.expected({h: ports[h] for h in ("rtx3090-2", "rtx3090-3")}, {}, carried)
    assert rule == "35% of the 103 Mb/s the ports of rtx3090-3 carry, the least"
    _, alike = collective.expected({h: ports[h] for h in ("rtx3090-1", "rtx3090-2")}, {}, carried)
    assert alike == "35% of the 188 Mb/s the ports of each node carry"


def test_a_passive_check_of_a_cause_the_load_found_is_filed_under_the_loads_finding():
    from provision.capabilities.gpu import checks as gpu_checks
    from provision.capabilities.health import checks as health_checks
    from provision.core.checks import CheckFailed

    narrow = gpu(1, "RTX 4090", bus_id="00000000:41:00.0", pcie_width_current=8, pcie_width_max=16,
                 pcie_gen_current=4, pcie_gen_max=4, clock_events_active=0x88)
    node = SimpleNamespace(name="rtx4090-1", facts=facts(gpus=[narrow]), inventory=host("rtx4090-1", provision_gpu={}))
    said = {}
    for check in (gpu_checks.check_pcie_links_run_at_full_width_and_speed,
                  health_checks.check_clocks_are_not_held_down_by_heat_or_power):
        try:
            check(node)
        except CheckFailed as failed:
            said[check.__name__.removeprefix("check_")] = failed.findings[0]
    assert {f.because for f in said.values()} == {("gpus_hold_up_under_load:0000:41:00",)}
    load = Failure("gpus_hold_up_under_load", "GPU1's PCIe link at Gen4 x16 under load", "Gen4 x8", about=["0000:41:00"])
    passive = [Failure(name, f.expected, f.found, f.fix, list(f.because), list(f.about), f.severity)
               for name, f in said.items()]
    [cause] = by_cause([*passive, load])
    assert cause.failure is load and {c.check for c in cause.consequences} == set(said)
    # without a load (plain verify) the passive checks stand on their own
    assert [c.failure.check for c in by_cause(passive)] == list(said)


def test_two_clusters_with_the_same_node_names_keep_their_own_last_good_run(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    here, there = history.key("v100-1", "0f" * 16 + "\n"), history.key("v100-1", "a1" * 16)
    assert here != there and here.startswith("v100-1.") and history.key("v100-1", "") == "v100-1"
    history.record(here, {"GPU-0": 78.0})
    assert history.last_good(here) == {"GPU-0": 78.0} and history.last_good(there) == {}
    history.record(there, {"GPU-0": 60.0})
    assert history.last_good(here) == {"GPU-0": 78.0}


def test_what_follows_from_a_gpu_the_samples_judged_is_filed_under_that_finding():
    from provision.capabilities.active import checks, run

    targets = [judge.target_of(gpu4090(i)) for i in range(3)]
    rows = [row(t / 10, g, sm="210" if g == 0 else "2520", reasons="0x2") for t in range(50) for g in (0, 1, 2)]
    rows += [row(1.0, 2, *(["[GPU is lost]"] * 2)), row(1.2, 1, *(["[GPU is lost]"] * 2))]
    found = judge.judge(targets, sampler.by_gpu(sampler.parse("\n".join([HEADER, *rows]))), duration=10).findings
    [lost, stuck] = found
    assert lost.about == ("0000:1c:00", "0000:1b:00") and stuck.about == ("0000:1a:00",)
    gpus = [{"uuid": t.uuid, "tflops": rate, "error": error} for t, rate, error in
            ((targets[0], 20.0, ""), (targets[1], 0.0, "CUDA error"), (targets[2], 0.0, "CUDA error"))]
    gpus += [{"uuid": f"GPU-v100-{i}", "tflops": 200.0, "error": ""} for i in (3, 4)]
    load = checks._load_findings(run.ActiveRun(10, targets, load={"gpus": gpus}), judge.critical_subjects(found))
    # the lost GPUs' threads failed with them: nothing more; GPU0 slow because its clocks sit at the floor
    [slow] = load
    assert slow.about == ("0000:1a:00",) and slow.because == ("gpus_hold_up_under_load:0000:1a:00",)
    as_failures = [Failure(judge.CHECK, f.expected, f.found, f.fix, list(f.because), list(f.about), f.severity)
                   for f in [*found, *load]]
    assert [(c.failure.expected, len(c.consequences)) for c in by_cause(as_failures)] == [
        (lost.expected, 0), (stuck.expected, 1)]


def test_heat_under_load_is_one_finding_with_the_headroom_check_or_the_loads_own():
    rows = [row(t / 10, g, reasons="0x48" if g == 1 else "0x2", temp="89") for t in range(50) for g in (0, 1)]
    targets = [judge.target_of(sampled(i, "V100")) for i in range(2)]
    [hot] = judge.judge(targets, sampler.by_gpu(sampler.parse("\n".join([HEADER, *rows]))), duration=10).findings
    load = Failure(judge.CHECK, hot.expected, hot.found, hot.fix, list(hot.because), list(hot.about), hot.severity)
    held = Failure("clocks_are_not_held_down_by_heat_or_power", "e", "GPU1: HW Thermal Slowdown",
                   because=["gpus_have_thermal_headroom:0000:1b:00", "gpus_hold_up_under_load:0000:1b:00"],
                   about=["0000:1b:00"])
    headroom = Failure("gpus_have_thermal_headroom", "e", "GPU1 at 89 C", about=["0000:1b:00"])
    [cause] = by_cause([headroom, held, load])  # still hot when read after the load: the headroom check says it
    assert cause.failure is headroom and len(cause.consequences) == 2
    [cause] = by_cause([held, load])  # cooled by then: the load's finding, the clocks check under it
    assert cause.failure is load and cause.consequences == [held]
