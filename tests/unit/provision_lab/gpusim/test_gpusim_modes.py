"""The simulator's GPU modes (ECC, compute mode, MIG mode) against the real captures: the H200's
(tests/fixtures/real/h200-modes, driver 580.159.04) and public ones of GPUs without MIG or ECC
(../shared/real-outputs, skipped where it is absent)."""

from __future__ import annotations

import re
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
    assert done.stdout.startswith(f"The following GPUs could not be reset:\n  GPU {sim.bus(0)}: In use by another "
                                  "client\n\n1 device is currently")  # the 5xx wording (gpusim/reset.py)
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


# --- MIG mode and its instances ------------------------------------------------------------------------------


def mig_h100(sim: Sim, count: int = 1) -> Sim:
    sim.configure(("h100-80gb-hbm3", count))
    sim.ok("-pm", "1")  # legacy persistence: nothing holds the GPU, as nvidia-persistenced would
    return sim


def test_mig_mode_takes_effect_at_once_where_nothing_holds_the_gpu(sim: Sim) -> None:
    mig_h100(sim)
    # the wording of real `nvidia-smi -i 0 -mig 1` / `-mig 0` runs (gpu_models.md, "MIG")
    assert sim.ok("-i", "0", "-mig", "1") == f"Enabled MIG Mode for GPU {sim.bus(0)}\nAll done.\n"
    assert sim.query("mig.mode.current,mig.mode.pending") == [["Enabled", "Enabled"]]
    assert q_values(sim.ok("-q"), "Current", "Pending")[:2] == ["Enabled", "Enabled"]  # -q's MIG Mode comes first
    assert sim.ok("-mig", "0") == f"Disabled MIG Mode for GPU {sim.bus(0)}\nAll done.\n"
    assert sim.query("mig.mode.current,mig.mode.pending") == [["Disabled", "Disabled"]]


def test_on_hopper_the_daemon_does_not_keep_mig_mode_pending(sim: Sim) -> None:
    """Since Hopper enabling MIG mode needs no GPU reset (node-lifecycle-reference.md 5.1), so the persistence
    daemon's handle, which keeps an Ampere's change pending, does not keep a Hopper's."""
    sim.configure(("h100-80gb-hbm3", 1))
    assert sim.run("nvidia-persistenced").returncode == 0
    assert sim.ok("-i", "0", "-mig", "1") == f"Enabled MIG Mode for GPU {sim.bus(0)}\nAll done.\n"
    assert sim.query("mig.mode.current,mig.mode.pending") == [["Enabled", "Enabled"]]
    sim.stop_daemon()


def test_mig_mode_is_pending_while_a_process_holds_the_gpu_until_a_reset(sim: Sim) -> None:
    mig_h100(sim)
    sim.gpusim("fault", "0", "process")
    bus = sim.bus(0)
    # the real DGX warning, node-lifecycle-reference.md 5.1
    assert sim.ok("-mig", "1") == (
        f"Warning: MIG mode is in pending enable state for GPU {bus}:In use by another client\n{bus} is currently "
        "being used by one or more other processes (e.g. CUDA application or a monitoring application such as another "
        "instance of nvidia-smi). Please first kill all processes using the device and retry the command or reboot "
        "the system to make MIG mode effective.\nAll done.\n")
    assert sim.query("mig.mode.current,mig.mode.pending") == [["Disabled", "Enabled"]]
    assert sim.ok("mig", "-lgi") == "No MIG-enabled devices found.\n"
    sim.gpusim("fault", "0", "clear")
    sim.ok("-r")
    assert sim.query("mig.mode.current,mig.mode.pending") == [["Enabled", "Enabled"]]


def test_a_gpu_without_mig_refuses_it_as_a_warning(sim: Sim) -> None:
    sim.configure(("v100-sxm2-16gb", 1))
    done = sim.smi("-mig", "1")
    # the wording of a real `-mig 1` on an RTX A5000 (gpu_models.md, "MIG")
    assert (done.stdout, done.returncode) == (
        f"Unable to enable MIG Mode for GPU {sim.bus(0)}: Not Supported\nTreating as warning and moving on.\n"
        "All done.\n", 0)


def test_the_h100s_profiles_in_the_real_layout(sim: Sim) -> None:
    """The H200's listings are compared verbatim in test_gpusim_golden.py; the H100's figures here come from a
    public walk-through of an older driver's narrower layout (gpu_models.md [MIG-H100])."""
    text = capture("mig-lgip.txt", REAL_H200_MODES)[0]
    mig_h100(sim)
    listed = sim.ok("mig", "-lgip").splitlines()
    assert listed[:5] == text.splitlines()[:5]
    assert [line.split("|")[1].split() for line in listed[5::3]] == [
        ["0", "MIG", "1g.10gb", "19", "7/7", "9.75", "No", "16", "1", "0"],
        ["0", "MIG", "1g.10gb+me", "20", "1/1", "9.75", "No", "16", "1", "0"],
        ["0", "MIG", "1g.20gb", "15", "4/4", "19.62", "No", "26", "1", "0"],
        ["0", "MIG", "2g.20gb", "14", "3/3", "19.62", "No", "32", "2", "0"],
        ["0", "MIG", "3g.40gb", "9", "2/2", "39.50", "No", "60", "3", "0"],
        ["0", "MIG", "4g.40gb", "5", "1/1", "39.50", "No", "64", "4", "0"],
        ["0", "MIG", "7g.80gb", "0", "1/1", "79.25", "No", "132", "7", "0"]]
    placements = capture("mig-lgipp.txt", REAL_H200_MODES)[0]  # the H100's and H200's placements are the same
    assert sim.ok("mig", "-lgipp") == placements


def test_cgi_with_default_compute_instances_lists_and_destroys_as_nvidia_smi_does(sim: Sim) -> None:
    mig_h100(sim)
    sim.ok("-mig", "1")
    # the wording of real `-cgi ... -C`, `-dci`, `-dgi` runs on an H100 80GB (gpu_models.md, "MIG")
    assert lines(sim.ok("mig", "-cgi", "9,3g.40gb", "-C")) == [
        "Successfully created GPU instance ID  2 on GPU  0 using profile MIG 3g.40gb (ID  9)",
        "Successfully created compute instance ID  0 on GPU  0 GPU instance ID  2 using profile MIG 3g.40gb (ID  2)",
        "Successfully created GPU instance ID  1 on GPU  0 using profile MIG 3g.40gb (ID  9)",
        "Successfully created compute instance ID  0 on GPU  0 GPU instance ID  1 using profile MIG 3g.40gb (ID  2)"]
    gis = lines(sim.ok("mig", "-lgi"))
    assert gis[0] == gis[-1] == "+" + "-" * 57 + "+" and len({len(line) for line in gis}) == 1
    assert gis[5:] == ["|   0  MIG 3g.40gb            9        1          4:4     |", gis[0],
                       "|   0  MIG 3g.40gb            9        2          0:4     |", gis[0]]
    cis = lines(sim.ok("mig", "-lci"))
    assert len({len(line) for line in cis}) == 1 and cis[6] == (
        "|   0      1       MIG 3g.40gb          2         0          0:3     |")
    failed = sim.smi("mig", "-cgi", "19")
    assert (failed.stdout, failed.returncode) == (
        "Unable to create a GPU instance on GPU  0 using profile 19: Insufficient Resources\n"
        "Failed to create GPU instances: Insufficient Resources\n", 255)
    busy = sim.smi("mig", "-dgi")
    assert (busy.stdout, busy.returncode) == (
        "Unable to destroy GPU instance ID  1 from GPU  0: In use by another client\n"
        "Failed to destroy GPU instances: In use by another client\n", 255)
    assert lines(sim.ok("mig", "-dci")) == [
        "Successfully destroyed compute instance ID  0 from GPU  0 GPU instance ID  1",
        "Successfully destroyed compute instance ID  0 from GPU  0 GPU instance ID  2"]
    assert lines(sim.ok("mig", "-dgi")) == ["Successfully destroyed GPU instance ID  1 from GPU  0",
                                            "Successfully destroyed GPU instance ID  2 from GPU  0"]
    assert sim.ok("mig", "-lgi") == "No GPU instances found.\n"


def test_mig_devices_in_the_table_and_in_the_list(sim: Sim) -> None:
    mig_h100(sim, 2)
    sim.ok("-i", "0", "-mig", "1")
    sim.ok("mig", "-i", "0", "-cgi", "9,9", "-C")
    listed = lines(sim.ok("-L"))
    assert [re.sub(r"MIG-[0-9a-f-]{36}", "MIG-uuid", line) for line in listed[1:3]] == [
        "  MIG 3g.40gb     Device  0: (UUID: MIG-uuid)", "  MIG 3g.40gb     Device  1: (UUID: MIG-uuid)"]
    assert listed[3].startswith("GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-")
    table = lines(sim.ok())
    start = table.index("| MIG devices:" + " " * 76 + "|")
    # rows as a real 580 driver prints an H100's 3g.40gb devices (gpu_models.md [MIG-TABLE])
    assert table[start + 6:start + 9] == [
        "|  0    1   0   0  |               0MiB / 40448MiB    | 60      0 |  3   0    3    0    3 |",
        "|                  |               0MiB / 24740MiB    |           |                       |",
        "+------------------+----------------------------------+-----------+-----------------------+"]
    gpu0 = table[table.index("|=========================================+========================+======================|") + 1:][:3]
    assert gpu0[0].endswith("Off |                   On |") and "|     N/A      Default |" in gpu0[1]
    assert gpu0[2].endswith("|              Enabled |")


def test_a_reset_loses_the_instances_and_keeps_mig_mode(sim: Sim) -> None:
    mig_h100(sim)
    sim.ok("-mig", "1")
    sim.ok("mig", "-cgi", "19", "-C")
    sim.ok("-r")
    assert sim.query("mig.mode.current") == [["Enabled"]] and sim.ok("mig", "-lgi") == "No GPU instances found.\n"


def test_a_hopper_loses_mig_mode_with_its_instances_at_a_reboot(sim: Sim) -> None:
    """Hopper+ keeps MIG mode only while the driver is loaded (no InfoROM bit; node-lifecycle-reference.md 5.4)."""
    mig_h100(sim)
    sim.ok("-mig", "1")
    sim.ok("mig", "-cgi", "19", "-C")
    sim.gpusim("reboot")
    assert sim.query("mig.mode.current,mig.mode.pending") == [["Disabled", "Disabled"]]
    assert sim.ok("mig", "-lgi") == "No MIG-enabled devices found.\n"


def test_the_mig_instances_gone_fault(sim: Sim) -> None:
    mig_h100(sim)
    assert sim.run("fault", "0", "mig-instances-gone").returncode == 255  # MIG mode off: no instances to lose
    sim.ok("-mig", "1")
    sim.ok("mig", "-cgi", "19,19", "-C")
    sim.gpusim("fault", "0", "mig-instances-gone")
    assert sim.ok("mig", "-lgi") == "No GPU instances found.\n"
    assert sim.query("mig.mode.current") == [["Enabled"]]


def test_creating_instances_needs_root_and_an_idle_gpu(sim: Sim) -> None:
    mig_h100(sim)
    sim.ok("-mig", "1")
    denied = sim.smi("mig", "-cgi", "19", uid=1000)
    assert (denied.stdout, denied.returncode) == ("Failed to create GPU instances: Insufficient Permissions\n", 4)
    sim.gpusim("fault", "0", "process")
    busy = sim.smi("mig", "-cgi", "20", "-C")
    # the wording of a real -cgi while a process held the GPU (gpu_models.md, "MIG")
    assert (busy.stdout, busy.returncode) == (
        "Unable to create a GPU instance on GPU  0 using profile 20: In use by another client\n"
        "Failed to create GPU instances: In use by another client\n", 255)
    sim.gpusim("fault", "0", "clear")


def test_the_table_abbreviates_exclusive_process_as_real_tables_do(sim: Sim) -> None:
    mig_h100(sim)
    sim.ok("-c", "3")
    # `|      0%   E. Process |`: real 580-layout tables of an A100 and a V100 (gpu_models.md, "Modes")
    assert "|      0%   E. Process |" in sim.ok()


def test_in_mig_mode_the_gpu_reports_no_utilization(sim: Sim) -> None:
    mig_h100(sim)
    sim.ok("-mig", "1")
    assert sim.query("utilization.gpu,utilization.memory") == [["[N/A]", "[N/A]"]]


def test_pinned_placements_by_uuid_and_the_compute_instances_made_apart(sim: Sim) -> None:
    """As provision's MIG layout task runs it: -i UUID, profile IDs with their start slots, then -cci."""
    mig_h100(sim, 2)
    uuid = sim.uuids()[1]
    sim.ok("-i", uuid, "-mig", "1")
    assert lines(sim.ok("mig", "-i", uuid, "-cgi", "5:0,9:4")) == [
        "Successfully created GPU instance ID  2 on GPU  1 using profile MIG 4g.40gb (ID  5)",
        "Successfully created GPU instance ID  1 on GPU  1 using profile MIG 3g.40gb (ID  9)"]
    assert sim.ok("mig", "-lci") == "No compute instances found.\n"
    assert lines(sim.ok("mig", "-i", uuid, "-cci", "-gi", "1")) == [
        "Successfully created compute instance ID  0 on GPU  1 GPU instance ID  1 using profile MIG 3g.40gb (ID  2)"]
    assert lines(sim.ok("mig", "-cci", "-gi", "2")) == [
        "Successfully created compute instance ID  0 on GPU  1 GPU instance ID  2 using profile MIG 4g.40gb (ID  3)"]
    rows = [line for line in lines(sim.ok("mig", "-lgi")) if " MIG " in line]
    assert [row.split()[3:7] for row in rows] == [["3g.40gb", "9", "1", "4:4"], ["4g.40gb", "5", "2", "0:4"]]
    taken = sim.smi("mig", "-i", uuid, "-cgi", "9:0")
    assert (taken.stdout, taken.returncode) == (
        "Unable to create a GPU instance on GPU  1 using profile 9:0: Insufficient Resources\n"
        "Failed to create GPU instances: Insufficient Resources\n", 255)
    nowhere = sim.smi("mig", "-i", uuid, "-cgi", "9:1")  # 3g.40gb starts at 0 or 4 only
    assert (nowhere.stdout, nowhere.returncode) == (
        "Unable to create a GPU instance on GPU  1 using profile 9:1: Invalid Argument\n"
        "Failed to create GPU instances: Invalid Argument\n", 2)
