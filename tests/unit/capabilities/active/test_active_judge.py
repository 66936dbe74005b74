"""verify --active's sampler and judge (capabilities/active/): nvidia-smi's -lms rows read back per GPU, and one
finding per cause from them: a GPU lost mid-run, transients above the cap, the power brake, heat, clocks below
what was set, a PCIe link trained down under load. The rows are written as --query-gpu prints them
(csv,nounits, the header once, ", " between cells, [N/A] and [GPU is lost] where the driver says so)."""

from __future__ import annotations

from provision.capabilities.active import judge, sampler
from provision.capabilities.gpu.model import GpuFacts
from provision.core.checks import CRITICAL, WARNING

from builders.gpus import gpu
from builders.samples import HEADER, V100, row


def judged(rows: list[str], budget: float | None = None) -> judge.Judged:
    return judge.judge([judge.target_of(g) for g in V100], sampler.by_gpu(sampler.parse("\n".join([HEADER, *rows]))),
                       duration=10, budget=budget)


def run_of(rows: list[str], budget: float | None = None) -> list:
    return judged(rows, budget).findings


def test_the_sampler_reads_rows_by_column_name_with_na_and_a_repeated_header():
    text = "\n".join([HEADER, row(0.0, 0, instant="231.40"), row(0.0, 1, power="[N/A]"), HEADER,
                      row(0.1, 0, util="[N/A]"), "Unable to determine the device handle for GPU0000:1B:00.0: Unknown"])
    samples = sampler.parse(text)
    assert [(s.uuid, s.t) for s in samples] == [("GPU-v100-0", 0.0), ("GPU-v100-1", 0.0), ("GPU-v100-0", 0.1)]
    first = samples[0]
    assert (first.power, first.power_instant, first.peak_power, first.cap, first.sm, first.mem, first.temp,
            first.reasons, first.pcie_gen, first.pcie_width, first.util) == \
        (190.0, 231.4, 231.4, 200.0, 1005, 877, 61, 2, 3, 16, 100)
    assert samples[1].power is None and samples[1].peak_power is None and samples[2].util is None
    assert sampler.command(100)[-2:] == ["-lms", "100"] and sampler.command()[2] == "--format=csv,nounits"


def test_a_steady_node_at_its_pinned_clocks_and_cap_has_nothing_to_say():
    rows = [row(t / 10, g, instant="195.00") for t in range(100) for g in (0, 1)]
    assert run_of(rows) == []


def test_boost_transients_past_the_cap_are_a_note_and_a_finding_past_the_supplys_budget():
    rows = [row(t / 10, g, instant="262.00" if t % 3 == 0 and g == 1 else "198.00", sm="1530", reasons="0x4")
            for t in range(100) for g in (0, 1)]
    said = judged(rows)
    assert said.findings == []  # every unpinned GPU does it: harm only where the supply cannot carry it
    assert said.notes == ["GPU1 (0000:1b:00.0): power p99 262 W, peak 262 W under load against its 200 W cap "
                          "(transients the averaged cap lets through; pinned clocks cut them)"]
    [finding] = run_of(rows, budget=450)
    assert finding.severity == WARNING and finding.about == ()
    assert finding.expected == ("the GPUs' instant draws within the 450 W the supplies give them "
                                "(provision_active.power_budget_watts)")
    assert finding.found == "460 W at +0.0 s" and "pin the clocks" in finding.fix and "average" in finding.fix
    assert run_of(rows, budget=500) == []


def test_a_gpu_lost_mid_run_is_one_critical_finding_and_nothing_else_of_it():
    rows = [row(t / 10, g, instant="290.00") for t in range(40) for g in (0, 1)]
    rows += [row(4.0, 0, *(["[GPU is lost]"] * 2))] + [row(t / 10, 1, instant="199.00") for t in range(41, 100)]
    findings = run_of(rows)
    assert [f.about for f in findings] == [("0000:1a:00",)] and findings[0].severity == CRITICAL
    lost = findings
    assert lost[0].found == "GPU0 (0000:1a:00.0) lost under load: GPU is lost at +4.0 s; its last peak 290 W " \
                            "against a 200 W cap"
    [with_budget] = run_of(rows, budget=500)
    assert with_budget.found.endswith("; the GPUs' instant draws added up to 580 W at +0.0 s, past the 500 W "
                                      "provision_active.power_budget_watts gives them")
    assert "Xid 79" in lost[0].fix and "pin the clocks" in lost[0].fix
    silent = [row(t / 10, g) for t in range(100) for g in (0, 1) if g == 1 or t < 30]  # GPU0's rows stop
    [gone] = run_of(silent)
    assert gone.found == "GPU0 (0000:1a:00.0) lost under load: no answer after +2.9 s of 10 s; its last peak " \
                         "190 W against a 200 W cap"


def test_the_power_brake_heat_slow_clocks_and_a_narrow_link_are_each_their_own_finding():
    brake = run_of([row(t / 10, g, reasons="0x0000000000000088" if g == 0 else "0x2") for t in range(50)
                    for g in (0, 1)])
    assert [(f.severity, f.found) for f in brake] == [
        (CRITICAL, "GPU0 (0000:1a:00.0): HW Power Brake Slowdown in 50 of 50 samples under load, from +0.0 s")]
    hot = run_of([row(t / 10, 1, reasons="0x48", temp="89") for t in range(50)] +
                 [row(t / 10, 0) for t in range(50)])
    assert [f.found for f in hot] == ["GPU1 (0000:1b:00.0): thermal slowdown in 50 of 50 samples under load, from "
                                      "+0.0 s; up to 89 C"]
    slow = run_of([row(t / 10, g, sm="810" if g == 0 else "1005") for t in range(50) for g in (0, 1)])
    assert [f.found for f in slow] == ["GPU0 (0000:1a:00.0): SM clock median 810 MHz over 50 samples under load "
                                       "with no power or thermal reason active"]
    assert slow[0].expected == "GPU0 (0000:1a:00.0) at its application clocks 1005 MHz under load"
    riser = run_of([row(t / 10, g, width="8" if g == 1 else "16") for t in range(50) for g in (0, 1)])
    assert [f.found for f in riser] == ["GPU1 (0000:1b:00.0): Gen3 x8 in 50 of 50 samples under load"]


def test_idle_samples_are_not_judged_as_load():
    idle = [row(t / 10, g, gen="1", util="0", sm="135", instant="290.00") for t in range(50) for g in (0, 1)]
    assert run_of(idle) == [] and judged(idle).notes == []  # a link at Gen1 at idle: power saving


def test_locked_clocks_are_the_target_on_geforce():
    target = judge.target_of(gpu(0, "RTX 4090", locked={"sm": "2100,2100"}))
    assert (target.sm_clock, target.clock_rule) == (2100, "its locked clocks 2100,2100 MHz")
    assert judge.target_of(GpuFacts(index=1, uuid="u", name="n", bus_id="b")).sm_clock is None
    assert judge.percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.0 and judge.percentile([5.0], 99) == 5.0
