"""How long `provision verify --active` takes on the lab at 4 and 32 nodes, beside a plain verify.

Each size is a lab of its own: N blades of one RTX 3090 with two fabric ports each (ens803f0, ens803f1, their
links shaped to 1/100 of their speed: lab/netns.py), the lab's torch layer, the simulator's load
(provision_active.load_command: `gpusim load`), a torchrun launcher, every node in one training group. After an apply,
one `verify` and one `verify --active --duration S` (default 5), each a fresh process, the whole group loaded
at once: the load on every node, iperf3 on both ports along the ring (at most 10 s a test), the all-reduce
within each node (one process here: none), across the group, and pairwise only when the group falls short
(it does not here). Each row is printed to stderr as JSON as soon as it is measured; the table at the end.

    sudo .venv/bin/python benchmarks/active_scale.py [--sizes 4,32] [--duration 5]

The lab's nodes share this machine's CPUs with provision: at 32 nodes the torch imports of 32 all-reduce
processes dominate on 2 cores, which real nodes each do on their own.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from provision_lab.cluster import Lab
from provision_lab.spec import like_spec

LIKE = {"all": {"children": {"rtx3090": {"vars": {
    "provision_gpu": {"persistence": True, "power_limit": 300},
    "provision_nccl": {"socket_ifname": "ens803f", "socket_nthreads": 1, "expected_link_speed_mbps": 10000},
    "provision_active": {"load_command": ["/usr/lib/provision-lab/gpusim", "load"], "expected_port_mbps": 80},
    "provision_launcher": {"nproc_per_node": "gpu"},
    "provision_custom": {"lab": {"torch": True, "gpus": [{"model": "rtx-3090", "count": 1}], "nics": ["ens803f0", "ens803f1"]}},
}}}}}


def provision(lab: Lab, *args: str) -> tuple[float, subprocess.CompletedProcess]:
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "provision", *args, "--ssh-config", str(lab.ssh_config_path)],
                          capture_output=True, text=True, stdin=subprocess.DEVNULL)
    return time.monotonic() - started, proc


def measure(size: int, lab_dir: Path, duration: float) -> dict:
    lab = Lab(lab_dir)
    lab.down(log=lambda message: None)
    with tempfile.TemporaryDirectory(prefix="provision-active-bench-") as tmp:
        like = Path(tmp) / "blades.yaml"
        tree = json.loads(json.dumps(LIKE))
        tree["all"]["children"]["rtx3090"]["hosts"] = {f"blade-{n}": {} for n in range(1, size + 1)}
        like.write_text(yaml.safe_dump(tree))
        started = time.monotonic()
        lab.up(like_spec(like), log=lambda message: None)
        row: dict = {"nodes": size, "lab_up": time.monotonic() - started}
        try:
            inventory = str(lab.dir / "inventory.yaml")
            row["apply"], proc = provision(lab, "apply", inventory, "-f", str(size))
            if proc.returncode != 0:
                raise SystemExit(f"apply exited {proc.returncode}: {proc.stdout[-2000:]}{proc.stderr[-2000:]}")
            row["verify"], proc = provision(lab, "verify", inventory, "-f", str(size))
            row["verify_rc"] = proc.returncode
            row["active"], proc = provision(lab, "verify", inventory, "-f", str(size), "--active", "--duration",
                                            f"{duration:g}", "--json")
            row["active_rc"] = proc.returncode
            hosts = json.loads(proc.stdout)["hosts"] if proc.stdout.strip() else []
            row["active_passed"] = sum("gpus_hold_up_under_load" in h["passed"] for h in hosts)
            if proc.returncode != 0:
                row["failures"] = {h["host"]: h["failures"] for h in hosts if h["failures"]} or proc.stderr[-2000:]
        finally:
            lab.down(log=lambda message: None)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="4,32", help="lab sizes, comma-separated")
    parser.add_argument("--duration", type=float, default=5.0, help="verify --active --duration (seconds)")
    parser.add_argument("--dir", default="/var/lib/provision-lab/bench-active", help="the benchmark lab's directory")
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("the lab needs root: sudo .venv/bin/python benchmarks/active_scale.py")
    rows = []
    for size in (int(s) for s in args.sizes.split(",")):
        rows.append(measure(size, Path(args.dir), args.duration))
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    print(f"nodes | verify | verify --active --duration {args.duration:g} | passed under load\n--- | --- | --- | ---")
    for row in rows:
        print(f"{row['nodes']} | {row['verify']:.1f} s | {row['active']:.1f} s | {row['active_passed']}/{row['nodes']}")


if __name__ == "__main__":
    main()
