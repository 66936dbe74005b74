"""The simulator's HGX H100 board (config "board": "hgx-h100-8"): its GPUs "In Progress" in the NVSwitch fabric at
every boot until nv-fabricmanager of the loaded driver's version registers them; at another version it logs the
real mismatch line and exits 1. The simulator runs as a subprocess, its files under tmp_path (builders/simulator.py)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from builders.simulator import FAST_GPUSIM, Sim, pycache, sim
from provision_lab import stack_fabric
from provision_lab.gpusim import ENV_DEFAULTS

__all__ = ["pycache", "sim"]  # the fixtures, used by name

DRIVER = "580.159.04"
HGX = {"board": "hgx-h100-8"}
REFERENCE = Path(__file__).resolve().parents[4].parent / "shared" / "reference" / "node-lifecycle-reference.md"


def hgx(node: Sim, fm: str = DRIVER) -> Sim:
    node.configure(("h100-80gb-hbm3", 8), **HGX)
    (node.root / "fm-version").write_text(fm + "\n")
    node.env["NVIDIA_SIM_FABRIC_MANAGER"] = str(node.root / "fm-version")
    node.gpusim("reboot")
    return node


def fabric(node: Sim) -> set[tuple[str, ...]]:
    return {tuple(row) for row in node.query("fabric.state,fabric.status")}


def started(node: Sim) -> subprocess.Popen[str]:
    """nv-fabricmanager running (a daemon): back once it said it configured the switches."""
    daemon = subprocess.Popen([*FAST_GPUSIM, "nv-fabricmanager", "-c", "/usr/share/nvidia/nvswitch/fabricmanager.cfg"],
                              env=node.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert daemon.stdout is not None and daemon.stdout.readline() == "Connected to 1 node.\n"
    return daemon


def test_an_hgx_boards_gpus_wait_in_the_fabric_until_fabric_manager_of_the_driver_registers_them(sim):
    hgx(sim)
    assert fabric(sim) == {("In Progress", "[N/A]")}
    daemon = started(sim)
    try:
        assert daemon.poll() is None  # it stays
        assert fabric(sim) == {("Completed", "Success")}
    finally:
        daemon.kill()
        daemon.wait()
    assert fabric(sim) == {("Completed", "Success")}  # registered: it stays so until the next boot
    sim.gpusim("reboot")
    assert fabric(sim) == {("In Progress", "[N/A]")}


def test_fabric_manager_at_another_version_logs_the_real_line_and_exits_1(sim):
    hgx(sim, fm="580.126.09")
    done = sim.run("nv-fabricmanager")
    assert done.returncode == 1
    assert done.stderr == ("fabric manager NVIDIA GPU driver interface version 580.126.09 don't match with driver "
                           f"version {DRIVER}. Please update with matching NVIDIA driver package.\n")
    assert fabric(sim) == {("In Progress", "[N/A]")}


def test_the_mismatch_line_is_the_references_template():
    if not REFERENCE.exists():
        pytest.skip(f"{REFERENCE} is not here")
    template = ("fabric manager NVIDIA GPU driver interface version <FM> don't match with driver version <KMD>.")
    assert template in REFERENCE.read_text()
    from provision_lab.gpusim.fabric import MISMATCH
    assert MISMATCH.format(fm="<FM>", driver="<KMD>").startswith(template)


def test_q_prints_the_fabric_block_as_the_hgx_capture(sim):
    hgx(sim)
    before = sim.ok("-q", "-i", "0").split("    Fabric\n")[1].splitlines()[:2]
    assert [line.split(":", 1)[1].strip() for line in before] == ["In Progress", "N/A"]
    daemon = started(sim)
    daemon.kill()
    daemon.wait()
    block = sim.ok("-q", "-i", "0").split("    Fabric\n")[1].splitlines()[:4]
    assert [line.split(":", 1)[0].strip() for line in block] == ["State", "Status", "CliqueId", "ClusterUUID"]
    assert [line.split(":", 1)[1].strip() for line in block] == ["Completed", "Success", "0",
                                                                 "00000000-0000-0000-0000-000000000000"]


def test_the_driver_lists_the_nvswitches_while_loaded_and_a_board_holds_its_own_gpus(sim):
    hgx(sim)
    devices = sim.root / "state.json.proc-driver-nvidia-nvswitch" / "devices"
    assert len(list(devices.iterdir())) == 4
    sim.configure(("h100-80gb-hbm3", 4), **HGX)
    refused = sim.smi("-L")
    assert refused.returncode != 0 and "board hgx-h100-8 holds" in refused.stderr


def test_a_board_without_nvswitch_reads_no_fabric(sim):
    sim.configure(("h100-80gb-hbm3", 1))
    assert fabric(sim) == {("[N/A]", "[N/A]")}


def test_the_fabric_manager_package_ships_its_version_where_the_simulator_reads_it():
    assert stack_fabric.FABRIC_MANAGER_VERSION_FILE == ENV_DEFAULTS["NVIDIA_SIM_FABRIC_MANAGER"]
