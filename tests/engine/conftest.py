"""Fixtures for engine tests: this machine (local connection) with simulated GPUs."""

import os
import signal
from pathlib import Path

import pytest
from simnode import SimNode


@pytest.fixture
def v100_node(tmp_path, monkeypatch):
    """The basement's 4x V100 SXM2 server, without nvidia-persistenced (the -pm path)."""
    return SimNode(tmp_path, monkeypatch, [("v100-sxm2-16gb", 4)], daemon=False)


@pytest.fixture
def v100_node_with_daemon(tmp_path, monkeypatch):
    node = SimNode(tmp_path, monkeypatch, [("v100-sxm2-16gb", 4)], daemon=True)
    yield node
    pidfile = Path("/var/run/nvidia-persistenced/nvidia-persistenced.pid")
    if pidfile.exists():
        try:
            os.kill(int(pidfile.read_text().strip()), signal.SIGTERM)
        except (ValueError, ProcessLookupError):
            pidfile.unlink(missing_ok=True)
