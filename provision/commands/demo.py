"""`provision demo`: the basement V100 fix, end to end, on any machine: no GPU, no root.

A simulated 4x Tesla V100-SXM2 server (the basement's home-built-power box,
with the settings of its group in inventories/basement.yaml) is converged by
the shipped `gpu` playbook: persistence on, 200 W, application clocks
877,1005, and the boot file, script and unit that bring them back after every
reboot. Then the same apply runs again and changes nothing; the node is
power-cycled (the simulator forgets every setting, as real GPUs do); the
boot unit runs; and a last apply finds nothing to change.

Everything the playbook would write under / goes under the demo's own
temporary root instead (the unit is enabled there with `systemctl --root`),
and the inventory says `become: false`, so nothing needs root.
"""

from __future__ import annotations

import getpass
import grp
import json
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

import yaml

from provision.core.resources import shipped
from provision.capabilities.gpu.boot import CONF

GPUSIM = Path(__file__).parents[2] / "provision_lab" / "gpusim"  # run as a program, never imported
HOST = "basement-v100"
# The v100 group of inventories/basement.yaml (tests check that the two agree).
BASEMENT_V100_GPU = {"persistence": True, "count": 4, "power_limit": 200, "clocks": {"mem": 877, "sm": 1005}}
BOOT_UNIT = "provision-gpu-tuning.service"


def demo_environment(workdir: Path) -> dict[str, str]:
    """Install the simulator into workdir and return the environment that puts it on PATH."""
    config = {"driver_version": "580.159.04", "gpus": [{"model": "v100-sxm2-16gb", "count": 4}]}
    (workdir / "sim-config.json").write_text(json.dumps(config))
    subprocess.run([sys.executable, str(GPUSIM), "install", str(workdir / "bin")], check=True)
    (workdir / "bin" / "nvidia-persistenced").unlink(missing_ok=True)  # show the -pm path
    env = dict(os.environ)
    env.update(
        PATH=f"{workdir / 'bin'}:{env.get('PATH', '/usr/bin:/bin')}",
        NVIDIA_SIM_CONFIG=str(workdir / "sim-config.json"),
        NVIDIA_SIM_STATE=str(workdir / "sim-state.json"),
        NVIDIA_SIM_KMSG=str(workdir / "kern.log"),
        NVIDIA_SIM_UID="0",  # simulated GPUs: their setters need no real root
        PROVISION_CLOCK_RECORDS=str(workdir / "root" / "run" / "provision" / "gpu-clocks"),
        PROVISION_CLOCK_CACHE=str(workdir / "root" / "var" / "cache" / "provision" / "supported-clocks"),
        PROVISION_GPU_LAYOUT=str(workdir / "root" / "var" / "lib" / "provision" / "gpu-layout"),
        XDG_STATE_HOME=str(workdir / "state"),
    )
    return env


def sandboxed_playbook(root: Path) -> dict[str, Any]:
    """The shipped gpu playbook with every path it manages moved under `root`, owned by this user."""
    playbook = yaml.safe_load((shipped("playbooks") / "gpu.yaml").read_text())
    owner = {"owner": getpass.getuser(), "group": grp.getgrgid(os.getgid()).gr_name}
    for entry in playbook["tasks"]:
        if entry["task"] == "gpu-boot-conf":
            entry.update(dest=f"{root}{entry.get('dest', CONF)}", **owner)
        elif entry["task"] == "template":
            entry.update(dest=f"{root}{entry['dest']}", **owner)
        elif entry["task"] == "service":
            entry["root"] = str(root)
    return playbook


def write_demo_files(workdir: Path) -> tuple[Path, Path]:
    inventory = {"all": {"children": {"v100": {
        "hosts": {HOST: {"ansible_connection": "local", "ansible_become": False}},
        "vars": {"provision_gpu": BASEMENT_V100_GPU},
    }}}}
    (workdir / "inventory.yaml").write_text(yaml.safe_dump(inventory, sort_keys=False))
    (workdir / "playbook.yaml").write_text(yaml.safe_dump(sandboxed_playbook(workdir / "root"), sort_keys=False))
    return workdir / "inventory.yaml", workdir / "playbook.yaml"


def boot_command(root: Path) -> list[str]:
    """What systemd runs at boot for the unit provision wrote: its ExecStart, with paths under the demo's root."""
    unit = (root / "etc" / "systemd" / "system" / BOOT_UNIT).read_text()
    exec_start = next(line.split("=", 1)[1] for line in unit.splitlines() if line.startswith("ExecStart="))
    return [f"{root}{word}" if word.startswith("/") else word for word in shlex.split(exec_start)]


def run_demo(echo: Callable[[str], None]) -> int:
    with tempfile.TemporaryDirectory(prefix="provision-demo-") as tmp:
        workdir = Path(tmp)
        root = workdir / "root"
        env = demo_environment(workdir)
        inventory, playbook = write_demo_files(workdir)
        provision = [sys.executable, "-m", "provision"]
        apply = [*provision, "apply", str(inventory), "--playbook", str(playbook)]
        steps: list[tuple[str, Callable[[], list[str]]]] = [
            ("the node as it boots: persistence off, 300 W, default clocks",
             lambda: [*provision, "facts", str(inventory)]),
            ("converge: persistence, 200 W, clocks 877,1005, and the boot file, script and unit",
             lambda: apply),
            ("again: nothing to change", lambda: apply),
            ("power cycle", lambda: [sys.executable, str(GPUSIM), "reboot"]),
            ("the GPUs forgot every setting", lambda: [*provision, "facts", str(inventory)]),
            ("the boot unit is enabled", lambda: ["systemctl", f"--root={root}", "is-enabled", BOOT_UNIT]),
            ("at boot, systemd runs its ExecStart", lambda: boot_command(root)),
            ("after the reboot: nothing to change, the boot unit brought every setting back", lambda: apply),
        ]
        for title, argv in steps:
            command = argv()
            shown = ["provision", *command[3:]] if command[:3] == provision else command
            echo(f"\n$ {shlex.join(shown)}   # {title}")
            code = subprocess.run(command, env=env).returncode
            if code:
                echo(f"demo: that step exited {code}")
                return code
        return 0
