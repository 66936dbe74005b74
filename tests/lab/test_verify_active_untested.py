"""Untested is never PASS (issue 42), on the basement lab (conftest's `basement`): the V100 box as the issue found
it, verify --active with no load program for it (the basement inventory names no provision_active.load_command, and the
lab's python3 has no CUDA torch) said PASS, rc 0; with a process on a GPU, PASS, rc 0, Prometheus healthy 1.
Now each is "not tested" with why, exit bit 64, Prometheus healthy 0 and provision_verify_not_tested{part="load"};
and the same node loaded (the simulator's stand-in, provision_active.load_command) passes and reports its figures in JSON,
Prometheus and -v. Each test fails on d9c2a07."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.lab

V100 = "lab-v100-1"
LOAD = {"load_command": ["/usr/lib/provision-lab/gpusim", "load"], "power_budget_watts": 900}


def with_load(lab) -> Path:
    """The basement lab's inventory with every host loaded by the GPU simulator's stand-in."""
    tree = yaml.safe_load(lab.inventory.read_text())
    tree["all"].setdefault("vars", {})["provision_active"] = dict(LOAD)
    path = lab.dir / "active-untested.yaml"
    path.write_text(yaml.safe_dump(tree))
    return path


def verify_active(lab, inventory: Path, *more: str):
    """verify --active on the V100 box, 5 s of load: the finished process."""
    return lab.provision("verify", str(inventory), "--active", "--duration", "5", "--limit", V100, *more)


def test_a_node_with_no_load_program_is_not_tested_and_exits_non_zero(basement, tmp_path):
    assert basement.apply()[0] == 0
    prom = tmp_path / "verify.prom"
    proc = verify_active(basement, basement.inventory, "--json", "--prometheus", str(prom))
    [host] = json.loads(proc.stdout)["hosts"]
    assert proc.returncode == 64, (proc.returncode, host)  # before: 0, PASS
    assert host["status"] == "not tested" and host["failures"] == [], host
    [why] = host["not_tested"]
    assert why.startswith("load: no load to run here: torch ") or why.startswith("load: no load to run here: no "
                                                                                 "torch"), why
    assert host["figures"] == []  # its GPUs idled: nothing measured under load
    text = prom.read_text()
    assert f'provision_verify_healthy{{host="{V100}"}} 0.0' in text
    assert f'provision_verify_not_tested{{host="{V100}",part="load"}} 1.0' in text
    shown = verify_active(basement, basement.inventory)
    assert shown.returncode == 64
    assert f"{V100}  NOT TESTED" in shown.stdout and "    untested load: no load to run here" in shown.stdout
    summary = shown.stdout[shown.stdout.index("Not tested:"):]
    assert f"  {V100}  load: no load to run here" in summary, shown.stdout


def test_a_node_with_a_process_on_a_gpu_is_not_tested(basement, tmp_path):
    assert basement.apply()[0] == 0
    loaded = with_load(basement)
    basement.lab("fault", V100, "gpu-process", "--gpu", "2")
    try:
        prom = tmp_path / "busy.prom"
        proc = verify_active(basement, loaded, "--json", "--prometheus", str(prom))
        [host] = json.loads(proc.stdout)["hosts"]
        assert proc.returncode == 64 and host["status"] == "not tested", (proc.returncode, host)
        [why] = host["not_tested"]
        assert why.startswith("load: not loaded: processes run on its GPUs: ") and "python3" in why, why
        assert f'provision_verify_not_tested{{host="{V100}",part="load"}} 1.0' in prom.read_text()
    finally:
        basement.lab("fault", V100, "clear")


def test_a_loaded_node_passes_and_reports_its_figures(basement, tmp_path):
    assert basement.apply()[0] == 0
    loaded = with_load(basement)
    prom = tmp_path / "pass.prom"
    proc = verify_active(basement, loaded, "--json", "--prometheus", str(prom))
    [host] = json.loads(proc.stdout)["hosts"]
    assert proc.returncode == 0 and host["status"] == "pass", (proc.returncode, host["findings"], host["not_tested"])
    figures = {(f["part"], f["figure"]): f["value"] for f in host["figures"]}
    peak, headroom = figures[("", "power_sum_peak_watts")], figures[("", "power_headroom_watts")]
    assert headroom == pytest.approx(900 - peak) and 0 < peak < 900, figures  # pinned at 877,1005: about 180 W each
    gpus = {part for part, figure in figures if figure == "tflops"}
    assert len(gpus) == 4 and all(abs(figures[(gpu, "sm_clock_median_mhz")] - 1005) <= 50 for gpu in gpus), figures
    text = prom.read_text()
    assert f'provision_verify_measured{{figure="power_headroom_watts",host="{V100}",part=""}}' in text
    verbose = verify_active(basement, loaded, "-v")
    assert "    measured node: power_sum_peak_watts " in verbose.stdout and "power_headroom_watts " in verbose.stdout
    print(f"{V100} under load: {peak:g} W at the peak instant, {headroom:g} W of headroom under 900 W")
