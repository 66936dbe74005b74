"""The simulator's GPU modes (ECC, compute mode, MIG mode) against the real captures: the H200's
(tests/fixtures/real/h200-modes, driver 580.159.04) and public ones of GPUs without MIG or ECC
(../shared/real-outputs, skipped where it is absent)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from builders.simulator import Sim, lines, pycache, sim
from realdata import REAL, capture

__all__ = ["pycache", "sim"]  # the fixtures, used by name

REAL_H200_MODES = REAL / "h200-modes"
REAL_OUTPUTS = Path(__file__).resolve().parents[4].parent / "shared" / "real-outputs"
MODE_FIELDS = "index,ecc.mode.current,ecc.mode.pending,compute_mode,mig.mode.current,mig.mode.pending"


def real_output(name: str) -> str:
    path = REAL_OUTPUTS / name
    if not path.exists():
        pytest.skip(f"{path} is absent")
    return path.read_text()


def xml_value(text: str, tag: str) -> str:
    return text.split(f"<{tag}>", 1)[1].split(f"</{tag}>", 1)[0]


def test_the_mode_fields_of_a_hopper_gpu_read_as_the_real_h200s(sim: Sim) -> None:
    sim.configure(("h100-80gb-hbm3", 1))
    command = (REAL_H200_MODES / "q-modes.txt").read_text().splitlines()[0]
    assert command.split()[2] == f"--query-gpu={MODE_FIELDS}"
    assert (sim.ok(f"--query-gpu={MODE_FIELDS}", "--format=csv"), 0) == capture("q-modes.txt", REAL_H200_MODES)


@pytest.mark.parametrize(("model", "capture_name"), [
    ("rtx-3090", "supported-clocks/xml-rtx3090-geforce.txt"),
])
def test_a_gpu_without_mig_or_ecc_reads_na_as_a_real_one(sim: Sim, model: str, capture_name: str) -> None:
    text = real_output(capture_name)
    want = [xml_value(text, tag) for tag in ("current_ecc", "pending_ecc", "compute_mode", "current_mig",
                                             "pending_mig")]
    sim.configure((model, 1))
    got = sim.query(MODE_FIELDS)[0][1:]
    assert got == [value if value != "N/A" else "[N/A]" for value in want]


def test_every_model_answers_the_mode_fields(sim: Sim) -> None:
    sim.configure(("v100-sxm2-16gb", 1), ("rtx-3090", 1), ("rtx-4090", 1), ("h100-80gb-hbm3", 1))
    assert [row[1:] for row in sim.query(MODE_FIELDS)] == [
        ["Enabled", "Enabled", "Default", "[N/A]", "[N/A]"],  # Volta: no MIG
        ["[N/A]", "[N/A]", "Default", "[N/A]", "[N/A]"],  # GDDR6X without ECC
        ["Disabled", "Disabled", "Default", "[N/A]", "[N/A]"],  # ECC off by default on GeForce
        ["Enabled", "Enabled", "Default", "Disabled", "Disabled"],
    ]
    assert lines(sim.ok("--query-gpu=compute_mode", "--format=csv"))[0] == "compute_mode"


# --- ECC mode: pending until the GPU resets ---------------------------------------------------------------


def test_ecc_off_is_pending_until_a_reboot(sim: Sim) -> None:
    sim.configure(("h100-80gb-hbm3", 1))
    bus = sim.bus(0)
    # the wording of a real `nvidia-smi -e 0` (a public T4 walk-through; gpu_models.md, "Modes")
    assert sim.ok("-e", "0") == f"Disabled ECC support for GPU {bus}.\nAll done.\nReboot required.\n"
    assert sim.query("ecc.mode.current,ecc.mode.pending") == [["Enabled", "Disabled"]]
    assert q_values(sim.q("0", "ECC"), "Current", "Pending") == ["Enabled", "Disabled"]
    sim.gpusim("reboot")
    assert sim.query("ecc.mode.current,ecc.mode.pending,ecc.errors.uncorrected.volatile.total") == [
        ["Disabled", "Disabled", "[N/A]"]]
    sim.ok("-e", "ENABLED")
    sim.gpusim("reboot")
    assert sim.query("ecc.mode.current,ecc.mode.pending") == [["Enabled", "Enabled"]]


def test_ecc_on_gddr_memory_costs_a_sixteenth_of_it(sim: Sim) -> None:
    sim.configure(("rtx-4090", 1))
    assert sim.column("memory.total") == ["24564"]
    sim.ok("-e", "1")
    assert sim.column("memory.total") == ["24564"]  # pending: nothing changes until the reset
    sim.gpusim("reboot")
    # 24 GiB of GDDR with ECC on: what a real A10 (24 GiB GDDR6, ECC on by default) reports
    a10 = real_output("query-csv/a10-lms-timestamp-pstate-memory.txt").splitlines()[5]
    assert sim.column("memory.total") == ["23028"] == [a10.split(", ")[5].split()[0]]


def test_a_gpu_without_ecc_refuses_it_as_a_warning(sim: Sim) -> None:
    sim.configure(("rtx-3090", 1))
    done = sim.smi("-e", "1")
    assert (done.stdout, done.returncode) == (
        f"Setting ECC mode is not supported for GPU {sim.bus(0)}.\nTreating as warning and moving on.\nAll done.\n", 0)
    assert sim.query("ecc.mode.current,ecc.mode.pending") == [["[N/A]", "[N/A]"]]


# --- compute mode: set at once, lost at every reboot -------------------------------------------------------


@pytest.mark.parametrize(("value", "name", "word"), [
    ("3", "EXCLUSIVE_PROCESS", "Exclusive_Process"), ("PROHIBITED", "PROHIBITED", "Prohibited")])
def test_compute_mode_is_set_at_once_and_lost_at_a_reboot(sim: Sim, value: str, name: str, word: str) -> None:
    sim.configure(("h100-80gb-hbm3", 1))
    sim.ok("-pm", "1")
    bus = sim.bus(0)
    # the wording of a real `nvidia-smi -c 3` and of -q after it (gpu_models.md, "Modes")
    assert sim.ok("-c", value) == f"Set compute mode to {name} for GPU {bus}.\nAll done.\n"
    assert sim.column("compute_mode") == [word]
    assert q_values(sim.q("0", "COMPUTE"), "Compute Mode") == [word]
    sim.gpusim("reboot")
    assert sim.column("compute_mode") == ["Default"]


def test_compute_mode_values_nvidia_smi_refuses(sim: Sim) -> None:
    sim.configure(("h100-80gb-hbm3", 1))
    done = sim.smi("-c", "9")
    assert (done.stdout, done.returncode) == (
        "ERROR: Invalid value \"9\" for option -c. Please run 'nvidia-smi -h' for help.\n", 2)


def test_q_d_compute_reads_as_the_real_h200s(sim: Sim) -> None:
    (sim.root / "config.json").write_text(json.dumps(
        {"driver_version": "580.159.04", "gpus": [{"model": "h100-80gb-hbm3", "bus_id": "00000000:00:06.0"}]}))
    want, rc = capture("q-d-compute.txt", REAL_H200_MODES)
    got = sim.ok("-q", "-d", "COMPUTE")
    stamp = [line for line in want.splitlines() if line.startswith("Timestamp")][0]
    assert (got.replace([line for line in got.splitlines() if line.startswith("Timestamp")][0], stamp), 0) == (
        want, rc)


# --- nvidia-smi -r: pending modes take effect where nothing holds the GPU -------------------------------------


def test_a_gpu_reset_brings_pending_modes_into_effect_and_clears_settings(sim: Sim) -> None:
    sim.configure(("h100-80gb-hbm3", 2))
    sim.ok("-pm", "1")
    sim.ok("-e", "0")
    sim.ok("-c", "3")
    # the wording of a real `nvidia-smi -r` over two GPUs (gpu_models.md, "Modes")
    assert sim.ok("-r") == f"GPU {sim.bus(0)} was successfully reset.\nGPU {sim.bus(1)} was successfully reset.\nAll done.\n"
    assert sim.query("ecc.mode.current,ecc.mode.pending,compute_mode") == [["Disabled", "Disabled", "Default"]] * 2


@pytest.mark.parametrize("holder", ["daemon", "process"])
def test_a_gpu_something_holds_is_not_reset(sim: Sim, holder: str) -> None:
    sim.configure(("h100-80gb-hbm3", 1))
    sim.ok("-e", "0")
    if holder == "daemon":
        assert sim.run("nvidia-persistenced").returncode == 0
    else:
        sim.gpusim("fault", "0", "process")
    done = sim.smi("-r")
    assert done.returncode == 255
    assert done.stdout.startswith(f"GPU {sim.bus(0)} is currently in use by another process.\n\n1 device is currently")
    assert sim.query("ecc.mode.current,ecc.mode.pending") == [["Enabled", "Disabled"]]
    if holder == "process":
        sim.gpusim("fault", "0", "clear")


def test_only_root_resets_a_gpu(sim: Sim) -> None:
    sim.configure(("h100-80gb-hbm3", 1))
    done = sim.smi("-r", uid=1000)
    assert (done.stdout, done.returncode) == (f"Unable to reset GPU {sim.bus(0)}: Insufficient Permissions\n", 4)


def q_values(text: str, *labels: str) -> list[str]:
    """The values of -q lines with these labels, in order."""
    return [line.split(" : ", 1)[1].strip() for line in text.splitlines()
            if line.strip().split(" ", 1)[0] and line.split(":", 1)[0].strip() in labels]
