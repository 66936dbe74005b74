"""Untested is never PASS (issue 42): a node verify --active did not load, or whose ports or all-reduce did not run,
is "not tested" with why for each part, exit bit 64, Prometheus healthy 0 with a not_tested series; a passing run
reports its figures (JSON, Prometheus, -v). The pure parts: active/outcome.py, commands/verify.py's settle and
exit_code, and the three outputs."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
import click
from prometheus_client import generate_latest

from provision.capabilities.active import outcome, run
from provision.capabilities.active.dcgm import Diag
from provision.capabilities.active.judge import Target
from provision.capabilities.active.sampler import Sample
from provision.commands.exit_codes import verify_status as exit_code
from provision.commands.verify import settle
from provision.core.results import EXIT_NOT_TESTED
from provision.output import prometheus, report, verify_json
from provision.verify import FAIL, NOT_TESTED, PASS, Failure, Verdict

from builders.simnodes import node as simulated_node  # noqa: F401  (a fixture: this machine with simulated GPUs)

TARGETS = [Target("GPU-0", "GPU0", "00000000:3B:00.0", cap=200.0), Target("GPU-1", "GPU1", "00000000:5E:00.0",
                                                                          cap=200.0)]


def sample(uuid: str, t: float, watts: float, sm: int, util: int = 100) -> Sample:
    return Sample(t, uuid, None, watts, watts + 10, 200.0, sm, 877, 60, 0, 3, 16, util)


def loaded_run() -> run.ActiveRun:
    samples = {"GPU-0": [sample("GPU-0", 0.0, 20, 135, util=0), sample("GPU-0", 0.1, 180, 1005),
                         sample("GPU-0", 0.2, 182, 1005)],
               "GPU-1": [sample("GPU-1", 0.0, 21, 135, util=0), sample("GPU-1", 0.1, 179, 990),
                         sample("GPU-1", 0.2, 185, 1005)]}
    load = {"seconds": 5, "gpus": [{"uuid": "GPU-0", "tflops": 61.2, "error": ""},
                                   {"uuid": "GPU-1", "tflops": 60.8, "error": ""}]}
    return run.ActiveRun(5, TARGETS, power_budget=900.0, samples=samples, load_rc=0, load=load,
                         ports={"ens803f0": 91.5}, allreduce={"across rtx3090": 0.0112})


def test_every_way_a_node_goes_unloaded_is_named_with_why():
    assert outcome.untested(loaded_run()) == []
    busy = run.parse(f"{run.MARK}busy\n4242, /usr/bin/python3, GPU-0\n", 5, TARGETS)
    assert outcome.untested(busy) == ["load: not loaded: processes run on its GPUs: 4242, /usr/bin/python3, GPU-0"]
    slurm = run.ActiveRun(5, refused="Slurm has jobs on it (State=ALLOCATED)")
    assert outcome.untested(slurm) == ["load: not loaded: Slurm has jobs on it (State=ALLOCATED)"]
    lost = run.ActiveRun(5, error="the run was cut off: lost the connection to v100-1")
    assert outcome.untested(lost) == ["load: the run was cut off: lost the connection to v100-1"]
    no_torch = run.ActiveRun(5, TARGETS, load_rc=run.NOT_APPLICABLE, load={"error": "no torch in this Python"})
    [said] = outcome.untested(no_torch)
    assert said.startswith("load: no load to run here: no torch in this Python (provision_active.load_command")
    no_dcgmi = run.ActiveRun(5, TARGETS, dcgm=Diag(2, not_applicable="dcgmi is not installed on the node"))
    assert outcome.untested(no_dcgmi)[0].startswith("load: no load to run here: dcgmi is not installed")
    stopped = run.ActiveRun(4.2, TARGETS, stopped="SIGINT", fabric_notes=["not tested: the run was stopped"])
    assert outcome.untested(stopped) == ["load: stopped by SIGINT after 4.2 s of sampling",
                                         "ports and all-reduce: not tested: the run was stopped"]


def test_a_passing_run_reports_its_figures_and_an_unloaded_one_none():
    found = {(f["part"], f["figure"]): f["value"] for f in outcome.figures(loaded_run())}
    assert found == {
        ("0000:3b:00.0", "power_peak_watts"): 192.0, ("0000:3b:00.0", "sm_clock_median_mhz"): 1005.0,
        ("0000:3b:00.0", "tflops"): 61.2,
        ("0000:5e:00.0", "power_peak_watts"): 195.0, ("0000:5e:00.0", "sm_clock_median_mhz"): 990.0,
        ("0000:5e:00.0", "tflops"): 60.8,
        ("", "power_sum_peak_watts"): 387.0, ("", "power_headroom_watts"): 513.0,  # 900 W budget - 192 - 195
        ("ens803f0", "port_mbps"): 91.5, ("across rtx3090", "allreduce_busbw_gbs"): 0.0112}
    assert outcome.figures(run.ActiveRun(5, TARGETS, refused="Slurm has jobs on it")) == []
    idle = run.ActiveRun(5, TARGETS, load_rc=run.NOT_APPLICABLE, samples=loaded_run().samples, ports={"ens803f0": 90.0})
    assert outcome.figures(idle) == [{"part": "ens803f0", "figure": "port_mbps", "value": 90.0}]  # its ports ran


def test_untested_is_never_a_pass_and_has_its_own_exit_bit():
    quiet = Verdict("v100-1", PASS, passed=["gpus_hold_up_under_load"])
    settle(quiet, run.ActiveRun(5, refused="processes run on its GPUs: 4242, python3, GPU-0"))
    assert quiet.status == NOT_TESTED and quiet.not_tested == [
        "load: not loaded: processes run on its GPUs: 4242, python3, GPU-0"]
    assert exit_code([quiet]) == EXIT_NOT_TESTED == 64
    broken = Verdict("v100-2", FAIL, failures=[Failure("no_gpu_is_lost", "every GPU", "GPU3 lost")])
    settle(broken, run.ActiveRun(5, error="the run was cut off: lost the connection"))
    assert broken.status == FAIL and broken.not_tested  # a failure stays one; its untested part is named too
    assert exit_code([quiet, broken]) == 65
    loaded = Verdict("v100-3", PASS)
    settle(loaded, loaded_run())
    assert loaded.status == PASS and loaded.not_tested == [] and loaded.figures
    assert exit_code([loaded]) == 0 and exit_code([loaded], stopped=2) == 130 and exit_code([quiet], 15) == 143
    unasked = Verdict("v100-4", PASS)
    settle(unasked, None)  # verify without --active: nothing to say
    assert unasked.status == PASS and exit_code([unasked]) == 0


def verdicts() -> list[Verdict]:
    busy = Verdict("rtx3090-2", PASS, passed=["no_gpu_is_lost"])
    settle(busy, run.ActiveRun(5, refused="processes run on its GPUs: 4242, /usr/bin/python3, GPU-0"))
    good = Verdict("rtx3090-1", PASS, passed=["gpus_hold_up_under_load"])
    settle(good, loaded_run())
    return [good, busy]


def test_prometheus_says_not_tested_with_its_own_series_and_the_figures_of_a_pass():
    text = generate_latest(prometheus.registry_for(verdicts(), now=0)).decode()
    assert 'provision_verify_healthy{host="rtx3090-2"} 0.0' in text  # not tested: never healthy
    assert 'provision_verify_not_tested{host="rtx3090-2",part="load"} 1.0' in text
    assert 'provision_verify_healthy{host="rtx3090-1"} 1.0' in text
    assert 'provision_verify_not_tested{host="rtx3090-1"' not in text
    assert 'provision_verify_measured{figure="power_headroom_watts",host="rtx3090-1",part=""} 513.0' in text
    assert 'provision_verify_measured{figure="port_mbps",host="rtx3090-1",part="ens803f0"} 91.5' in text
    assert 'provision_verify_measured{figure="tflops",host="rtx3090-1",part="0000:3b:00.0"} 61.2' in text


def test_json_carries_the_status_why_and_figures_and_reads_back():
    data = json.loads(json.dumps(verify_json.to_json(verdicts(), [], stopped=2)))
    assert data["stopped_by"] == "SIGINT"
    good, busy = data["hosts"]
    assert busy["status"] == "not tested" and busy["not_tested"][0].startswith("load: not loaded: processes")
    assert {"part": "", "figure": "power_headroom_watts", "value": 513.0} in good["figures"]
    back, _ = verify_json.from_json(data)  # verify --via slurm reads each node's JSON back
    assert [(v.status, v.not_tested, v.figures) for v in back] == [(v.status, v.not_tested, v.figures)
                                                                  for v in verdicts()]
    assert "stopped_by" not in verify_json.to_json(verdicts(), [])


def printed(verbose: bool, stopped: int | None = None) -> str:
    @click.command()
    def show():
        report.print_verdicts(verdicts(), verbose, stopped)

    return CliRunner().invoke(show, env={"COLUMNS": "200"}).output


def test_the_report_names_each_untested_node_and_why_and_v_shows_the_figures():
    text = printed(False)
    assert "rtx3090-2  NOT TESTED 1 checks passed" in text
    assert "    untested load: not loaded: processes run on its GPUs: 4242, /usr/bin/python3, GPU-0" in text
    assert "2 hosts: 1 pass, 1 not tested" in text
    summary = text[text.index("Not tested:"):]
    assert "rtx3090-2  load: not loaded: processes run on its GPUs" in summary and "rtx3090-1" not in summary
    assert "measured" not in text
    verbose = printed(True)
    assert "    measured node: power_sum_peak_watts 387, power_headroom_watts 513" in verbose
    assert "    measured 0000:3b:00.0: power_peak_watts 192, sm_clock_median_mhz 1005, tflops 61.2" in verbose
    assert "    measured ens803f0: port_mbps 91.5" in verbose
    assert printed(False, stopped=15).startswith("Stopped by SIGTERM: every node's load was stopped")


def test_the_summary_names_the_nodes_one_cause_left_untested_on_one_line():
    @click.command()
    def show():
        alike = [Verdict(f"rtx3090-{n}", PASS) for n in (1, 2)]
        for verdict in alike:
            settle(verdict, run.ActiveRun(5, TARGETS, load_rc=run.NOT_APPLICABLE,
                                          load={"error": "torch 2.13.0+cpu sees no CUDA GPU (/usr/bin/python3)"}))
        report.print_verdicts(alike, False)

    summary = CliRunner().invoke(show, env={"COLUMNS": "200"}).output.split("Not tested:\n")[1]
    assert summary.startswith("  rtx3090-1, rtx3090-2:\n      load: no load to run here: torch 2.13.0+cpu sees no")
    assert summary.count("\n") == 2


@pytest.mark.usefixtures("simulated_node")
def test_a_process_on_a_gpu_leaves_the_node_unloaded_and_not_tested():
    """The simulator's process on a GPU (gpusim fault GPU process, lab fault gpu-process): the node script
    lists it, refuses to load, and the verdict says not tested, naming the process; once it ends, the node loads."""
    import subprocess
    import sys

    from builders.simnodes import script
    from paths import GPUSIM

    subprocess.run([sys.executable, str(GPUSIM), "fault", "1", "process"], check=True)
    try:
        busy = run.parse(subprocess.run(["sh", "-c", script("busy")], capture_output=True, text=True).stdout, 5, [])
        assert busy.refused.startswith("processes run on its GPUs: ") and "python3" in busy.refused
        verdict = Verdict("v100-1", PASS)
        settle(verdict, busy)
        assert verdict.status == NOT_TESTED and "processes run on its GPUs" in verdict.not_tested[0]
    finally:
        subprocess.run([sys.executable, str(GPUSIM), "fault", "1", "clear"], check=True)
    free = subprocess.run(["sh", "-c", script("free").replace("--seconds 37.5", "--seconds 1")],
                          capture_output=True, text=True, timeout=30)
    assert run.parse(free.stdout, 1, []).refused == ""
