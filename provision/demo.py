"""`provision demo`: the main job on an embedded default, on any machine, no GPU and no root.

A simulated 4x Tesla V100-SXM2 server (the basement's home-built-power box)
gets its fix, persistence on and a 200 W limit, and then the same apply runs
again to show that nothing changes.
"""

from __future__ import annotations

import getpass
import grp
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

GPUSIM = Path(__file__).parent / "lab" / "gpusim.py"


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
        XDG_STATE_HOME=str(workdir / "state"),
    )
    return env


def write_demo_files(workdir: Path) -> tuple[Path, Path]:
    inventory = {"all": {"children": {"v100": {
        "hosts": {"basement-v100": {"connection": "local"}},
        "vars": {"gpu": {"persistence": True, "power_limit": 200}},
    }}}}
    playbook = {"tasks": [
        {"task": "gpu-persistence"},
        {"task": "gpu-power-limit"},
        {"task": "template", "name": "gpu-tuning-conf", "src": "gpu-tuning.conf.j2", "when": "gpu",
         "dest": str(workdir / "etc" / "provision" / "gpu-tuning.conf"),
         "owner": getpass.getuser(), "group": grp.getgrgid(os.getgid()).gr_name},
    ]}
    (workdir / "inventory.yaml").write_text(yaml.safe_dump(inventory, sort_keys=False))
    (workdir / "playbook.yaml").write_text(yaml.safe_dump(playbook, sort_keys=False))
    return workdir / "inventory.yaml", workdir / "playbook.yaml"


def run_demo(echo) -> int:
    with tempfile.TemporaryDirectory(prefix="provision-demo-") as tmp:
        workdir = Path(tmp)
        env = demo_environment(workdir)
        inventory, playbook = write_demo_files(workdir)
        apply = [sys.executable, "-m", "provision", "apply", str(inventory), "--playbook", str(playbook)]
        steps = [
            ("What the node is now:", [sys.executable, "-m", "provision", "facts", str(inventory)]),
            ("First apply (converge):", apply),
            ("Second apply (nothing to do):", apply),
        ]
        code = 0
        for title, argv in steps:
            echo(f"\n$ {' '.join(argv[2:])}   # {title}")
            code = subprocess.run(argv, env=env).returncode
            if code:
                return code
        return code
