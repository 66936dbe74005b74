"""What the GPU stack's lab tests (issue 45: tests/lab/test_fabric_manager.py, test_containers.py,
test_reboot_safety.py, test_stack_upgrade.py) share: a command on a node, verify's verdicts, the findings of some
checks, the fabric state of a node's GPUs, the lab's inventory pinned at another driver, the command a refused
reboot names, run as it says, a command a page shows, run as written (test_pyxis.py), and a wait for a condition
(test_slurm.py, test_slurm_reboot.py)."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import yaml


def on(lab, node: str, command: str) -> str:
    """The command's output on the node (over the lab's SSH); it must succeed."""
    proc = lab.ssh(node, command)
    assert proc.returncode == 0, f"{node}: {command}: {proc.stdout}{proc.stderr}"
    return proc.stdout


def verdicts(lab, inventory: Path | None = None) -> tuple[int, dict[str, dict[str, Any]]]:
    """`provision verify --json` on the lab (its own inventory, or this one): (exit code, host -> its verdict)."""
    proc = lab.provision("verify", str(inventory or lab.inventory), "--ssh-config", str(lab.ssh_config), "--json")
    assert proc.stdout.strip(), proc.stderr
    return proc.returncode, {v["host"]: v for v in json.loads(proc.stdout)["hosts"]}


def findings(verdict: dict[str, Any], *checks: str) -> list[dict[str, Any]]:
    """The host's findings whose check starts with one of these names."""
    return [f for f in verdict["findings"] if f["check"].startswith(checks)]


def fabric_states(lab, node: str) -> set[str]:
    """The fabric states of the node's GPUs as nvidia-smi prints them ("In Progress", "Completed"; "[N/A]": none)."""
    return set(on(lab, node, "nvidia-smi --query-gpu=fabric.state --format=csv,noheader").split("\n")) - {""}


def driver_moved(lab, version: str, path: Path) -> Path:
    """The lab's inventory with its gpu group's provision_driver pinned at another version, written to path."""
    tree = yaml.safe_load(lab.inventory.read_text())
    tree["all"]["children"]["gpu"]["vars"]["provision_driver"]["version"] = version
    path.write_text(yaml.safe_dump(tree))
    return path


def run_fixing_command(lab, node: str, message: str) -> str:
    """The `apt-get install ...` a refused reboot's message names, run on the node as it says (non-interactive, -y:
    no one at the prompt); the command, as the message named it."""
    named = re.search(r"`(apt-get install \S+)`", message)
    assert named, message
    on(lab, node, f"DEBIAN_FRONTEND=noninteractive {named[1].replace('install', 'install -y', 1)}")
    return named[1]


def as_written(command: str, lab, shown_dir: str, page: Path, *more: str) -> subprocess.CompletedProcess[str]:
    """A command the page shows (indented, as its command blocks are), from the checkout, in this lab's directory
    in place of shown_dir: provision as this checkout's (with more options after it), any other command by the
    shell."""
    assert f"    {command}" in page.read_text(), f"{page} no longer shows {command}"
    command = command.replace(shown_dir, str(lab.dir))
    argv = [sys.executable, "-m", "provision", *shlex.split(command)[1:], *more] if command.startswith(
        "provision ") else ["bash", "-c", command]
    return subprocess.run(argv, cwd=Path(__file__).resolve().parents[2], capture_output=True, text=True, timeout=900,
                          stdin=subprocess.DEVNULL)


def wait_for(what: str, check: Callable[[], Any], timeout: float = 60.0) -> Any:
    """check()'s first true value, asked every second; fails naming `what` when none comes within timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            assert value, f"{what} within {timeout:g}s"
            return value
        time.sleep(1)
