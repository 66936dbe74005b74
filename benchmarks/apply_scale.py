"""How `provision apply` scales on the lab, against the floor of SSH itself and against its peers.

For labs of 1, 8, 32 (and 64) nodes, each 4x V100, every host worked on in parallel (N nodes: N workers),
every measurement a fresh process (interpreter start and imports count, as they do for a user). The work,
the same for every tool: persistence mode on, a 200 W power limit and application clocks 877,1005 on each
GPU (each changed only where it differs), /etc/nccl.conf, the boot settings file, script and unit
(provision-gpu-tuning.service), the unit enabled.

- provision: the first converge (a fresh lab), a no-op converge and --check, and a verify, of the shipped site playbook
  and templates (the inventory: the lab's + clocks and NCCL settings), and the remote commands per host
  (--json). Its nccl-files task also writes /etc/provision/nccl.env (one file more than the peers write)
  and checks the NICs first: the benchmark does what a user's `provision apply` does.
- the floors, in a fresh interpreter too, one parallel Fabric command per host, host keys checked:
  "floor" connects and runs `true`; "floor+smi" runs ONE `nvidia-smi --query-gpu=...` (the least any
  tool must do to know a GPU's state); "issue floor" (issue 28's: that query, `sha1sum` of two of the files
  and `systemctl is-enabled` of the unit, the least a no-op of this work reads); "floor+facts" runs the very
  facts batch a no-op run sends (its nvidia-smi calls and file reads included), so that what remains is the
  tool's own cost.
- the peers (--peers, on by default; --no-peers skips them): Ansible (ansible-core, pipelining, forks = N,
  no fact gathering; SSH connections shared within a run, never across runs) and pyinfra (--parallel N),
  doing the same work (benchmarks/peers/): their first converge and no-op.

Before each tool's first converge (provision's too) the nodes are reset (the files and the boot unit's link
removed over SSH, provision's records too, every node power-cycled: GPU settings do not survive a reboot) and
checked to be unconverged, so that each first converge really converges, on nodes in the same state. After
each tool's first converge every node is read back over SSH (GPUs at
the target, files there, unit enabled); each no-op must report 0 changed (provision's --json, Ansible's
PLAY RECAP, pyinfra's --json results); after the no-ops one node is rebooted and its boot unit must
bring the GPUs back. Any failure stops the run (the lab is brought down); each size's row is printed
to stderr as JSON as soon as it is measured.

The peers run from their own venv, not the project's (once, as root; ansible-core 2.20+ wants Python
3.12+ on the controller, setup.sh picks the newest Python it finds):

    sh benchmarks/peers/setup.sh      # -> /var/cache/provision-bench/venv; VENV=DIR to move it (--peers-venv DIR)
    sudo .venv/bin/python benchmarks/apply_scale.py [--sizes 1,8,32,64] [--repeat 3] [--no-peers]

The lab's nodes share this machine's CPUs with the tools: on a small machine, large sizes measure CPU
contention as much as latency. `--sizes 1,8,32` takes about 25 minutes on 2 cores (32 nodes: about
18, most of it Ansible); --no-peers about a quarter of that.

Targets (issue 28): no-op and --check within 1.3x the issue floor at 32 and 64 nodes, verify within 2x it.
"""
from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
import tempfile
import textwrap
import time
from pathlib import Path


from provision.capabilities.registry import FACTS
from provision.core.facts import Reads, new_token
from provision.inventory.load import load_inventory
from provision.commands.playbook import load_playbook
from provision.core.resources import playbook_path, templates_dir
from provision_lab.cluster import Lab
from provision_lab.spec import default_spec

from peers import run as peers

HERE = Path(__file__).resolve().parent
PLAYBOOK = playbook_path("site")  # the shipped site playbook: GPU tuning, the boot unit, NCCL's files
TEMPLATES = templates_dir()

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


def apply(lab: Lab, inventory: Path, forks: int, log: Path, *extra: str) -> tuple[float, float, dict]:
    """(wall seconds, control CPU seconds, the --json report)."""
    seconds, cpu, proc = peers.timed([sys.executable, "-m", "provision", "apply", str(inventory), "--ssh-config",
                                 str(lab.ssh_config_path), "--playbook", str(PLAYBOOK), "--templates", str(TEMPLATES),
                                 "--json", "-f", str(forks), "--log", str(log), *extra])
    if proc.returncode != 0:
        raise SystemExit(f"apply {' '.join(extra)} exited {proc.returncode}: {proc.stderr[-2000:]}")
    return seconds, cpu, json.loads(proc.stdout)


def verify(lab: Lab, inventory: Path, forks: int) -> tuple[float, float]:
    """(wall seconds, control CPU seconds) of `provision verify` of the converged lab: every check passes."""
    seconds, cpu, proc = peers.timed([sys.executable, "-m", "provision", "verify", str(inventory), "--ssh-config",
                                      str(lab.ssh_config_path), "--playbook", str(PLAYBOOK), "--templates",
                                      str(TEMPLATES), "-f", str(forks)])
    if proc.returncode != 0:
        raise SystemExit(f"verify exited {proc.returncode}: {proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return seconds, cpu


def floor(lab: Lab, addresses: list[str], command: str = "true") -> tuple[float, float]:
    """Wall time and control CPU of the floor, a fresh interpreter like the CLI's."""
    seconds, cpu, proc = peers.timed([sys.executable, "-c", FLOOR, str(lab.ssh_config_path),
                                 str(lab.dir / "known_hosts"), command, *addresses])
    if proc.returncode != 0:
        raise SystemExit(f"floor failed: {proc.stderr[-2000:]}")
    return seconds, cpu


def facts_batch(inventory: Path) -> str:
    """The command a no-op run reads each host with (its lock section aside)."""
    host = load_inventory(str(inventory)).select(None)[0]
    tasks = load_playbook(PLAYBOOK, TEMPLATES)
    return FACTS.script(new_token(), reads=Reads.union(t.reads(host) for t in tasks))


def medians(runs: list[tuple]) -> tuple:
    """Each column's median of runs of (seconds, cpu, ...)."""
    return tuple(statistics.median(column) for column in zip(*runs))


def median(measure, repeat: int) -> tuple[float, float]:
    """(seconds, control CPU) medians of repeat runs."""
    return medians([measure()[:2] for _ in range(repeat)])


def measure_provision(lab: Lab, nodes: list[dict], inventory: Path, workdir: Path, repeat: int) -> dict:
    size, log = len(nodes), workdir / "runs.jsonl"
    row = {}
    # Every tool's first converge runs on nodes just reset (power-cycled). Such nodes converged 8-21% slower than
    # a lab just started (provision at 32 nodes, three tries): a fresh lab for provision alone would favour it.
    row["reset"] = peers.reset(lab, nodes)
    row["first"], row["first_cpu"], first = apply(lab, inventory, size, log)
    peers.expect_converged(lab, nodes, "provision")
    row["commands_first"] = max(h["commands"] for h in first["hosts"])
    noop = [apply(lab, inventory, size, log) for _ in range(repeat)]
    if any(h["counts"]["changed"] for _, _, result in noop for h in result["hosts"]):
        raise SystemExit(f"a provision no-op changed something: {noop[0][2]}")
    row["noop"], row["noop_cpu"] = medians([run[:2] for run in noop])
    row["commands_noop"] = max(h["commands"] for h in noop[0][2]["hosts"])
    checks = [apply(lab, inventory, size, log, "--check") for _ in range(repeat)]
    row["check"], row["check_cpu"] = medians([run[:2] for run in checks])
    row["commands_check"] = max(h["commands"] for h in checks[0][2]["hosts"])
    row["verify"], row["verify_cpu"] = median(lambda: verify(lab, inventory, size), repeat)
    peers.expect_boot_reapplies(lab, nodes[0], "provision")
    return row


def measure_floors(lab: Lab, nodes: list[dict], inventory: Path, repeat: int) -> dict:
    addresses = [n["address"] for n in nodes]
    batch = facts_batch(inventory)
    row = {}
    for key, command in (("floor", "true"), ("floor_smi", peers.SMI_QUERY), ("floor_issue", peers.ISSUE_FLOOR),
                         ("floor_facts", batch)):
        row[key], row[f"{key}_cpu"] = median(lambda: floor(lab, addresses, command), repeat)
    return row


def measure_peer(name: str, run, lab: Lab, nodes: list[dict], inventory: Path, workdir: Path, repeat: int) -> dict:
    """Reset the nodes, then the peer's first converge (checked on the nodes) and its no-op (median)."""
    reset_s = peers.reset(lab, nodes)
    first, first_cpu = run(inventory, nodes, workdir, first=True)
    peers.expect_converged(lab, nodes, name)
    noop, noop_cpu = median(lambda: run(inventory, nodes, workdir, first=False), repeat)
    peers.expect_boot_reapplies(lab, nodes[0], name)
    return {f"{name}_first": first, f"{name}_noop": noop, f"{name}_reset": reset_s, f"{name}_first_cpu": first_cpu,
            f"{name}_noop_cpu": noop_cpu}


def measure(size: int, lab_dir: Path, repeat: int, venv: Path | None) -> dict:
    lab = Lab(lab_dir)
    lab.down(log=lambda message: None)
    started = time.monotonic()
    lab.up(default_spec(size), log=lambda message: None)
    row = {"nodes": size, "lab_up": time.monotonic() - started}
    try:
        with tempfile.TemporaryDirectory(prefix="provision-bench-") as tmp:
            workdir = Path(tmp)
            nodes = [{"name": n["name"], "address": n["address"]} for n in lab.status()["nodes"]]
            inventories = peers.write_inventories(lab, nodes, workdir)
            row |= measure_provision(lab, nodes, inventories["provision"], workdir, repeat)
            row |= measure_floors(lab, nodes, inventories["provision"], repeat)
            if venv:
                for name in ("ansible", "pyinfra"):
                    run = functools.partial(getattr(peers, name), venv)
                    row |= measure_peer(name, run, lab, nodes, inventories[name], workdir, repeat)
    finally:
        lab.down(log=lambda message: None)
    return row


def table(head: tuple[str, ...], rows: list[list[str]]) -> str:
    lines = [" | ".join(head), " | ".join("---" for _ in head)]
    return "\n".join(lines + [" | ".join(r) for r in rows])


def seconds(row: dict, key: str) -> str:
    return f"{row[key]:.2f}"


def ratio(row: dict, key: str, base: str) -> str:
    return f"{row[key] / row[base]:.2f}x"


def per_host_ms(row: dict, key: str) -> str:
    """Control CPU per host, in ms."""
    return f"{row[key] / row['nodes'] * 1000:.0f}"


def provision_table(rows: list[dict]) -> str:
    head = ("nodes", "lab up s", "first s", "no-op s", "--check s", "floor s", "no-op/floor", "floor+smi s",
            "no-op/floor+smi", "issue floor s", "no-op/issue floor", "--check/issue floor", "floor+facts s",
            "no-op/floor+facts", "cmds/host first", "no-op", "check",
            "control CPU ms/host: first", "no-op", "--check", "floor+smi", "issue floor", "no-op/floor+smi CPU",
            "no-op/issue floor CPU")
    return table(head, [[str(r["nodes"]), *(seconds(r, k) for k in ("lab_up", "first", "noop", "check", "floor")),
                         ratio(r, "noop", "floor"), seconds(r, "floor_smi"), ratio(r, "noop", "floor_smi"),
                         seconds(r, "floor_issue"), ratio(r, "noop", "floor_issue"), ratio(r, "check", "floor_issue"),
                         seconds(r, "floor_facts"), ratio(r, "noop", "floor_facts"),
                         str(r["commands_first"]), str(r["commands_noop"]), str(r["commands_check"]),
                         *(per_host_ms(r, k) for k in ("first_cpu", "noop_cpu", "check_cpu", "floor_smi_cpu",
                                                       "floor_issue_cpu")),
                         ratio(r, "noop_cpu", "floor_smi_cpu"), ratio(r, "noop_cpu", "floor_issue_cpu")] for r in rows])


def verify_table(rows: list[dict]) -> str:
    head = ("nodes", "verify s", "floor s", "verify/floor", "issue floor s", "verify/issue floor", "floor+facts s",
            "verify/floor+facts", "control CPU ms/host: verify", "no-op", "verify/no-op CPU")
    return table(head, [[str(r["nodes"]), seconds(r, "verify"), seconds(r, "floor"), ratio(r, "verify", "floor"),
                         seconds(r, "floor_issue"), ratio(r, "verify", "floor_issue"),
                         seconds(r, "floor_facts"), ratio(r, "verify", "floor_facts"),
                         per_host_ms(r, "verify_cpu"), per_host_ms(r, "noop_cpu"), ratio(r, "verify_cpu", "noop_cpu")]
                        for r in rows])


def peers_table(rows: list[dict]) -> str:
    head = ("nodes", "floor+smi s", "provision first s", "no-op s", "Ansible first s", "no-op s", "pyinfra first s",
            "no-op s", "provision no-op/floor+smi", "pyinfra no-op/provision", "pyinfra first/provision",
            "Ansible no-op/provision", "control CPU ms/host first: provision", "Ansible", "pyinfra",
            "no-op: provision", "Ansible", "pyinfra")
    keys = ("floor_smi", "first", "noop", "ansible_first", "ansible_noop", "pyinfra_first", "pyinfra_noop")
    cpu = ("first_cpu", "ansible_first_cpu", "pyinfra_first_cpu", "noop_cpu", "ansible_noop_cpu", "pyinfra_noop_cpu")
    return table(head, [[str(r["nodes"]), *(seconds(r, k) for k in keys), ratio(r, "noop", "floor_smi"),
                         ratio(r, "pyinfra_noop", "noop"), ratio(r, "pyinfra_first", "first"),
                         ratio(r, "ansible_noop", "noop"), *(per_host_ms(r, k) for k in cpu)] for r in rows])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,8,32,64", help="lab sizes, comma-separated")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each idempotent measurement (median)")
    peers.add_arguments(parser, "measure Ansible and pyinfra too (--no-peers: provision and the floors only)")
    args = parser.parse_args()
    versions = peers.check_venv(args.peers_venv) if args.peers else None  # before any lab comes up
    rows = []
    for size in (int(s) for s in args.sizes.split(",")):
        print(f"measuring {size} node(s) ...", file=sys.stderr, flush=True)
        rows.append(measure(size, Path(args.dir), args.repeat, args.peers_venv if args.peers else None))
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)  # kept, should a later size fail
    print(provision_table(rows))
    print()
    print(verify_table(rows))
    if versions:
        print()
        print(peers_table(rows))
        print()
        print(f"Peers: ansible-core {versions['ansible-core']}, pyinfra {versions['pyinfra']} "
              f"(Python {versions['python']}); provision on Python {sys.version.split()[0]}; "
              f"median of {args.repeat} no-op runs.")


if __name__ == "__main__":
    main()
