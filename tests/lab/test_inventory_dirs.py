"""The lab reached from an Ansible-style inventory directory: hosts in INI, connection settings in group_vars/,
one node's SSH key only in host_vars/NODE.yml. The lab's own ssh_config names the key for every node; here a
copy without it is used, so the key that opens the node is the one host_vars gives (and without that file the
node refuses provision: the failure made to happen, not assumed)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

CLUSTER = Path(__file__).parent / "cluster.yaml"  # the session lab's shape, for a lab of this module's own

NODE = "lab-rtx3090-1"  # tests/lab/cluster.yaml, as `lab up --like` names it


def inventory_dir(lab, root: Path, key: bool) -> Path:
    """The lab's hosts as INI, its ssh_config (without the key) in group_vars/all.yml, the key in host_vars."""
    tree = yaml.safe_load(lab.inventory.read_text())
    lines = []
    for group, body in tree["all"]["children"].items():
        lines.append(f"[{group}]")
        lines += [f"{name} ansible_host={host['ansible_host']}" for name, host in (body.get("hosts") or {}).items()]
    (root / "group_vars").mkdir(parents=True)
    (root / "host_vars").mkdir()
    (root / "hosts").write_text("\n".join(lines) + "\n")
    without_key = re.sub(r"^\s*(IdentityFile|IdentitiesOnly)\b.*\n", "", lab.ssh_config.read_text(), flags=re.M)
    (root.parent / f"{root.name}.ssh_config").write_text(without_key)  # beside: in it, it would be read as hosts
    (root / "group_vars" / "all.yml").write_text(f"provision_ssh_config: ../{root.name}.ssh_config\nntp_servers: [x.org]\n")
    if key:
        (root / "host_vars" / f"{NODE}.yml").write_text(f"ansible_ssh_private_key_file: {lab.dir / 'id_ed25519'}\n")
    return root


def facts(lab, inventory: Path) -> tuple[int, dict]:
    proc = lab.provision("facts", "-i", str(inventory), "--limit", NODE, "--json", "--connect-timeout", "5")
    return proc.returncode, json.loads(proc.stdout) if proc.stdout.strip() else {"stderr": proc.stderr}


@pytest.fixture(scope="module")
def own_lab(lab_beside):
    """A lab of its own: the session's may be busy with, or changed by, other modules' tests."""
    with lab_beside("inventory-dirs", lambda cluster: cluster.lab("up", "--like", str(CLUSTER))) as cluster:
        yield cluster


def test_a_key_file_in_host_vars_opens_the_node_and_without_it_the_node_refuses(own_lab, tmp_path):
    lab = own_lab
    code, data = facts(lab, inventory_dir(lab, tmp_path / "with-key", key=True))
    assert code == 0 and data[NODE]["system"]["hostname"], data  # read over SSH (its GPUs: other tests' business)
    code, data = facts(lab, inventory_dir(lab, tmp_path / "without", key=False))
    assert code == 4 and "SSH authentication failed as root: no key to offer" in data[NODE]["unreachable"], data
