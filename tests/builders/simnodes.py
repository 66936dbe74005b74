"""This machine as a node with simulated GPUs: the GPU simulator installed as nvidia-smi on PATH, the real node
script (capabilities/active/run.py) run by sh, `gpusim load` as the load, as `provision verify --local --active`
runs it. The load and the sampler are found by their arguments (SECONDS, INTERVAL_MS), so that a test can say
that nothing of its run is left."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from provision.capabilities.active import run
from provision.capabilities.active.settings import ActiveSettings
from provision.capabilities.gpu.model import GpuFacts, NvidiaFacts
from provision.capabilities.host import HostFacts
from provision.core.connection import LocalConnection

from paths import GPUSIM

SECONDS = "37.5"  # the load's --seconds: its processes are found by it
INTERVAL_MS = 97  # the sampler's -lms: likewise


@pytest.fixture
def node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """This machine with two simulated V100s on PATH and TMPDIR of its own; yields TMPDIR."""
    config = {"driver_version": "580.159.04", "gpus": [{"model": "v100-sxm2-16gb", "count": 2}]}
    (tmp_path / "sim-config.json").write_text(json.dumps(config))
    for name, value in (("CONFIG", "sim-config.json"), ("STATE", "sim-state.json"), ("KMSG", "kern.log"),
                        ("DMESG", "dmesg")):
        monkeypatch.setenv(f"NVIDIA_SIM_{name}", str(tmp_path / value))
    monkeypatch.delenv("NVIDIA_SIM_UID", raising=False)
    subprocess.run([sys.executable, str(GPUSIM), "install", str(tmp_path / "bin")], check=True)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setenv("TMPDIR", str(temp))
    yield temp
    for pid in ours():  # a failed test leaves nothing running
        os.kill(pid, signal.SIGKILL)


def ours() -> list[int]:
    """The loads and samplers of these tests still running (zombies are gone: nothing holds them)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            words = (entry / "cmdline").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        said = b" ".join(words)
        if state != "Z" and (b"load --seconds " + SECONDS.encode() in said
                             or b"-lms " + str(INTERVAL_MS).encode() in said):
            found.append(int(entry.name))
    return found


def left(temp: Path) -> list[str]:
    """The node script's temporary directories still in `temp`."""
    return sorted(p.name for p in temp.iterdir() if p.name.startswith(run.TEMP_PREFIX))


def gone_within(seconds: float, temp: Path, running: Callable[[], list[int]] = ours) -> bool:
    """Whether every process of these tests (`running` finds them: the loads and samplers by default) and every
    temporary directory of the node script in `temp` is gone within `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not running() and not left(temp):
            return True
        time.sleep(0.1)
    return False


def script(token: str) -> str:
    """The node script of run `token`, loading the simulated GPUs for SECONDS."""
    return run.node_script([sys.executable, str(GPUSIM), "load", "--seconds", SECONDS], INTERVAL_MS, token)


class SimpleSettings:
    """A host's settings with only the active block (sampling every INTERVAL_MS), no launcher nor nccl block."""

    def __init__(self, load_command: list[str]):
        self.active = ActiveSettings(load_command=load_command, interval_ms=INTERVAL_MS)
        self.launcher = self.nccl = None


def node_state(name: str, settings: SimpleSettings) -> SimpleNamespace:
    """What commands/active.py holds of a node: its host, its facts (the two simulated V100s), a connection here."""
    gpus = [GpuFacts(index=i, uuid=f"GPU-{i}", name="Tesla V100-SXM2-16GB", bus_id=f"00000000:{i + 1:02X}:00.0")
            for i in range(2)]
    return SimpleNamespace(host=SimpleNamespace(name=name, settings=settings),
                           facts=HostFacts(nvidia=NvidiaFacts(state="ok", gpus=gpus)), conn=LocalConnection(name))
