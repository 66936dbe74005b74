"""`provision apply|verify --via slurm` against the same commands over SSH, on Slurm labs of 2 and 8 compute nodes.

Each size is a lab of its own, like tests/lab/slurm.yaml: a controller and N GPU nodes (2x V100, the ens803f
ports, provision on each node), made a Slurm cluster by one apply over SSH. Then, each the median of --repeat
fresh processes, the wall time and the control process's CPU (user + system, itself and what it waited for):

  - no-op apply over SSH, and --via slurm (every node idle: all through one srun; the controller over SSH)
  - the same with --limit gpu: the compute nodes alone. With the controller in the run, its slurm-config task
    reads every node's facts over SSH (slurm.conf describes them all), so the control machine still reaches
    each node; without it, --via slurm reaches the controller alone
  - a drift repaired: /etc/nccl.conf removed on every node, then apply (over SSH; --via slurm)
  - verify over SSH, and --via slurm

Through srun each node runs provision itself (a Python process, its imports, its facts batch, its plan): on a
real cluster on its own CPUs; here every lab node shares this machine's CPUs with the control process, so the
node-side work adds up in wall time, which the control CPU column leaves out. Rows go to stderr as JSON as they
are measured; the table at the end.

    sudo .venv/bin/python benchmarks/via_slurm_scale.py [--sizes 2,8] [--repeat 3]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from provision_lab.cluster import Lab
from provision_lab.spec import like_spec

REPO = Path(__file__).resolve().parents[1]
SLURM_LAB = REPO / "tests" / "lab" / "slurm.yaml"


def like(size: int, path: Path) -> Path:
    """tests/lab/slurm.yaml with N GPU nodes."""
    tree = yaml.safe_load(SLURM_LAB.read_text())
    tree["all"]["children"]["gpu"]["hosts"] = {f"gpu-{n}": None for n in range(1, size + 1)}
    path.write_text(yaml.safe_dump(tree, sort_keys=False))
    return path


def timed(lab: Lab, *args: str) -> tuple[float, float, subprocess.CompletedProcess]:
    """(wall s, control CPU s, the process): provision as a fresh process, as a user runs it."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "provision", *args, "--ssh-config", str(lab.ssh_config_path)],
                          capture_output=True, text=True, stdin=subprocess.DEVNULL, cwd=REPO)
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), proc


def on(lab: Lab, node: str, command: str) -> str:
    proc = subprocess.run(["ssh", "-F", str(lab.ssh_config_path), "-o", "BatchMode=yes", node, command],
                          capture_output=True, text=True)
    return proc.stdout


def idle(lab: Lab, size: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        states = on(lab, "lab-head", "sinfo -h -N -o %t").split()
        if len(states) == size and set(states) == {"idle"}:
            return
        time.sleep(1)
    raise SystemExit(f"the nodes did not all go idle: {on(lab, 'lab-head', 'sinfo -N')}")


def median_of(repeat: int, run, before=None) -> tuple[float, float]:
    """Median wall and CPU of `repeat` runs (each after before(), if given); a run that fails stops it all."""
    walls, cpus = [], []
    for _ in range(repeat):
        if before:
            before()
        wall, cpu, proc = run()
        if proc.returncode not in (0, 1):  # verify may fail a check; anything else is the benchmark's failure
            raise SystemExit(f"{proc.args}: exit {proc.returncode}: {proc.stdout[-1500:]}{proc.stderr[-1500:]}")
        walls.append(wall)
        cpus.append(cpu)
    return statistics.median(walls), statistics.median(cpus)


def measure(size: int, lab_dir: Path, repeat: int) -> dict:
    lab = Lab(lab_dir)
    lab.down(log=lambda message: None)
    nodes = [f"lab-gpu-{n}" for n in range(1, size + 1)]
    with tempfile.TemporaryDirectory(prefix="provision-via-slurm-bench-") as tmp:
        lab.up(like_spec(like(size, Path(tmp) / "slurm.yaml")), log=lambda message: None)
        row: dict = {"nodes": size}
        try:
            inventory = str(lab.dir / "inventory.yaml")
            apply, verify = ["apply", inventory, "-f", str(size + 1)], ["verify", inventory, "-f", str(size + 1)]
            wall, _, proc = timed(lab, *apply)
            if proc.returncode != 0:
                raise SystemExit(f"apply exited {proc.returncode}: {proc.stdout[-2000:]}{proc.stderr[-2000:]}")
            row["first_apply"] = wall
            idle(lab, size)

            def drift() -> None:
                for node in nodes:
                    on(lab, node, "rm -f /etc/nccl.conf")
                idle(lab, size)

            for via, extra in (("ssh", []), ("slurm", ["--via", "slurm"])):
                row[f"noop_{via}"], row[f"noop_{via}_cpu"] = median_of(repeat, lambda: timed(lab, *apply, *extra),
                                                                       lambda: idle(lab, size))
                row[f"nodes_{via}"], row[f"nodes_{via}_cpu"] = median_of(
                    repeat, lambda: timed(lab, *apply, *extra, "--limit", "gpu"), lambda: idle(lab, size))
                row[f"drift_{via}"], row[f"drift_{via}_cpu"] = median_of(repeat, lambda: timed(lab, *apply, *extra),
                                                                         drift)
                row[f"verify_{via}"], row[f"verify_{via}_cpu"] = median_of(
                    repeat, lambda: timed(lab, *verify, *extra), lambda: idle(lab, size))
        finally:
            lab.down(log=lambda message: None)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="2,8", help="compute nodes per lab, comma-separated")
    parser.add_argument("--repeat", type=int, default=3, help="runs per measurement (the median is shown)")
    parser.add_argument("--dir", default="/var/lib/provision-lab/bench-via-slurm", help="the benchmark lab's directory")
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("the lab needs root: sudo .venv/bin/python benchmarks/via_slurm_scale.py")
    rows = []
    for size in (int(s) for s in args.sizes.split(",")):
        rows.append(measure(size, Path(args.dir), args.repeat))
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    print("compute nodes | run | over SSH: wall / control CPU | --via slurm: wall / control CPU\n--- | --- | --- | ---")
    for row in rows:
        for key, what in (("noop", "no-op apply"), ("nodes", "no-op apply --limit gpu (the compute nodes)"),
                          ("drift", "apply, nccl.conf restored on every node"), ("verify", "verify")):
            print(f"{row['nodes']} | {what} | {row[f'{key}_ssh']:.2f} s / {row[f'{key}_ssh_cpu']:.2f} s | "
                  f"{row[f'{key}_slurm']:.2f} s / {row[f'{key}_slurm_cpu']:.2f} s")


if __name__ == "__main__":
    main()
