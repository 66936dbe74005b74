"""verify --active on the basement lab (tests/lab/conftest.py `basement`), as the active lab tests run it: its
inventory with every host loaded by the GPU simulator's stand-in, a verify --active run's hosts, and what an active
run leaves on a node while it runs."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

# The inventory's name of the active block: provision_active once provision's variables have their prefix (issue 43)
ACTIVE = "provision_active"
LOAD = {"load_command": ["/usr/lib/provision-lab/gpusim", "load"]}  # the GPU simulator's stand-in load


def loaded(lab, name: str, host_vars: dict[str, dict] | None = None) -> Path:
    """The lab's inventory with every host loaded by the simulator (provision_active.load_command), and these variables
    merged into the named hosts (lab-v100-1: {"provision_active": {...}})."""
    tree = yaml.safe_load(lab.inventory.read_text())
    tree["all"].setdefault("vars", {})[ACTIVE] = dict(LOAD)
    for host, more in (host_vars or {}).items():
        for where in _hosts_mappings(tree):
            if host in where:
                entry = where[host] if where[host] is not None else {}
                for key, value in more.items():
                    entry[key] = {**entry.get(key, {}), **value} if isinstance(value, dict) else value
                where[host] = entry
    path = lab.dir / f"{name}.yaml"
    path.write_text(yaml.safe_dump(tree))
    return path


def _hosts_mappings(group: dict):
    """Every `hosts:` mapping under a group, nested children included."""
    for value in group.values():
        if isinstance(value, dict):
            if isinstance(value.get("hosts"), dict):
                yield value["hosts"]
            yield from _hosts_mappings(value)


def verify_active(lab, inventory: Path, limit: str, *more: str) -> tuple[int, dict[str, dict]]:
    proc = lab.provision("verify", str(inventory), "--active", "--duration", "6", "--json", "--limit", limit, *more)
    assert proc.stdout.strip(), proc.stderr
    return proc.returncode, {h["host"]: h for h in json.loads(proc.stdout)["hosts"]}


NODES = ["lab-v100-1", "lab-rtx4090-1"]
# What an active run leaves on a node while it runs: the simulator's load, the sampler, its directory. The words
# are split in two in the sh ("gpusim"" load") so that this listing's own command line never matches itself.
LEFT = ("for p in /proc/[0-9]*; do c=$(tr '\\0' ' ' < $p/cmdline 2>/dev/null); case $c in "
        "*'gpusim'' load'*|*' -l''ms '*) echo \"process: $c\";; esac; done; "
        "for d in /tmp/provision-active.*; do [ -e \"$d\" ] && echo \"left: $d\"; done; true")


def on_nodes(lab, nodes: list[str] = NODES, listing: str = LEFT) -> dict[str, list[str]]:
    """Node -> what of an active run is there now (listing: sh that prints it)."""
    said = {}
    for node in nodes:
        done = lab.ssh(node, listing)
        assert done.returncode == 0, done.stderr
        said[node] = done.stdout.splitlines()
    return said
