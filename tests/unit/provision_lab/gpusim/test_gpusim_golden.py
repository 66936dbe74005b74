"""The GPU simulator against verbatim captures of a real H100 80GB HBM3 and a real H200 (driver 580.159.04).

One simulated GPU is configured like each captured machine (UUID, PCI bus id, VBIOS,
serial, 16 CPUs, a VM) with persistence on, as it was. Each capture's command is re-run
through the simulator and compared with the capture, exit code included.

What may differ, and is then checked for its format only (a regex the captured value
must match too): readings that change from second to second (temperatures, power
draw, PCIe throughput, power samples, timestamps) and what identifies the second
machine some files were captured on (its UUID and serial; see the fixtures' README).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from realdata import REAL, REAL_H100, REAL_H200, capture
from paths import GPUSIM


CAPTURED_MACHINE = {
    "driver_version": "580.159.04",
    "cpus": 16,
    "numa_nodes": 1,
    "virtualization_mode": "Pass-Through",
    "gpus": [{"model": "h100-80gb-hbm3", "uuid": "GPU-5afa2088-c32d-f982-1ae7-09bebe697bea",
              "bus_id": "00000000:00:06.0", "vbios": "96.00.DA.00.0C", "serial": "1652824025694",
              "module_id": 7, "pdi": "0x1e0ce27097707d31"}],
}

H200_MACHINE = {  # tests/fixtures/real/h200 (h200-modes: a second H200 of the same kind, its identity not printed)
    "driver_version": "580.159.04", "cpus": 16, "numa_nodes": 1, "virtualization_mode": "Pass-Through",
    "gpus": [{"model": "h200", "uuid": "GPU-f6279c9f-c73c-8063-c8fa-426e0a9cb4c7", "bus_id": "00000000:00:06.0",
              "vbios": "96.00.A5.00.1A", "serial": "1654024032116", "module_id": 3, "pdi": "0x282fb1072fa48612"}],
}
REAL_H200_MODES = REAL / "h200-modes"

ASCTIME = r"[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4}"
UUID = r"GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
WATTS = r"\d+\.\d\d W"


def q_value(label: str, value: str) -> str:
    """A dynamic value in -q output: '<indent><label><padding>: <value>'."""
    return rf"^ *{re.escape(label)} +: (?P<v>{value})$"


Q_TIMESTAMP = q_value("Timestamp", ASCTIME)
Q_POWER_DRAW = (q_value("Average Power Draw", WATTS), q_value("Instantaneous Power Draw", WATTS))
Q_READINGS = (  # what a running GPU reports differently every second
    Q_TIMESTAMP, q_value("Tx Throughput", r"\d+ KB/s"), q_value("Rx Throughput", r"\d+ KB/s"),
    q_value("GPU Current Temp", r"\d+ C"), q_value("GPU T.Limit Temp", r"\d+ C"),
    q_value("Memory Current Temp", r"\d+ C"), *Q_POWER_DRAW,
)
Q_POWER_SAMPLES = (Q_TIMESTAMP, *Q_POWER_DRAW, q_value("Duration", r"\d+\.\d\d sec"), q_value("Max", WATTS),
                   q_value("Min", WATTS), q_value("Avg", WATTS))


@dataclass(frozen=True)
class Capture:
    name: str
    masks: tuple = ()  # regexes whose group "v" is dynamic (multi-line mode)
    columns: dict = field(default_factory=dict)  # CSV: field as queried -> format of its dynamic value
    program: str = "nvidia-smi"
    folder: Path = REAL_H100  # which machine's captures (and so which twin runs it)


SMI_MASKS = (rf"^(?P<v>{ASCTIME})", r" (?P<v>\d+)C ", r" (?P<v>\d+)W / ")
CAPTURES = [
    Capture("qgpu.txt", columns={"temperature.gpu": r"\d+", "power.draw": WATTS}),
    Capture("qgpu-nh.txt", columns={"temperature.gpu": r"\d+", "power.draw": r"\d+\.\d\d"}),
    # second machine: its serial
    Capture("qgpu2.txt", columns={"serial": r"\d{13}", "temperature.memory": r"\d+"}),
    Capture("qgpu2-nh.txt", columns={"serial": r"\d{13}", "temperature.memory": r"\d+"}),
    Capture("qsc.txt"),
    Capture("qsc-nh.txt"),
    Capture("remapped.txt", columns={"gpu_uuid": UUID}),  # second machine
    Capture("list.txt", masks=(rf"\(UUID: (?P<v>{UUID})\)",)),  # second machine
    Capture("smi-q.txt", masks=Q_READINGS),
    Capture("supported-clocks.txt", masks=(Q_TIMESTAMP,)),
    Capture("q-i0.txt", masks=Q_POWER_SAMPLES),
    Capture("smi.txt", masks=SMI_MASKS),
    Capture("topo.txt"),
    Capture("nvlink.txt"),
    Capture("bad-field.txt"),
    Capture("bad-gpu.txt"),
    Capture("sc-xml.txt"),
    Capture("smi-version.txt"),
    Capture("help.txt"),
    Capture("persistenced-help.txt", program="nvidia-persistenced"),
]
NOT_REPRODUCED = {"help-query-gpu.txt", "proc.txt", "pci.txt"}  # not simulated / not nvidia-smi
# -q -x: the readings, what names the second H200 (h200-modes/ was captured on it), and that card's own history
# (one PCIe replay, one aggregate SRAM parity error in L2)
XML_MASKS = (r"^\t+<(?:timestamp|tx_util|rx_util|gpu_temp|gpu_temp_tlimit|memory_temp|average_power_draw|"
             r"instant_power_draw|serial|uuid|pdi|module_id|replay_counter|sram_uncorrectable_parity|sram_l2)>"
             r"(?P<v>[^<]*)</",)
H200_CAPTURES = [Capture(name, masks=masks, folder=REAL_H200) for name, masks in (
    ("smi-q.txt", Q_READINGS), ("smi.txt", SMI_MASKS), ("supported-clocks.txt", (Q_TIMESTAMP,)), ("qsc.txt", ()),
    ("remapped.txt", ()), ("list.txt", ()), ("topo.txt", ()), ("nvlink.txt", ()), ("version.txt", ()))] + [
    Capture("qsample.txt", folder=REAL_H200, columns={"timestamp": r"\d{4}/\d\d/\d\d \d\d:\d\d:\d\d\.\d{3}",
            "power.draw": r"\d+\.\d\d", "power.draw.instant": r"\d+\.\d\d", "temperature.gpu": r"\d+"}),
] + [Capture(name, masks=masks, folder=REAL_H200_MODES) for name, masks in (
    ("q-modes.txt", ()), ("q-d-compute.txt", (Q_TIMESTAMP,)), ("q-d-rows.txt", (Q_TIMESTAMP,)),
    ("q-d-reset.txt", ()), ("q-reset.txt", ()), ("mig-lgip.txt", ()), ("mig-lgipp.txt", ()), ("mig-lgi.txt", ()),
    ("mig-lci.txt", ()), ("mig-lcip.txt", ()), ("mig-help.txt", ()), ("q-xml.txt", XML_MASKS))]
H200_NOT_REPRODUCED = {
    "dmesg.txt", "proc.txt", "pci.txt", "stack.txt",  # not nvidia-smi's
    "q-d-ecc.txt",  # its one aggregate SRAM parity error (in L2) is that card's history, not simulated
    # fabric.* read N/A unbracketed off an NVSwitch board; the simulator prints [N/A], which the lab's fabric
    # tests (tests/lab/test_fabric_manager.py, test_stack_upgrade.py) expect: to change together
    "qgpu.txt",
}


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    """Run the simulator against the captured H100's twin: (program, args) -> (output, exit code)."""
    return twin(tmp_path_factory, "h100", CAPTURED_MACHINE)


@pytest.fixture(scope="module")
def h200(tmp_path_factory):
    return twin(tmp_path_factory, "h200", H200_MACHINE)


def twin(tmp_path_factory, name: str, machine: dict):
    root = tmp_path_factory.mktemp(name)
    (root / "config.json").write_text(json.dumps(machine))
    env = dict(os.environ, NVIDIA_SIM_CONFIG=str(root / "config.json"), NVIDIA_SIM_STATE=str(root / "state.json"),
               NVIDIA_SIM_RUNDIR=str(root / "run"), NVIDIA_SIM_KMSG=str(root / "kern.log"),
               NVIDIA_SIM_DMESG=str(root / "dmesg"), NVIDIA_SIM_UID="0")

    def run(program: str, args: list) -> tuple:
        done = subprocess.run([sys.executable, str(GPUSIM), program, *args], env=env, capture_output=True,
                              text=True, timeout=30)  # run as the script it is on a node
        return done.stdout + done.stderr, done.returncode

    assert run("nvidia-smi", ["-pm", "1"])[1] == 0  # the captured machine ran with persistence on
    return run


def captured_command(name: str, folder: Path = REAL_H100) -> list:
    line = (folder / name).read_text().splitlines()[0]
    return shlex.split(line[2:])[1:]  # drop "$ " and the program name


def mask(text: str, patterns: tuple) -> str:
    for pattern in patterns:
        text = re.sub(pattern, lambda m: m.group(0)[:m.start("v") - m.start()] + "<dynamic>"
                      + m.group(0)[m.end("v") - m.start():], text, flags=re.M)
    return text


def compare_csv(got: str, expected: str, query: list, dynamic: dict) -> None:
    fields = next(arg for arg in query if arg.startswith("--query-")).split("=", 1)[1].split(",")
    got_rows, want_rows = got.splitlines(), expected.splitlines()
    assert len(got_rows) == len(want_rows)
    for got_row, want_row in zip(got_rows, want_rows):
        got_cells, want_cells = got_row.split(", "), want_row.split(", ")
        assert len(got_cells) == len(want_cells) == len(fields)
        for name, got_cell, want_cell in zip(fields, got_cells, want_cells):
            if name in dynamic and want_cell != name and not want_cell.startswith(name + " ["):  # not the header
                assert re.fullmatch(dynamic[name], want_cell), f"format for {name} does not fit the capture"
                assert re.fullmatch(dynamic[name], got_cell), f"{name}: {got_cell!r} is not like {want_cell!r}"
            else:
                assert got_cell == want_cell, f"{name}: {got_cell!r} != {want_cell!r}"


@pytest.mark.parametrize("spec", CAPTURES + H200_CAPTURES, ids=lambda c: f"{c.folder.name}/{c.name}")
def test_simulator_reproduces_capture(request, spec):
    sim = request.getfixturevalue("sim" if spec.folder == REAL_H100 else "h200")
    expected, expected_rc = capture(spec.name, spec.folder)
    if expected == "\n":  # an empty capture (nvlink -s on a machine without NVLink)
        expected = ""
    args = captured_command(spec.name, spec.folder)
    got, rc = sim(spec.program, args)
    assert rc == expected_rc
    if spec.columns:
        compare_csv(got, expected, args, spec.columns)
        return
    for pattern in spec.masks:
        assert re.search(pattern, expected, re.M), f"mask {pattern!r} matches nothing in the capture"
    assert mask(got, spec.masks).splitlines() == mask(expected, spec.masks).splitlines()
    assert got.endswith("\n") == expected.endswith("\n")


def test_every_capture_is_compared_or_knowingly_skipped():
    compared = {c.name for c in CAPTURES} | NOT_REPRODUCED
    assert {p.name for p in REAL_H100.glob("*.txt")} <= compared
    compared = {(c.folder, c.name) for c in H200_CAPTURES}
    for folder in (REAL_H200, REAL_H200_MODES):
        assert {(folder, p.name) for p in folder.glob("*.txt")} - compared == {
            (folder, name) for name in H200_NOT_REPRODUCED if (folder / name).exists()}


# A fault changes only the lines it should: the captured machine's twin, braked by its power supply, prints
# the captured -q and query rows but for the clock event reasons; repaired, the captures again.
POWER_BRAKE = {  # -q line (label) -> its value under a power brake (NVML: HW Slowdown | HW Power Brake Slowdown)
    "Idle": "Not Active", "HW Slowdown": "Active", "HW Power Brake Slowdown": "Active"}


def braked(text: str) -> str:
    for label, value in POWER_BRAKE.items():
        text, count = re.subn(rf"^( +{re.escape(label)} +: ).*$", rf"\g<1>{value}", text, flags=re.M)
        assert count == 1, label
    return text


def test_a_power_brake_changes_only_the_clock_event_reasons_and_clear_restores_the_capture(sim):
    smi_q = next(c for c in CAPTURES if c.name == "smi-q.txt")
    braking = (*smi_q.masks, q_value("HW Power Braking", r"\d+ us"))
    expected, _ = capture("smi-q.txt")
    qgpu2, _ = capture("qgpu2.txt")
    assert sim("fault", ["0", "power-brake"])[1] == 0
    try:
        got, rc = sim("nvidia-smi", captured_command("smi-q.txt"))
        assert rc == 0
        assert mask(got, braking).splitlines() == mask(braked(expected), braking).splitlines()
        assert re.search(r"^ +HW Power Braking +: [1-9]\d* us$", got, re.M)
        got, rc = sim("nvidia-smi", captured_command("qgpu2.txt"))
        header, row = qgpu2.splitlines()
        cells = dict(zip(header.split(", "), got.splitlines()[1].split(", ")))
        want = dict(zip(header.split(", "), row.split(", ")))
        assert cells.pop("clocks_event_reasons.active") == "0x0000000000000088"
        assert cells.pop("clocks_event_reasons.hw_slowdown") == "Active"
        for name in ("clocks_event_reasons.active", "clocks_event_reasons.hw_slowdown", "serial", "temperature.memory"):
            want.pop(name)
        assert {k: v for k, v in cells.items() if k in want} == want
    finally:
        assert sim("fault", ["0", "clear"])[1] == 0
    got, rc = sim("nvidia-smi", captured_command("smi-q.txt"))
    assert mask(got, smi_q.masks).splitlines() == mask(expected, smi_q.masks).splitlines()
