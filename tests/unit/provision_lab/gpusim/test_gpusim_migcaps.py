"""The simulator's MIG capabilities (gpusim/migcaps.py): /proc/driver/nvidia-caps/mig-minors as the real H200's
(tests/fixtures/real/h200-recovery/mig-minors.txt, byte for byte) while a driver is loaded, /dev/nvidia-caps's
config and monitor devices as dev-caps.txt lists them, and a device per new GPU and compute instance at the minor
the table gives it: the files Slurm's gres.conf names for one MIG device."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from realdata import REAL

from builders.simulator import Sim, pycache, sim
from provision.capabilities.gpu import mig_minors

__all__ = ["pycache", "sim"]  # the fixtures, used by name
CAPTURES = REAL / "h200-recovery"


def minors_file(sim: Sim) -> Path:
    return sim.root / "state.json.proc-driver-nvidia-caps" / "mig-minors"


def caps(sim: Sim) -> dict[str, tuple[int, int, int]]:
    """/dev/nvidia-caps (beside the state in a test): name -> (mode bits, major, minor)."""
    directory = sim.root / "state.json.dev-nvidia-caps"
    found = {}
    for name in sorted(os.listdir(directory)) if directory.is_dir() else []:
        st = os.stat(directory / name)
        assert stat.S_ISCHR(st.st_mode), name
        found[name] = (stat.S_IMODE(st.st_mode), os.major(st.st_rdev), os.minor(st.st_rdev))
    return found


def test_a_loaded_driver_has_the_real_minors_table(sim: Sim) -> None:
    sim.configure(("h100-80gb-hbm3", 1)).gpusim("reboot")
    real = (CAPTURES / "mig-minors.txt").read_text()
    assert minors_file(sim).read_text() == real[real.index("config 1\n"):]
    assert stat.S_IMODE(minors_file(sim).stat().st_mode) == 0o444


def test_no_driver_no_table(sim: Sim) -> None:
    sim.configure(("h100-80gb-hbm3", 1)).gpusim("reboot")
    config = sim.root / "config.json"
    config.write_text(config.read_text().replace('"580.159.04"', "null"))
    sim.gpusim("reboot")
    assert not minors_file(sim).exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod of the caps devices needs root")
def test_config_and_monitor_devices_are_there_as_on_the_real_h200(sim: Sim) -> None:
    sim.configure(("h100-80gb-hbm3", 1)).gpusim("reboot")
    listed = (CAPTURES / "dev-caps.txt").read_text()
    assert "cr-------- 1 root root 241, 1" in listed and "cr--r--r-- 1 root root 241, 2" in listed
    assert caps(sim) == {"nvidia-cap1": (0o400, 241, 1), "nvidia-cap2": (0o444, 241, 2)}


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod of the caps devices needs root")
def test_each_new_instance_gets_the_devices_of_its_minors_and_keeps_them(sim: Sim) -> None:
    sim.configure(("h100-80gb-hbm3", 1)).gpusim("reboot")
    sim.ok("-pm", "1")
    sim.ok("-mig", "1")
    sim.ok("mig", "-cgi", "3g.40gb:4,4g.40gb:0", "-C")
    table = mig_minors.parse_minors(minors_file(sim).read_text())
    rows = [line.split() for line in sim.ok("mig", "-lgi").splitlines() if " MIG " in line]
    gi_ids = sorted(int(row[5]) for row in rows)  # | GPU Name Profile-ID Instance-ID Placement |
    wanted = {f"nvidia-cap{n}" for gi in gi_ids for n in (table[mig_minors.gpu_instance_cap(0, gi)],
                                                          table[mig_minors.compute_instance_cap(0, gi, 0)])}
    assert set(caps(sim)) == {"nvidia-cap1", "nvidia-cap2", *wanted}
    assert all(caps(sim)[name][0] == 0o444 for name in wanted)
    sim.ok("mig", "-dci")
    sim.ok("mig", "-dgi")
    assert set(caps(sim)) == {"nvidia-cap1", "nvidia-cap2", *wanted}  # nvidia-modprobe removes no device file
