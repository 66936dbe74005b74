"""The GPU simulator's load model (provision_lab/gpusim/load_model.py) and its power supply (load.py): what
verify --active's lab tests stand on. Pure functions on records, then the real `gpusim load` and `nvidia-smi
-lms` on a simulated 4x V100 under tmp_path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from provision_lab.gpusim import load, load_model
from provision_lab.gpusim.models import MODELS
from paths import GPUSIM

V100 = MODELS["v100-sxm2-16gb"]


def record(slot: int, app_clocks=None, locked=None) -> dict:
    return {"slot": slot, "uuid": f"GPU-{slot}", "bus_id": f"00000000:{slot + 1:02X}:00.0", "model": V100.key,
            "power_limit": 200.0, "app_clocks": app_clocks, "locked_gpu": locked, "off_bus": False, "gone": False}


def test_boost_transients_pass_the_cap_and_pinned_clocks_keep_under_it():
    run = {"started": 0.0, "until": 60.0}
    spike, flat = 0.35, 0.15  # slot 3 carries a transient, slot 1 does not
    boost = load_model.reading(record(0), 200.0, run, spike)
    assert 199.0 < boost["power"] <= 200.0 and boost["power_instant"] == round(boost["power"] * 1.35, 2)
    assert boost["reasons"] == 0x4
    assert boost["sm"] == load_model.sm_under_cap(V100, 200.0) < V100.max_clocks.sm
    assert load_model.reading(record(0), 200.0, run, flat)["power_instant"] < 200.0
    pinned = load_model.reading(record(0, app_clocks=[877, 1005]), 200.0, run, spike)
    assert pinned["sm"] == 1005 and pinned["reasons"] == 0x2 and pinned["power_instant"] < 200.0
    locked = load_model.reading(record(0, locked=[1200, 1200]), 300.0, run, spike)
    assert locked["sm"] == 1200 and locked["power_instant"] < 1.05 * locked["power"]
    assert load_model.reading(record(0), 200.0, run, 45.0)["temp"] > load_model.reading(record(0), 200.0, run, 1)["temp"]


def test_the_supply_drops_the_gpu_drawing_most_after_three_transients_past_its_budget(tmp_path, monkeypatch):
    monkeypatch.setenv("NVIDIA_SIM_KMSG", str(tmp_path / "kern.log"))
    monkeypatch.setenv("NVIDIA_SIM_DMESG", str(tmp_path / "dmesg"))
    state = {"gpus": [record(i) for i in range(4)], "load": {"started": 0.0, "until": 60.0, "lost": []},
             "boot_time": time.time()}
    config = {"psu_watts": 900}
    lost = [load.brownout(state, config, (t + 0.5) / 10) for t in range(3, 10)]  # slots 3, 6, 9: transients
    assert [r and r["uuid"] for r in lost] == [None] * 6 + ["GPU-3"]
    assert state["gpus"][3]["off_bus"] and "79" in (tmp_path / "kern.log").read_text()
    pinned = {"gpus": [record(i, app_clocks=[877, 1005]) for i in range(4)],
              "load": {"started": 0.0, "until": 60.0, "lost": []}, "boot_time": time.time()}
    assert all(load.brownout(pinned, config, (t + 0.5) / 10) is None for t in range(3, 40))


def test_a_load_run_samples_as_nvidia_smi_lms_prints_and_reports_like_the_load_program(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"driver_version": "570.195.03", "psu_watts": 900,
                                                      "gpus": [{"model": V100.key, "count": 4}]}))
    env = dict(os.environ, NVIDIA_SIM_CONFIG=str(tmp_path / "config.json"), NVIDIA_SIM_STATE=str(tmp_path / "s.json"),
               NVIDIA_SIM_KMSG=str(tmp_path / "kern.log"), NVIDIA_SIM_DMESG=str(tmp_path / "dmesg"),
               NVIDIA_SIM_RUNDIR=str(tmp_path / "run"), NVIDIA_SIM_UID="0")
    sim = [sys.executable, str(GPUSIM)]
    for args in (["nvidia-smi", "-pm", "1"], ["nvidia-smi", "-pl", "200"]):
        assert subprocess.run([*sim, *args], env=env, capture_output=True).returncode == 0
    sampler = subprocess.Popen([*sim, "nvidia-smi", "--query-gpu=timestamp,uuid,power.draw.instant,utilization.gpu",
                                "--format=csv,nounits", "-lms", "100"], env=env, stdout=subprocess.PIPE, text=True)
    try:
        ran = subprocess.run([*sim, "load", "--seconds", "2"], env=env, capture_output=True, text=True, timeout=60)
    finally:
        sampler.terminate()
    out = sampler.communicate(timeout=30)[0].splitlines()
    assert out[0] == "timestamp, uuid, power.draw.instant [W], utilization.gpu [%]" and out.count(out[0]) == 1
    assert any(line.endswith(", 269.77, 100") for line in out)  # a transient sampled
    assert any(line.startswith("Unable to determine the device handle for GPU0000:31:00.0") for line in out)
    report = json.loads(ran.stdout)
    assert ran.returncode == 1 and [bool(g["error"]) for g in report["gpus"]] == [False, False, False, True]
    assert report["gpus"][0]["tflops"] > 0
