"""A node reachable only through another lab node, its bastion: the inventory's ansible_ssh_common_args
(-o ProxyJump=..., or a ProxyCommand) take provision there, on real sshd; without them the node is unreachable.

Direct SSH from this machine is blocked inside the hidden node's namespace: a blackhole route to the lab's
controller address drops the node's answers to it, while the bastion (on the same management subnet) still
gets them. The route goes when the test ends.
"""

from __future__ import annotations

import json
import subprocess
from contextlib import contextmanager
from pathlib import Path

import yaml

BASTION, HIDDEN = "lab-rtx3090-1", "lab-rtx3090-2"  # tests/lab/cluster.yaml, as `lab up --like` names them


@contextmanager
def no_direct_ssh(lab):
    """This machine's packets reach HIDDEN, its answers to this machine are dropped: only the bastion gets them."""
    status = lab.status()
    node = next(n for n in status["nodes"] if n["name"] == HIDDEN)
    controller = f"10.213.{status['slot']}.1"  # the management bridge's address (provision_lab/netns.py)
    route = ["ip", "-n", node["netns"], "route", "add", "blackhole", f"{controller}/32"]
    subprocess.run(route, check=True)
    try:
        yield {n["name"]: n["address"] for n in status["nodes"]}
    finally:
        subprocess.run(["ip", "-n", node["netns"], "route", "del", "blackhole", f"{controller}/32"], check=True)


def inventory(lab, path: Path, ssh_args: str | None) -> Path:
    """The lab's inventory, the hidden node given these ansible_ssh_common_args (or none)."""
    tree = yaml.safe_load(lab.inventory.read_text())
    hosts = tree["all"]["children"]["rtx3090"]["hosts"]
    if ssh_args:
        hosts[HIDDEN]["ansible_ssh_common_args"] = ssh_args
    path.write_text(yaml.safe_dump(tree, sort_keys=False))
    return path


def hidden_result(lab, command: str, inv: Path) -> tuple[int, dict]:
    proc = lab.provision(command, str(inv), "--ssh-config", str(lab.ssh_config), "--limit", HIDDEN, "--json",
                         "--connect-timeout", "3", *(["--log", str(lab.log)] if command == "apply" else []))
    data = json.loads(proc.stdout) if proc.stdout.strip() else {"stderr": proc.stderr}
    hosts = data.get("hosts", [])
    assert [h["host"] for h in hosts] == [HIDDEN], data
    return proc.returncode, hosts[0]


def test_a_node_behind_a_bastion_is_reached_through_it_and_only_through_it(lab, tmp_path):
    with no_direct_ssh(lab) as addresses:
        direct = inventory(lab, tmp_path / "direct.yaml", None)
        for command in ("apply", "verify"):
            code, host = hidden_result(lab, command, direct)
            assert code == 4 and host["status"] == "unreachable", host
            assert f"cannot connect to {addresses[HIDDEN]}:22: no answer on port 22" in host["message"], host

        behind = inventory(lab, tmp_path / "behind.yaml", f"-o ProxyJump=root@{addresses[BASTION]}")
        code, host = hidden_result(lab, "apply", behind)
        assert code == 0 and host["status"] in ("ok", "changed"), host
        code, host = hidden_result(lab, "verify", behind)
        assert code == 0 and host["failures"] == [], host

        # The same bastion as a ProxyCommand: OpenSSH's ssh -W, run by paramiko (no shell), %h:%p replaced.
        command = f"-o ProxyCommand='ssh -F {lab.ssh_config} -o BatchMode=yes -W %h:%p root@{addresses[BASTION]}'"
        code, host = hidden_result(lab, "verify", inventory(lab, tmp_path / "command.yaml", command))
        assert code == 0 and host["failures"] == [], host
