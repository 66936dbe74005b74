"""ansible-inventory as the oracle for the differential tests: ansible-core is a test-only tool run as a
subprocess, never imported (it is GPL, provision is Apache-2.0). Both sides give one view per host: its groups
but `all`, and its effective address, user, port, connection and provision_gpu.power_limit."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Sequence

import pytest

from provision.inventory.load import load_inventory
from provision.inventory.model import Inventory

ANSIBLE_INVENTORY = shutil.which("ansible-inventory", path=str(Path(sys.executable).parent)) or \
    shutil.which("ansible-inventory")
needs_ansible = pytest.mark.skipif(ANSIBLE_INVENTORY is None,
                                   reason="ansible-inventory not installed (pip install '.[test]' installs it)")


def run_ansible_inventory(sources: Path | Sequence[Path], *args: str, home: Path | None = None) -> str:
    sources = [sources] if isinstance(sources, Path) else list(sources)
    home = home or sources[0].parent
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "ANSIBLE_INVENTORY_UNPARSED_FAILED": "1",
           "ANSIBLE_LOCAL_TEMP": str(home / "tmp"), "LC_ALL": "C.UTF-8"}
    command = [ANSIBLE_INVENTORY, *(arg for s in sources for arg in ("-i", str(s))), *args]
    # From an empty directory: ansible-inventory takes the current one for the playbook's, and would read its
    # group_vars/ too (ansible-playbook reads those beside the playbook; provision has none).
    with tempfile.TemporaryDirectory() as cwd:
        return subprocess.run(command, capture_output=True, text=True, env=env, cwd=cwd, check=True).stdout


def ansible_view(sources: Path | Sequence[Path], home: Path | None = None) -> dict:
    """What Ansible makes of the sources: host -> (its groups but all, its effective values)."""
    return _view(json.loads(run_ansible_inventory(sources, "--list", home=home)))


def _view(data: dict) -> dict:
    data = dict(data)
    hostvars = data.pop("_meta")["hostvars"]
    parents: dict[str, set[str]] = {}
    for group, body in data.items():
        for child in body.get("children", []):
            parents.setdefault(child, set()).add(group)
    members: dict[str, set[str]] = {}
    for group, body in data.items():
        for host in body.get("hosts", []):
            todo, seen = [group], set()
            while todo:
                g = todo.pop()
                if g not in seen:
                    seen.add(g)
                    todo += parents.get(g, ())
            members.setdefault(host, set()).update(seen - {"all"})
    # _meta.hostvars lists only the hosts that have variables: every host is in some group's hosts
    return {host: (groups, _values(host, hostvars.get(host, {}))) for host, groups in members.items()}


def _values(name: str, variables: dict) -> tuple:
    # Of two names for one setting, Ansible's ssh plugin takes the last one set: the _ssh_ one
    # (tests/unit/inventory/test_inventory_namespace.py holds that against what `ansible -vvv` runs).
    variables = {**variables, **{k.replace("_ssh_", "_"): v for k, v in variables.items()
                                 if k in ("ansible_ssh_host", "ansible_ssh_user", "ansible_ssh_port")}}
    port = variables.get("ansible_port")  # a quoted port is text to Ansible too, until it connects: the number
    gpu = variables.get("provision_gpu")
    return (str(variables.get("ansible_host", name)), variables.get("ansible_user"),
            int(port) if isinstance(port, str) and port.isdigit() else port, variables.get("ansible_connection", "ssh"),
            gpu.get("power_limit") if isinstance(gpu, dict) else None, truth(variables.get("ansible_become")))


def truth(value) -> bool | None:
    """A boolean as Ansible reads one ("yes", "False", True), or None where none is set."""
    return value if value is None or isinstance(value, bool) else str(value).lower() in ("y", "yes", "on", "1",
                                                                                         "true", "t")


def provision_view(sources: Path | Sequence[Path]) -> dict:
    return _provision_view(load_inventory(sources))


def _provision_view(inventory: Inventory) -> dict:
    return {h.name: (set(h.groups) - {"all"}, (h.address, h.user, h.port, h.connection,
                                               h.settings.gpu.power_limit if h.settings.gpu else None,
                                               truth(h.vars.get("ansible_become"))))
            for h in inventory.hosts.values()}


ANSIBLE = Path(ANSIBLE_INVENTORY).with_name("ansible") if ANSIBLE_INVENTORY else None


def ansible_rendered(sources: Path, expression: str, home: Path) -> dict:
    """Each host's value of a Jinja expression as Ansible renders it (the debug module, which connects to
    nothing): host -> value."""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "ANSIBLE_LOCAL_TEMP": str(home / "tmp"), "LC_ALL": "C.UTF-8",
           "ANSIBLE_DEPRECATION_WARNINGS": "0"}
    with tempfile.TemporaryDirectory() as cwd:
        out = subprocess.run([str(ANSIBLE), "all", "-i", str(sources), "-o", "-m", "debug", "-a",
                              f"msg={{{{ {expression} }}}}"], capture_output=True, text=True, env=env, cwd=cwd,
                             check=True).stdout
    found = {}
    for line in out.splitlines():
        host, _, result = line.partition(" | SUCCESS => ")
        if result:
            found[host] = json.loads(result)["msg"]
    return found


def ansible_tree(sources: Path | Sequence[Path]) -> dict[str, tuple[list[str], list[str]]]:
    """Each group ansible-inventory --list shows (one with hosts or children), with its own hosts and its children,
    both in the order Ansible built them, which its `group[N]` subscripts and --graph follow."""
    return _tree(json.loads(run_ansible_inventory(sources, "--list")))


def ansible_view_and_tree(sources: Path | Sequence[Path]) -> tuple[dict, dict]:
    """ansible_view and ansible_tree of one ansible-inventory run (it takes a second or two)."""
    data = json.loads(run_ansible_inventory(sources, "--list"))
    return _view(data), _tree(data)


def _tree(data: dict) -> dict[str, tuple[list[str], list[str]]]:
    return {group: (body.get("hosts", []), body.get("children", [])) for group, body in data.items()
            if group != "_meta"}


def provision_tree(sources: Path | Sequence[Path]) -> dict[str, tuple[list[str], list[str]]]:
    """The same from provision's inventory: Ansible's holds `ungrouped` from the start, all's first child."""
    return _provision_tree(load_inventory(sources))


def provision_view_and_tree(sources: Path | Sequence[Path]) -> tuple[dict, dict]:
    inventory = load_inventory(sources)
    return _provision_view(inventory), _provision_tree(inventory)


def _provision_tree(inventory: Inventory) -> dict[str, tuple[list[str], list[str]]]:
    tree = {}
    for name, group in inventory.groups.items():
        children = list(group.children)
        if name == "all":
            children = ["ungrouped", *(child for child in children if child != "ungrouped")]
        hosts = [] if name == "all" else list(group.hosts)
        if hosts or children:
            tree[name] = (hosts, children)
    return tree


def ansible_selected(sources: Path, pattern: str) -> list[str]:
    """The hosts `ansible PATTERN --list-hosts` selects, in its order (connects to nothing)."""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(sources.parent), "ANSIBLE_LOCAL_TEMP": str(sources.parent / "tmp"),
           "LC_ALL": "C.UTF-8", "ANSIBLE_INVENTORY_UNPARSED_FAILED": "1"}
    with tempfile.TemporaryDirectory() as cwd:
        out = subprocess.run([str(ANSIBLE), pattern, "-i", str(sources), "--list-hosts"], capture_output=True,
                             text=True, env=env, cwd=cwd, check=True).stdout
    return [line.strip() for line in out.splitlines()[1:] if line.strip()]  # under "  hosts (N):"
