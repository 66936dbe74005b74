"""The GPU simulator (provision_lab/gpusim) run as a subprocess, as nvidia-smi is, with its config, state, pid file
and kernel log under one folder. NVIDIA_SIM_UID=0 lets the setters run as "root" whoever runs the tests; a call
that wants a normal user says so (uid=1000)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from paths import GPUSIM

# Imported rather than run as a script: Python caches an imported module's bytecode (see the pycache fixture)
# but compiles a script on every start, which would double these tests' time.
FAST_GPUSIM = [sys.executable, "-S", "-c", "import sys; sys.path.insert(0, sys.argv.pop(1)); import gpusim; "
               "sys.exit(gpusim.main(sys.argv))", str(GPUSIM.parent)]

# 'Nov 22 13:27:16 host kernel: [   65.315783] NVRM: ...' (kern.log) and '[   65.315783] NVRM: ...' (dmesg)
KERN_LOG_LINE = re.compile(r"[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \S+ kernel: \[[ \d]{4}\d\.\d{6}\] (.*)")
RAW_DMESG_LINE = re.compile(r"\[[ \d]{4}\d\.\d{6}\] (.*)")


def lines(text: str) -> list[str]:
    return text.splitlines()


def stamped(pattern: re.Pattern[str], line: str) -> str:
    """The message of a kernel log line, without its stamps; the line must be stamped as `pattern` says."""
    found = pattern.fullmatch(line)
    assert found, f"not a stamped kernel line: {line!r}"
    return found.group(1)


class Sim:
    """A node with simulated GPUs; every path under `root`."""

    def __init__(self, root: Path, pycache: Path):
        self.root = root
        self.kmsg = root / "kern.log"
        self.ring = root / "dmesg"  # the kernel's ring buffer
        self.pidfile = root / "run" / "nvidia-persistenced.pid"
        self.env = dict(os.environ, NVIDIA_SIM_CONFIG=str(root / "config.json"),
                        NVIDIA_SIM_STATE=str(root / "state.json"), NVIDIA_SIM_RUNDIR=str(root / "run"),
                        NVIDIA_SIM_KMSG=str(self.kmsg), NVIDIA_SIM_DMESG=str(self.ring), NVIDIA_SIM_UID="0",
                        PYTHONPYCACHEPREFIX=str(pycache))
        self.env.pop("PYTHONDONTWRITEBYTECODE", None)

    def configure(self, *models: tuple[str, int], **extra: Any) -> Sim:
        """The node's GPUs, `count` of each `model` (a key of gpusim's model table), driver 580.159.04."""
        gpus = [{"model": model, "count": count} for model, count in models]
        (self.root / "config.json").write_text(json.dumps({"driver_version": "580.159.04", "gpus": gpus, **extra}))
        return self

    def run(self, *argv: str, uid: int = 0) -> subprocess.CompletedProcess[str]:
        env = dict(self.env, NVIDIA_SIM_UID=str(uid))
        return subprocess.run([*FAST_GPUSIM, *argv], env=env, capture_output=True, text=True, timeout=30)

    def smi(self, *args: str, uid: int = 0) -> subprocess.CompletedProcess[str]:
        return self.run("nvidia-smi", *args, uid=uid)

    def ok(self, *args: str) -> str:
        """What nvidia-smi printed, asserting it exited 0."""
        done = self.smi(*args)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    def nvlink(self, *args: str) -> str:
        return self.ok("nvlink", *args)

    def query(self, fields: str, gpu: str | None = None) -> list[list[str]]:
        """One row of values per GPU, without units."""
        select = ["-i", gpu] if gpu is not None else []
        out = self.ok(f"--query-gpu={fields}", "--format=csv,noheader,nounits", *select)
        return [line.split(", ") for line in out.splitlines()]

    def column(self, name: str) -> list[str]:
        return [row[0] for row in self.query(name)]

    def uuids(self) -> list[str]:
        return self.column("uuid")

    def bus(self, index: int) -> str:
        return self.query("pci.bus_id")[index][0]

    def state(self) -> dict[str, Any]:
        return json.loads((self.root / "state.json").read_text())

    def gpusim(self, *argv: str) -> None:
        """A gpusim command (reboot, fault, psu, ...), asserting it succeeded."""
        done = self.run(*argv)
        assert done.returncode == 0, done.stderr

    def log(self) -> list[str]:
        """The kernel log's messages (kern.log, every boot), without syslog's and the kernel's stamps."""
        if not self.kmsg.exists():
            return []
        return [stamped(KERN_LOG_LINE, line) for line in lines(self.kmsg.read_text())]

    def dmesg(self, *args: str, uid: int = 0) -> subprocess.CompletedProcess[str]:
        return self.run("dmesg", *args, uid=uid)

    def ring_messages(self) -> list[str]:
        """What `dmesg` prints, without its stamps."""
        done = self.dmesg()
        assert done.returncode == 0, done.stderr
        return [stamped(RAW_DMESG_LINE, line) for line in lines(done.stdout)]

    def q(self, gpu: str, display: str) -> str:
        return self.ok("-q", "-i", gpu, "-d", display)

    def daemon_pid(self) -> int | None:
        try:
            return int(self.pidfile.read_text())
        except (OSError, ValueError):
            return None

    def stop_daemon(self) -> None:
        """SIGTERM, then wait until the daemon has removed its pid file, as it does on its way out."""
        pid = self.daemon_pid()
        if pid:
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + 5
            while self.pidfile.exists() and time.monotonic() < deadline:
                time.sleep(0.01)
            assert not self.pidfile.exists()


@pytest.fixture(scope="session")
def pycache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Bytecode of the simulator, compiled once for the session, outside the source tree."""
    return tmp_path_factory.mktemp("pycache")


@pytest.fixture
def sim(tmp_path: Path, pycache: Path) -> Iterator[Sim]:
    """A node with simulated GPUs under tmp_path (configure() says which); its daemon stopped after the test."""
    node = Sim(tmp_path, pycache)
    yield node
    node.stop_daemon()
