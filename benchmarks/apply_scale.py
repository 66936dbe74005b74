"""How `provision apply` scales on the lab, against the floor of SSH itself.

For labs of 1, 8, 32 (and 64) nodes, each 4x V100: wall time of the first
converge, a no-op converge and --check (the real CLI in a subprocess, so
interpreter start and imports count, as they do for a user), the remote
commands per host (the --json `commands`), and the floor: the same nodes
reached by one parallel Fabric command per host (connect + `true`), also in a
fresh interpreter, and "floor+facts": the same with the very facts batch a
no-op run sends (its nvidia-smi calls included), so that what remains is the
tool's own cost. Every host is worked on in parallel (-f N, N workers).

    sudo .venv/bin/python benchmarks/apply_scale.py [--sizes 1,8,32,64] [--repeat 3]

Target: no-op converge within 1.3x the floor at 32 nodes.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from provision.facts import gather
from provision.inventory import load_inventory
from provision.playbook import load_playbook
from provision.resources import playbook_path, templates_dir
from provision.lab.cluster import Lab
from provision.lab.spec import default_spec


# One command per host, all hosts at once, host keys checked like the tool does.
FLOOR = textwrap.dedent("""\
    import sys
    from concurrent.futures import ThreadPoolExecutor
    import fabric, paramiko
    ssh_config, known_hosts, command, hosts = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
    def one(address):
        conn = fabric.Connection(address, config=fabric.Config(runtime_ssh_path=ssh_config))
        conn.client.load_host_keys(known_hosts)
        conn.client.set_missing_host_key_policy(paramiko.RejectPolicy())
        with conn:
            return conn.run(command, hide=True).exited
    with ThreadPoolExecutor(max_workers=len(hosts)) as pool:
        assert set(pool.map(one, hosts)) == {0}
""")


def timed(argv: list[str]) -> tuple[float, subprocess.CompletedProcess]:
    start = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=900)
    return time.monotonic() - start, proc


def apply(lab: Lab, forks: int, log: Path, *extra: str) -> tuple[float, dict]:
    seconds, proc = timed([sys.executable, "-m", "provision", "apply", str(lab.inventory_path), "--ssh-config",
                           str(lab.ssh_config_path), "--json", "-f", str(forks), "--log", str(log), *extra])
    if proc.returncode != 0:
        raise SystemExit(f"apply {' '.join(extra)} exited {proc.returncode}: {proc.stderr[-2000:]}")
    return seconds, json.loads(proc.stdout)


def floor(lab: Lab, addresses: list[str], command: str = "true") -> float:
    """Wall time of the floor, a fresh interpreter like the CLI's."""
    seconds, proc = timed([sys.executable, "-c", FLOOR, str(lab.ssh_config_path),
                           str(lab.dir / "known_hosts"), command, *addresses])
    if proc.returncode != 0:
        raise SystemExit(f"floor failed: {proc.stderr[-2000:]}")
    return seconds


def measure(size: int, lab_dir: Path, repeat: int) -> dict:
    lab = Lab(lab_dir)
    lab.down(log=lambda message: None)
    started = time.monotonic()
    lab.up(default_spec(size), log=lambda message: None)
    row = {"nodes": size, "lab_up": time.monotonic() - started}
    try:
        addresses = [n["address"] for n in lab.status()["nodes"]]
        log = lab_dir / "bench-runs.jsonl"
        row["first"], first = apply(lab, size, log)
        row["commands_first"] = max(h["commands"] for h in first["hosts"])
        noop = [apply(lab, size, log) for _ in range(repeat)]
        assert all(h["counts"]["changed"] == 0 for _, result in noop for h in result["hosts"])
        row["noop"] = statistics.median(s for s, _ in noop)
        row["commands_noop"] = max(h["commands"] for h in noop[0][1]["hosts"])
        checks = [apply(lab, size, log, "--check") for _ in range(repeat)]
        row["check"] = statistics.median(s for s, _ in checks)
        row["commands_check"] = max(h["commands"] for h in checks[0][1]["hosts"])
        row["floor"] = statistics.median(floor(lab, addresses) for _ in range(repeat))
        # The same floor running the very command a no-op run reads each host with: what is left
        # between this and the no-op is the tool's own cost (imports, planning, the lock release).
        host = load_inventory(str(lab.inventory_path)).select(None)[0]
        tasks = load_playbook(playbook_path("site"), templates_dir(None))
        paths = sorted({p for t in tasks for p in t.file_paths(host)})
        batch = gather.build_script(gather.new_token(), paths, sorted({u for t in tasks for u in t.unit_names(host)}))
        row["floor_facts"] = statistics.median(floor(lab, addresses, batch) for _ in range(repeat))
    finally:
        lab.down(log=lambda message: None)
        (lab_dir / "bench-runs.jsonl").unlink(missing_ok=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,8,32,64", help="lab sizes, comma-separated")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each idempotent measurement (median)")
    parser.add_argument("--dir", default="/var/lib/provision-lab/bench", help="the benchmark lab's directory")
    args = parser.parse_args()
    rows = []
    for size in (int(s) for s in args.sizes.split(",")):
        print(f"measuring {size} node(s) ...", file=sys.stderr, flush=True)
        rows.append(measure(size, Path(args.dir), args.repeat))
    head = ("nodes", "lab up s", "first s", "no-op s", "--check s", "floor s", "no-op/floor",
            "floor+facts s", "no-op/floor+facts", "cmds/host first", "no-op", "check")
    print(" | ".join(head))
    print(" | ".join("---" for _ in head))
    for r in rows:
        print(" | ".join([str(r["nodes"]), *(f"{r[k]:.2f}" for k in ("lab_up", "first", "noop", "check", "floor")),
                          f"{r['noop'] / r['floor']:.2f}x", f"{r['floor_facts']:.2f}",
                          f"{r['noop'] / r['floor_facts']:.2f}x", str(r["commands_first"]), str(r["commands_noop"]),
                          str(r["commands_check"])]))


if __name__ == "__main__":
    main()
