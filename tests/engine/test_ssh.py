"""apply and facts over real SSH (OpenSSH on 127.0.0.1): host-key policy and a converge through Fabric."""

from __future__ import annotations

import os
import subprocess

import pytest
import yaml
from simnode import needs_root
from sshd import SSHServer

pytestmark = [needs_root(), pytest.mark.skipif(not os.path.exists("/usr/sbin/sshd"), reason="needs openssh-server")]


@pytest.fixture
def ssh_node(v100_node):
    env = {
        "PATH": f"{v100_node.bin}:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin",
        **{k: os.environ[k] for k in ("NVIDIA_SIM_CONFIG", "NVIDIA_SIM_STATE", "NVIDIA_SIM_KMSG")},
    }
    server = SSHServer(v100_node.root / "sshd", env)
    known_hosts = v100_node.root / "known_hosts"
    v100_node.ssh_config = server.client_config(known_hosts)
    v100_node.known_hosts = known_hosts
    v100_node.server = server
    data = {"all": {"children": {"v100": {"hosts": {"sshnode": None},
                                          "vars": {"provision_gpu": {"persistence": True, "power_limit": 200}}}}}}
    v100_node.ssh_inventory = v100_node.root / "ssh-inventory.yaml"
    v100_node.ssh_inventory.write_text(yaml.safe_dump(data))
    yield v100_node
    server.stop()


def ssh_apply(node, *args):
    return node.apply(str(node.ssh_inventory), "--ssh-config", str(node.ssh_config), *args)


def test_unknown_host_key_is_refused_with_its_fingerprint(ssh_node):
    result = ssh_apply(ssh_node)
    assert result.exit_code == 4, result.output
    assert "unknown SSH host key" in result.output and "SHA256:" in result.output
    assert "--accept-new-host-keys" in result.output
    assert not ssh_node.known_hosts.exists()
    assert ssh_node.query("persistence_mode") == ["Disabled"] * 4


def test_accept_new_records_the_key_and_converges_over_ssh(ssh_node):
    first = ssh_apply(ssh_node, "--accept-new-host-keys")
    assert first.exit_code == 0, first.output
    assert "sshnode" in first.output and "ok=0 changed=4" in first.output
    recorded = ssh_node.known_hosts.read_text()
    assert ssh_node.server.known_hosts_line().split()[2] in recorded
    assert ssh_node.query("power.limit") == ["200.00"] * 4

    second = ssh_apply(ssh_node)  # now known: no opt-in needed
    assert second.exit_code == 0, second.output
    assert "ok=4 changed=0 failed=0" in second.output


def test_a_changed_host_key_is_always_refused(ssh_node):
    impostor = ssh_node.root / "impostor"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(impostor)], check=True)
    key = open(f"{impostor}.pub").read().split()[:2]
    ssh_node.known_hosts.write_text(f"[127.0.0.1]:{ssh_node.server.port} {' '.join(key)}\n")
    result = ssh_apply(ssh_node, "--accept-new-host-keys")
    assert result.exit_code == 4
    assert "CHANGED" in result.output and "ssh-keygen -R" in result.output


def test_facts_over_ssh_use_one_command(ssh_node):
    ssh_node.known_hosts.write_text(ssh_node.server.known_hosts_line())
    result = ssh_node.provision("facts", str(ssh_node.ssh_inventory), "--ssh-config", str(ssh_node.ssh_config))
    assert result.exit_code == 0, result.output
    assert result.output.count("Tesla V100-SXM2-16GB") == 4
    check = ssh_apply(ssh_node, "--check")
    assert "(1 command," in check.output  # the facts batch; --check takes no lock
