"""Runs on the basement lab (tests/lab/conftest.py `basement`) that the interruption and silent-host lab tests
share: its hosts in inventory order, a variant of its inventory that moves the power limits (so every host has
changes to make), an apply started in the background, and a power-limit setter made slow on a node."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest
import yaml

V100, RISERS = "lab-v100-1", "lab-rtx4090-1"
BLADES = [f"lab-rtx3090-{i}" for i in range(1, 5)]
ORDER = [V100, *BLADES, RISERS]  # the inventory's order: --forks 1 works through the hosts in it
LOCK = "/run/lock/provision.lock"
MOVED = {V100: 190.0, RISERS: 390.0, **{blade: 300.0 for blade in BLADES}}  # the variant's power limits


def variant(lab, tmp_path: Path, v100, risers, blades) -> Path:
    """The lab's inventory with other power limits (the RISERS' GPU3 override stays 300 W)."""
    tree = yaml.safe_load(lab.inventory.read_text())
    groups = tree["all"]["children"]["gpu_nodes"]["children"]
    groups["v100"]["vars"]["provision_gpu"]["power_limit"] = v100
    groups["rtx4090"]["vars"]["provision_gpu"]["power_limit"] = risers
    groups["rtx3090"]["vars"]["provision_gpu"]["power_limit"] = blades
    path = tmp_path / f"power-{v100}-{risers}-{blades}.yaml"
    path.write_text(yaml.safe_dump(tree, sort_keys=False))
    return path


@pytest.fixture
def moved(basement, tmp_path):
    """The variant inventory, from the lab converged to its own (a no-op after the earlier files); afterwards the
    lab is put back as its own inventory wants it (the blades' limit back to their default first: the lab's
    inventory sets none)."""
    code, result = basement.apply()
    assert code == 0, result
    yield variant(basement, tmp_path, 190, 390, 300)
    for node in ORDER:
        basement.lab("fault", node, "clear")
    code, result = basement.apply(inventory=variant(basement, tmp_path, 200, 400, "default"))
    assert code == 0, result
    code, result = basement.apply()
    assert code == 0, result


def start_apply(lab, inventory: Path, log: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "provision", "apply", str(inventory), "--ssh-config",
                             str(lab.ssh_config), "--json", "--log", str(log), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def hosts(result: dict) -> dict[str, dict]:
    return {h["host"]: h for h in result["hosts"]}


def limits(lab) -> dict[str, list[float]]:
    return {node: [g["power_limit"] for g in facts["nvidia"]["gpus"]] for node, facts in lab.facts().items()}


def locked(lab, node: str) -> bool:
    """The node's /run is its own tmpfs: asked over SSH."""
    return lab.ssh(node, f"test -e {LOCK}").returncode == 0


@contextlib.contextmanager
def slow_setter(lab, node: str) -> Iterator[Path]:
    """The node's power-limit setter says it started (a line per call in the file yielded, seen from here) and
    takes 5 s: an nvidia-smi earlier on the node's PATH than the driver's, gone afterwards."""
    started = lab.node_file(node, "/var/tmp/setter-started")
    try:
        with nvidia_smi_shim(lab, node, 'case " $* " in *" -pl "*) echo "$*" >> /var/tmp/setter-started; sleep 5;; '
                                        'esac\nexec /usr/bin/nvidia-smi "$@"'):
            yield started
    finally:
        started.unlink(missing_ok=True)


@contextlib.contextmanager
def nvidia_smi_shim(lab, node: str, script: str) -> Iterator[None]:
    """An nvidia-smi (this sh script) earlier on the node's PATH than the driver's, gone afterwards."""
    shim = lab.node_file(node, "/usr/local/sbin/nvidia-smi")
    shim.parent.mkdir(parents=True, exist_ok=True)
    shim.write_text(f"#!/bin/sh\n{script}\n")
    shim.chmod(0o755)
    try:
        assert lab.ssh(node, "command -v nvidia-smi").stdout.strip() == "/usr/local/sbin/nvidia-smi"
        yield
    finally:
        shim.unlink(missing_ok=True)
