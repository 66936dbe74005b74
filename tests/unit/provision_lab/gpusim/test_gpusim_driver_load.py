"""The simulated driver installed vs loaded: the library a driver package ships (NVIDIA_SIM_LIBRARY) is what nvidia-smi
is, the kernel module a boot loaded is what answers it. Installing another driver leaves the loaded one until the next
boot: every nvidia-smi run fails with the version mismatch meanwhile (or, with none loaded, cannot reach a driver),
and the loaded driver's /proc/driver/nvidia/version (NVIDIA_SIM_PROC_DRIVER) says which one runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from provision_lab import gpusim
from paths import GPUSIM

MISMATCH = "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: {}\n"
GCC = "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14) \n"  # two spaces, a trailing one: as real files have
NO_DRIVER = gpusim.NO_DRIVER  # "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. ..."


class Machine:
    """A host with simulated GPUs, every file under tmp_path: config, state, kernel log, library, /proc/driver."""

    def __init__(self, root: Path, driver: str | None, *models: tuple[str, int]):
        self.root = root
        self.library = root / "nvml-library-version"
        self.proc = root / "proc-driver" / "nvidia"
        self.env = dict(os.environ, NVIDIA_SIM_CONFIG=str(root / "config.json"),
                        NVIDIA_SIM_STATE=str(root / "state.json"), NVIDIA_SIM_KMSG=str(root / "kern.log"),
                        NVIDIA_SIM_DMESG=str(root / "dmesg"),
                        NVIDIA_SIM_RUNDIR=str(root / "run"), NVIDIA_SIM_LIBRARY=str(self.library),
                        NVIDIA_SIM_PROC_DRIVER=str(self.proc), NVIDIA_SIM_UID="0")
        gpus = [{"model": model, "count": count} for model, count in models]
        (root / "config.json").write_text(json.dumps({"driver_version": None, "gpus": gpus}))  # as a lab node's
        if driver:
            self.install(driver)

    def install(self, driver: str) -> None:
        """What a driver package does to the disk: its library (and nvidia-smi); the kernel module loads at a boot."""
        self.library.write_text(driver + "\n")

    def run(self, *argv: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(GPUSIM), *argv], env=self.env, capture_output=True, text=True,
                              timeout=30)

    def boot(self, command: str = "reboot") -> None:
        done = self.run(command)
        assert done.returncode == 0, done.stderr

    def smi(self, *args: str) -> subprocess.CompletedProcess:
        return self.run("nvidia-smi", *args)

    def driver(self) -> str:
        done = self.smi("--query-gpu=driver_version", "--format=csv,noheader")
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout.splitlines()[0]

    def proc_version(self) -> str | None:
        version = self.proc / "version"
        return version.read_text() if version.exists() else None


@pytest.fixture
def machine(tmp_path):
    return lambda driver, *models: Machine(tmp_path, driver, *models)


def test_a_boot_loads_the_installed_driver_and_writes_its_proc_version(machine):
    host = machine("580.159.04", ("rtx-4090", 2))
    host.boot("init")
    assert host.driver() == "580.159.04" and "CUDA Version: 13.0" in host.smi().stdout
    assert host.proc_version() == ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release "
                                   "Build  (dvs-builder@U22-I3-AF03-29-4)  Wed Feb 18 05:37:09 UTC 2026\n" + GCC)
    assert oct((host.proc / "version").stat().st_mode & 0o777) == "0o444"


def test_a_host_with_a_volta_gpu_loads_the_proprietary_modules(machine):
    host = machine("570.195.03", ("v100-sxm2-16gb", 4))
    host.boot()
    assert host.proc_version() == ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.195.03  Wed Oct 29 23:15:11 "
                                   "UTC 2025\n" + GCC)
    loading = host.run("dmesg", "-t").stdout.splitlines()[0]
    assert "NVRM version: " + loading.removeprefix("NVRM: loading ") == host.proc_version().splitlines()[0]


def test_an_installed_driver_that_is_not_loaded_yet_is_a_version_mismatch_until_the_reboot(machine):
    host = machine("580.159.04", ("h100-80gb-hbm3", 2))
    host.boot()
    before = host.proc_version()
    host.install("570.195.03")
    for args in ([], ["-L"], ["--query-gpu=driver_version", "--format=csv"], ["-q"], ["topo", "-m"], ["-pm", "1"]):
        done = host.smi(*args)
        assert (done.returncode, done.stdout, done.stderr) == (18, MISMATCH.format("570.195"), ""), args
    assert host.proc_version() == before  # still the loaded 580's
    assert host.smi("-h").returncode == 0  # help needs no NVML
    host.boot()
    assert host.driver() == "570.195.03" and "CUDA Version: 12.8" in host.smi().stdout
    assert "  570.195.03  " in host.proc_version()
    assert host.run("nvidia-smi", "--version").stdout.splitlines()[:2] == [
        "NVIDIA-SMI version  : 570.195.03", "NVML version        : 570.195"]


def test_nothing_loads_without_a_driver_on_disk_and_an_install_needs_a_boot(machine):
    host = machine(None, ("rtx-3090", 1))
    host.boot()
    assert not host.proc.exists()  # no driver loaded: no /proc/driver/nvidia
    assert host.run("dmesg").stdout == ""  # and no load line
    done = host.smi("-L")
    assert (done.returncode, done.stdout) == (9, NO_DRIVER)
    host.install("570.195.03")
    done = host.smi("-L")
    assert (done.returncode, done.stdout) == (9, NO_DRIVER)  # installed, not loaded
    assert host.proc_version() is None
    host.boot()
    assert host.driver() == "570.195.03" and "  570.195.03  " in host.proc_version()


def test_a_boot_after_the_driver_is_gone_unloads_it_and_removes_its_proc_directory(machine):
    host = machine("580.159.04", ("rtx-4090", 1))
    host.boot()
    assert host.proc_version() is not None
    host.library.unlink()  # the package purged
    host.boot()
    assert not host.proc.exists()
    assert host.smi().returncode == 9


def test_the_persistence_daemon_needs_a_loaded_driver(machine):
    host = machine("570.195.03", ("rtx-3090", 1))
    done = host.run("nvidia-persistenced")  # installed, never booted here: the state is a first boot's, loaded
    assert done.returncode == 0, done.stderr
    os.kill(int((host.root / "run" / "nvidia-persistenced.pid").read_text()), 15)
    host.library.unlink()
    host.boot()
    host.install("570.195.03")
    done = host.run("nvidia-persistenced")
    assert (done.returncode, done.stderr) == (1, gpusim.PERSISTENCED_FAILED)
    assert "Please ensure that the NVIDIA device files (/dev/nvidia*) exist" in (host.root / "kern.log").read_text()


def test_set_driver_installs_and_loads_at_once_where_a_library_file_is(machine):
    host = machine("580.159.04", ("rtx-3090", 1))
    host.boot()
    assert host.run("set-driver", "570.195.03").returncode == 0
    assert host.library.read_text() == "570.195.03\n" and host.driver() == "570.195.03"
    assert "  570.195.03  " in host.proc_version()


def test_a_bad_library_file_is_the_simulators_error(machine):
    host = machine("latest", ("rtx-3090", 1))
    done = host.smi("-L")
    assert done.returncode == gpusim.RC_SIM and "expected a driver version" in done.stderr


def test_a_simulator_whose_files_were_moved_keeps_its_proc_beside_its_state(monkeypatch, tmp_path):
    for name in gpusim.ENV_DEFAULTS:
        monkeypatch.delenv(name, raising=False)
    assert gpusim.proc_driver_path() == "/proc/driver/nvidia"  # a lab node's: its own /proc/driver (a tmpfs)
    monkeypatch.setenv("NVIDIA_SIM_STATE", str(tmp_path / "state.json"))
    assert gpusim.proc_driver_path() == str(tmp_path / "state.json") + ".proc-driver-nvidia"  # never the real /proc
    monkeypatch.setenv("NVIDIA_SIM_PROC_DRIVER", str(tmp_path / "nvidia"))
    assert gpusim.proc_driver_path() == str(tmp_path / "nvidia")


def test_without_a_library_file_the_configs_driver_is_installed_and_loaded(tmp_path):
    """A simulator set up on its own (`gpusim install`, a config, no driver package) behaves as before."""
    config = {"gpus": [{"model": "rtx-3090", "count": 1}]}
    (tmp_path / "config.json").write_text(json.dumps(config))
    env = dict(os.environ, NVIDIA_SIM_CONFIG=str(tmp_path / "config.json"), NVIDIA_SIM_STATE=str(tmp_path / "state"),
               NVIDIA_SIM_KMSG=str(tmp_path / "kern.log"), NVIDIA_SIM_LIBRARY=str(tmp_path / "none"),
               NVIDIA_SIM_RUNDIR=str(tmp_path / "run"), NVIDIA_SIM_UID="0")
    run = [sys.executable, str(GPUSIM)]
    assert subprocess.run([*run, "reboot"], env=env).returncode == 0
    query = subprocess.run([*run, "nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], env=env,
                           capture_output=True, text=True)
    assert query.stdout == "580.159.04\n"
    assert "  580.159.04  " in (tmp_path / "state.proc-driver-nvidia" / "version").read_text()
