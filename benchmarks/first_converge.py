"""The first converge, provision against pyinfra, repeated on the same lab nodes (issue 28's first target).

apply_scale.py measures each tool's first converge once per size (a first converge needs unconverged nodes, and
each reset costs a power cycle of every node); on this machine one run varies by a fifth. This measures ROUNDS
pairs on one lab of SIZE nodes (4x V100 each, the same work as apply_scale.py: benchmarks/peers/), the two tools
in turn, the order swapped every round, and gives each run, the medians and the ratio pair by pair.

Before each run the nodes are reset as apply_scale.py resets them (the files, script, unit and its link removed,
every node power-cycled: the GPUs back at their defaults) and provision's own records are removed too (the
supported-clocks cache in /var/cache/provision and the GPU layout in /var/lib/provision), so that every
provision run is a real first: it reads the supported clocks from nvidia-smi and records the layout, as on a
new node. After each run every node is read back (GPUs at the target, files there, unit enabled).

    sh benchmarks/peers/setup.sh      # once: the peers' venv
    sudo .venv/bin/python benchmarks/first_converge.py [--size 32] [--rounds 5] [--no-peers]   # 32 x 5: 12 minutes

--no-peers: provision's runs only (no peers' venv needed).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

from apply_scale import apply
from peers import run as peers
from provision_lab.cluster import Lab
from provision_lab.spec import default_spec


def first_provision(lab: Lab, nodes: list[dict], inventory: Path, workdir: Path) -> tuple[float, float]:
    """(wall seconds, control CPU seconds) of one provision apply that must change something on every host."""
    seconds, cpu, report = apply(lab, inventory, len(nodes), workdir / "runs.jsonl")
    if any(h["counts"]["changed"] == 0 for h in report["hosts"]):
        raise SystemExit(f"a provision first converge changed nothing on a host: {report}")
    return seconds, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=32, help="lab nodes")
    parser.add_argument("--rounds", type=int, default=5, help="pairs of first converges")
    peers.add_arguments(parser, "pyinfra's runs too (--no-peers: provision's only)")
    args = parser.parse_args()
    versions = peers.check_venv(args.peers_venv) if args.peers else None  # before any lab comes up
    lab = Lab(Path(args.dir))
    lab.down(log=lambda message: None)
    lab.up(default_spec(args.size), log=lambda message: None)
    runs: dict[str, list[tuple[float, float]]] = {"provision": [], "pyinfra": []}
    try:
        with tempfile.TemporaryDirectory(prefix="provision-bench-") as tmp:
            workdir = Path(tmp)
            nodes = [{"name": n["name"], "address": n["address"]} for n in lab.status()["nodes"]]
            inventories = peers.write_inventories(lab, nodes, workdir)
            tools = {"provision": lambda: first_provision(lab, nodes, inventories["provision"], workdir),
                     "pyinfra": lambda: peers.pyinfra(args.peers_venv, inventories["pyinfra"], nodes, workdir, True)}
            order = ["provision", "pyinfra"] if versions else ["provision"]
            for round_ in range(args.rounds):
                for name in order if round_ % 2 == 0 else order[::-1]:
                    peers.reset(lab, nodes)
                    runs[name].append(tools[name]())
                    peers.expect_converged(lab, nodes, name)
                    print(f"round {round_ + 1} {name}: {runs[name][-1][0]:.2f} s, control CPU "
                          f"{runs[name][-1][1] * 1000 / args.size:.0f} ms/host", file=sys.stderr, flush=True)
    finally:
        lab.down(log=lambda message: None)
    mine, theirs = runs["provision"], runs["pyinfra"]
    ratios = [p[0] / q[0] for p, q in zip(theirs, mine)]
    print("| nodes | runs | provision first s (min-max) | pyinfra first s (min-max) | pyinfra/provision, pair by pair "
          "(min-max) | control CPU ms/host: provision | pyinfra |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    print(f"| {args.size} | {args.rounds} | {spread([r[0] for r in mine])} | {spread([r[0] for r in theirs])} | "
          f"{spread(ratios, 'x')} | {cpu_per_host(mine, args.size)} | {cpu_per_host(theirs, args.size)} |")
    if versions:
        print(f"\npyinfra {versions['pyinfra']} (Python {versions['python']}); "
              f"provision on Python {sys.version.split()[0]}")


def spread(values: list[float], unit: str = "") -> str:
    """Median (min-max), or - for no runs."""
    if not values:
        return "-"
    return f"{statistics.median(values):.2f}{unit} ({min(values):.2f}-{max(values):.2f})"


def cpu_per_host(runs: list[tuple[float, float]], size: int) -> str:
    return f"{statistics.median(r[1] for r in runs) * 1000 / size:.0f}" if runs else "-"


if __name__ == "__main__":
    main()
