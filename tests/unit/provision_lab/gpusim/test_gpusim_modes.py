"""The simulator's GPU modes (ECC, compute mode, MIG mode) against the real captures: the H200's
(tests/fixtures/real/h200-modes, driver 580.159.04) and public ones of GPUs without MIG or ECC
(../shared/real-outputs, skipped where it is absent)."""

from __future__ import annotations

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
