"""The simulator's recovery action (gpusim/recovery.py) held to the real H200's (tests/fixtures/real/h200-recovery,
driver 580.159.04, a healthy GPU: `None`)."""

from __future__ import annotations

from builders.simulator import Sim, pycache, sim
from realdata import REAL

__all__ = ["pycache", "sim"]  # the fixtures, used by name

REAL_H200_RECOVERY = REAL / "h200-recovery"


def test_a_healthy_gpu_answers_the_recovery_action_field_as_the_real_h200(sim: Sim) -> None:
    sim.configure(("h200", 1))
    captured = (REAL_H200_RECOVERY / "recovery-field.txt").read_text().splitlines()
    header, value, _, row = captured[:4]
    assert sim.ok("--query-gpu=gpu_recovery_action", "--format=csv").splitlines() == [header, value]
    asked = sim.ok("--query-gpu=index,pci.bus_id,gpu_recovery_action", "--format=csv,noheader")
    assert asked.splitlines()[0].split(", ")[2] == row.split(", ")[2]


def test_q_prints_the_recovery_action_line_as_the_real_h200(sim: Sim) -> None:
    sim.configure(("h200", 1))
    captured = (REAL_H200_RECOVERY / "q-recovery-lines.txt").read_text().splitlines()[0]
    line = captured.split(":", 1)[1]  # grep -n's line number first
    assert line in sim.ok("-q").splitlines()
