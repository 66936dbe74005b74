"""This machine with simulated GPUs, for engine tests: the real CLI, nvidia-smi being the simulator."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from provision.cli import main

GPUSIM = Path(__file__).resolve().parents[2] / "provision_lab" / "gpusim"


class SimNode:
    """This machine with simulated GPUs: nvidia-smi on PATH, state under tmp_path."""

    def __init__(self, tmp_path: Path, monkeypatch, models: list[tuple[str, int]], daemon: bool):
        self.root = tmp_path
        self.bin = tmp_path / "bin"
        config = {"driver_version": "580.159.04", "gpus": [{"model": m, "count": n} for m, n in models]}
        (tmp_path / "sim-config.json").write_text(json.dumps(config))
        monkeypatch.setenv("NVIDIA_SIM_CONFIG", str(tmp_path / "sim-config.json"))
        monkeypatch.setenv("NVIDIA_SIM_STATE", str(tmp_path / "sim-state.json"))
        monkeypatch.setenv("NVIDIA_SIM_KMSG", str(tmp_path / "kern.log"))
        monkeypatch.setenv("NVIDIA_SIM_DMESG", str(tmp_path / "dmesg"))  # dmesg on PATH is the simulator's too
        monkeypatch.delenv("NVIDIA_SIM_UID", raising=False)
        subprocess.run([sys.executable, str(GPUSIM), "install", str(self.bin)], check=True)
        if not daemon:
            (self.bin / "nvidia-persistenced").unlink()
        monkeypatch.setenv("PATH", f"{self.bin}:{os.environ['PATH']}")
        monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
        monkeypatch.setenv("PROVISION_CLOCK_RECORDS", str(tmp_path / "run" / "gpu-clocks"))
        monkeypatch.setenv("PROVISION_CLOCK_CACHE", str(tmp_path / "cache" / "supported-clocks"))
        monkeypatch.setenv("PROVISION_GPU_LAYOUT", str(tmp_path / "var" / "gpu-layout"))
        self.conf = tmp_path / "etc" / "provision" / "gpu-tuning.conf"
        self.runner = CliRunner()

    def smi(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["nvidia-smi", *args], capture_output=True, text=True)

    def gpusim(self, *args: str) -> None:
        """The simulator's own commands: fault, reboot, ..."""
        subprocess.run([sys.executable, str(GPUSIM), *args], check=True, capture_output=True)

    def query(self, field: str) -> list[str]:
        out = self.smi(f"--query-gpu={field}", "--format=csv,noheader,nounits").stdout
        return [line.strip() for line in out.splitlines()]

    def inventory(self, gpu: dict, extra_hosts: dict | None = None, name: str = "inventory.yaml") -> str:
        """One group `nodes` with the local host node1 (plus extra_hosts), its `provision_gpu` as given."""
        hosts = {"node1": {"ansible_connection": "local"}} | (extra_hosts or {})
        data = {"all": {"children": {"nodes": {"hosts": hosts, "vars": {"provision_gpu": gpu}}}}}
        path = self.root / name
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        return str(path)

    def playbook(self) -> str:
        """The shipped GPU playbook without the boot unit, the settings file written under tmp_path, not /etc."""
        path = self.root / "playbook.yaml"
        path.write_text(textwrap.dedent(f"""\
            tasks:
              - task: gpu-layout
              - task: gpu-persistence
              - task: gpu-power-limit
              - task: gpu-clocks
              - task: gpu-locked-clocks
              - task: gpu-boot-conf
                dest: {self.conf}
            """))
        return str(path)

    def provision(self, *args: str):
        # As on a terminal wide enough for a finding a line (apply and verify wrap at the terminal's width;
        # tests/unit/output/test_report.py and test_verify_report.py cover the wrapping).
        return self.runner.invoke(main, list(args), catch_exceptions=False, env={"COLUMNS": "1000"})

    def apply(self, inventory: str, *args: str):
        return self.provision("apply", inventory, "--playbook", self.playbook(), *args)


def needs_root():
    return pytest.mark.skipif(os.geteuid() != 0, reason="setters need root (the simulator checks like the real one)")
