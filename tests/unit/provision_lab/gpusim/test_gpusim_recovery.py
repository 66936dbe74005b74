"""The simulator's recovery action (gpusim/recovery.py) held to the real H200's (tests/fixtures/real/h200-recovery,
driver 580.159.04, a healthy GPU: `None`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from builders.simulator import Sim, pycache, sim
from provision.capabilities.health.kernlog import parse
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


# --- the faults: what each shows, and what ends it ------------------------------------------------------------
# The kernel lines are the ones verify is held to (RECOGNISE's wording: Xid 154 as the driver's gpu.c formats it,
# NV_ERR_RESET_REQUIRED verbatim from scitix/sichek#51, the Xid 79 pair from real HGX dmesg).

def xid154(sim: Sim, new: str) -> str:
    return f"NVRM: Xid (PCI:0000:{sim.bus(0)[9:14].lower()}): 154, GPU recovery action changed from 0x0 (None) to {new}"


def test_a_gpu_that_needs_a_reset_says_so_until_it_is_reset(sim: Sim) -> None:
    sim.configure(("h100-80gb-hbm3", 2))
    sim.gpusim("fault", "0", "reset-required")
    assert sim.column("gpu_recovery_action") == ["Reset", "None"]
    assert "    GPU Recovery Action                                : Reset" in sim.ok("-q", "-i", "0").splitlines()
    assert "\t\t<gpu_recovery_action>Reset</gpu_recovery_action>" in sim.ok("-q", "-x", "-i", "0").splitlines()
    assert sim.ring_messages()[-2:] == [
        xid154(sim, "0x1 (GPU Reset Required)"),
        "NVRM: nvAssertOkFailedNoLog: Assertion failed: Reset required [NV_ERR_RESET_REQUIRED] (0x00000062) "
        "returned from status @ kernel_channel.c:2874"]
    assert sim.ok("-r", "-i", "0") == f"GPU {sim.bus(0)} was successfully reset.\n"  # one GPU: no "All done."
    assert sim.column("gpu_recovery_action") == ["None", "None"]


def test_drain_and_reset_lets_the_work_end_and_is_cleared_by_a_reset(sim: Sim) -> None:
    sim.configure(("h100-80gb-hbm3", 1))
    sim.gpusim("fault", "0", "reset-required", "--drain")
    assert sim.column("gpu_recovery_action") == ["Drain and Reset"]
    assert sim.ring_messages()[-1] == xid154(sim, "0x4 (Drain and Reset)")  # nothing refused yet
    sim.ok("-r")
    assert sim.column("gpu_recovery_action") == ["None"]


def test_a_reboot_ends_a_reset_required_state_too(sim: Sim) -> None:
    sim.configure(("h100-80gb-hbm3", 1))
    sim.gpusim("fault", "0", "reset-required")
    sim.gpusim("reboot")
    assert sim.column("gpu_recovery_action") == ["None"]
    assert not any("154" in line for line in sim.ring_messages())


def test_a_gpu_that_needs_a_reboot_keeps_asking_after_a_reset(sim: Sim) -> None:
    sim.configure(("h100-80gb-hbm3", 1))
    sim.gpusim("fault", "0", "needs-reboot")
    pci = sim.bus(0)[9:14].lower()
    assert sim.ring_messages()[-3:] == [
        f"NVRM: Xid (PCI:0000:{pci}): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
        f"NVRM: GPU 0000:{pci}.0: GPU has fallen off the bus.", xid154(sim, "0x2 (Node Reboot Required)")]
    assert sim.column("gpu_recovery_action") == ["Reboot"]  # back on the bus: it answers
    sim.ok("-r")
    assert sim.column("gpu_recovery_action") == ["Reboot"]
    sim.gpusim("reboot")
    assert sim.column("gpu_recovery_action") == ["None"]
    assert sim.ring_messages()[-1].startswith("NVRM: loading NVIDIA UNIX")  # nothing since the driver loaded


def test_a_failing_card_fails_again_after_every_boot_with_its_serial(sim: Sim) -> None:
    sim.configure(("h100-80gb-hbm3", 2))
    serial = sim.query("serial", gpu="1")[0][0]
    sim.gpusim("fault", "1", "failing-card")
    for _ in range(2):
        sim.ok("-r")
        assert sim.column("gpu_recovery_action") == ["None", "Reboot"]
        sim.gpusim("reboot")
        assert sim.column("gpu_recovery_action") == ["None", "Reboot"]
        assert sim.ring_messages()[-1].endswith("to 0x2 (Node Reboot Required)")
        assert sim.query("serial", gpu="1")[0][0] == serial
    sim.gpusim("fault", "1", "clear")  # the card replaced
    sim.gpusim("reboot")
    assert sim.column("gpu_recovery_action") == ["None", "None"]


def test_a_gpu_off_the_bus_takes_no_recovery_fault(sim: Sim) -> None:
    sim.configure(("h100-80gb-hbm3", 1))
    sim.gpusim("fault", "0", "off-bus")
    done = sim.run("fault", "0", "reset-required")
    assert (done.returncode, done.stderr) == (255, "gpusim: GPU 0 is off the bus: the driver cannot hear of its "
                                                   "faults\n")


# --- nvidia-smi -r: refused while anything holds a GPU ----------------------------------------------------------

def refusal(buses: list[str]) -> str:
    count = "1 device is" if len(buses) == 1 else f"{len(buses)} devices are"
    return ("The following GPUs could not be reset:\n" + "".join(f"  GPU {bus}: In use by another client\n"
                                                                 for bus in buses)
            + f"\n{count} currently being used by one or more other processes (e.g., Fabric Manager, CUDA "
            "application, graphics application such as an X server, or a monitoring application such as another "
            "instance of nvidia-smi). Please first kill all processes using this device and all compute "
            "applications running in the system.\n")


def test_a_process_on_one_gpu_refuses_a_reset_of_both_and_resets_none(sim: Sim) -> None:
    sim.configure(("h100-80gb-hbm3", 2))
    sim.gpusim("fault", "0", "reset-required")
    sim.gpusim("fault", "1", "process")
    done = sim.smi("-r")
    assert (done.stdout, done.returncode) == (refusal([sim.bus(1)]), 255)
    assert sim.column("gpu_recovery_action") == ["Reset", "None"]
    sim.gpusim("fault", "1", "clear")
    assert sim.ok("-r") == (f"GPU {sim.bus(0)} was successfully reset.\nGPU {sim.bus(1)} was successfully reset.\n"
                            "All done.\n")
    assert sim.column("gpu_recovery_action") == ["None", "None"]


def test_the_persistence_daemon_holds_the_gpus_it_keeps_persistent(sim: Sim) -> None:
    sim.configure(("h100-80gb-hbm3", 2))
    assert sim.run("nvidia-persistenced").returncode == 0
    sim.gpusim("fault", "0", "reset-required")
    done = sim.smi("-r")
    assert (done.stdout, done.returncode) == (refusal([sim.bus(0), sim.bus(1)]), 255)
    sim.ok("-pm", "0", "-i", "0")  # through the daemon: it lets go of that GPU (NVIDIA/NVSentinel#1690)
    assert sim.ok("-r", "-i", "0") == f"GPU {sim.bus(0)} was successfully reset.\n"
    assert sim.column("gpu_recovery_action") == ["None", "None"]


@pytest.mark.parametrize("program", ["nv-fabricmanager", "nv-hostengine"])
def test_a_fabric_manager_or_dcgm_host_engine_holds_every_gpu(sim: Sim, tmp_path: Path, program: str) -> None:
    sim.configure(("h100-80gb-hbm3", 1))
    sim.gpusim("fault", "0", "reset-required")
    proc = tmp_path / "proc"
    (proc / "4242").mkdir(parents=True)
    (proc / "4242" / "comm").write_text(program[:15] + "\n")  # the kernel keeps 15 characters of a name
    (proc / "self").mkdir()
    sim.env["NVIDIA_SIM_PROC"] = str(proc)
    done = sim.smi("-r")
    assert (done.stdout, done.returncode) == (refusal([sim.bus(0)]), 255)
    (proc / "4242" / "comm").unlink()  # it stopped
    sim.ok("-r")
    assert sim.column("gpu_recovery_action") == ["None"]


def test_a_reset_on_an_nvswitch_board_takes_the_gpus_out_of_the_fabric(sim: Sim) -> None:
    sim.configure(("h100-80gb-hbm3", 8), board="hgx-h100-8")
    sim.gpusim("init")
    state = sim.state()
    for record in state["gpus"]:
        record.update(fabric_state="Completed", fabric_status="Success")  # as the running fabric manager left them
    (sim.root / "state.json").write_text(json.dumps(state))
    sim.gpusim("fault", "3", "reset-required")
    sim.ok("-r")  # without -i: every GPU (and NVSwitch) of the board, as NVIDIA's FM guide has it
    assert sim.query("fabric.state,gpu_recovery_action") == [["In Progress", "None"]] * 8


def test_a_driver_before_the_recovery_action_knows_no_such_field(sim: Sim) -> None:
    sim.configure(("h100-80gb-hbm3", 1))
    sim.gpusim("set-driver", "550.90.07")
    done = sim.smi("--query-gpu=index,gpu_recovery_action", "--format=csv")
    # the real refusal of a field a driver does not know (tests/fixtures/real/h100-80gb-hbm3/bad-field.txt)
    assert (done.stdout, done.returncode) == ('Field "gpu_recovery_action" is not a valid field to query.\n\n', 2)
    assert "GPU Recovery Action" not in sim.ok("-q")


@pytest.mark.parametrize(("kind", "events"), [
    ("reset-required", [("xid", 154), ("reset-required", None)]),
    ("needs-reboot", [("xid", 79), ("fallen-off-bus", None), ("xid", 154)]),
])
def test_verify_reads_the_lines_of_each_fault_as_the_causes_they_are(sim: Sim, kind: str,
                                                                    events: list[tuple[str, int | None]]) -> None:
    """The contract with verify's kernel-log parser (health/kernlog.py): the same events from the simulator's
    dmesg as from the real lines it is held to."""
    sim.configure(("h100-80gb-hbm3", 1))
    sim.gpusim("reboot")
    sim.gpusim("fault", "0", kind)
    found = [e for e in parse(sim.dmesg().stdout) if e.kind != "gpu-uuid"]
    assert [(e.kind, e.xid if e.kind == "xid" else None) for e in found] == events
    assert {e.bus_id for e in found} == {sim.bus(0)[4:14].lower()}
