"""HostKeyAlias against OpenSSH itself (issue 43): a real sshd on 127.0.0.1, and OpenSSH's ssh client as the oracle.
What provision records under an alias, ssh accepts; what ssh records under an alias (hashed, as Debian's
HashKnownHosts does), provision accepts; and without the alias both refuse the key as unknown."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import paramiko
import pytest
from simnode import needs_root
from sshd import SSHServer

from provision.core.connection import HostKeyRefused, SSHConnection, SSHOptions
from provision.core.sshargs import ARGS_KEYS, host_args

pytestmark = [needs_root(), pytest.mark.skipif(not os.path.exists("/usr/sbin/sshd"), reason="needs openssh-server")]


@pytest.fixture
def server(tmp_path):
    server = SSHServer(tmp_path / "sshd", {"LC_ALL": "C"})
    yield server
    server.stop()


def provision_true(server: SSHServer, known_hosts: Path, alias: str | None, accept_new: bool = False) -> str:
    """`true` on the server through provision's connection: its output, or the refusal."""
    text = f"-o UserKnownHostsFile={known_hosts}" + (f" -o HostKeyAlias={alias}" if alias else "")
    args = host_args({"ansible_ssh_common_args": text}, dict.fromkeys(ARGS_KEYS, Path("/")), None, None)[0]
    conn = SSHConnection("node", "127.0.0.1", "root", server.port, SSHOptions(
        ssh_config="/dev/null", identity_file=str(server.client_key), accept_new_host_keys=accept_new, args=args))
    try:
        conn.open()
        return f"rc={conn.run(['true']).rc}"
    except HostKeyRefused as exc:
        return str(exc)
    finally:
        conn.close()


def openssh_true(server: SSHServer, known_hosts: Path, alias: str | None, *options: str) -> int:
    alias_options = ["-o", f"HostKeyAlias={alias}"] if alias else []
    return subprocess.run(["ssh", "-F", "/dev/null", "-o", "BatchMode=yes", "-o", f"UserKnownHostsFile={known_hosts}",
                           "-o", "GlobalKnownHostsFile=/dev/null", *alias_options, *options, "-i",
                           str(server.client_key), "-p", str(server.port), "root@127.0.0.1", "true"],
                          capture_output=True, timeout=30).returncode


def test_what_provision_records_under_the_alias_openssh_accepts(server, tmp_path):
    known_hosts = tmp_path / "known_hosts"
    assert provision_true(server, known_hosts, "node-alias", accept_new=True) == "rc=0"
    key_type, key = Path(f"{server.host_key}.pub").read_text().split()[:2]
    assert known_hosts.read_text() == f"node-alias {key_type} {key}\n"
    assert openssh_true(server, known_hosts, "node-alias", "-o", "StrictHostKeyChecking=yes") == 0
    assert openssh_true(server, known_hosts, None, "-o", "StrictHostKeyChecking=yes") == 255  # ssh: unknown too
    assert "unknown SSH host key for [127.0.0.1]:" in provision_true(server, known_hosts, None)


def test_what_openssh_records_under_the_alias_hashed_provision_accepts(server, tmp_path):
    known_hosts = tmp_path / "known_hosts"
    assert openssh_true(server, known_hosts, "node-alias", "-o", "StrictHostKeyChecking=accept-new",
                        "-o", "HashKnownHosts=yes") == 0
    assert known_hosts.read_text().startswith("|1|")  # the alias hashed: no name in the file
    assert provision_true(server, known_hosts, "node-alias") == "rc=0"
    assert "unknown SSH host key" in provision_true(server, known_hosts, "another-alias")
    other = paramiko.ECDSAKey.generate()
    known_hosts.write_text(f"node-alias {other.get_name()} {other.get_base64()}\n")
    assert "CHANGED" in provision_true(server, known_hosts, "node-alias")
    assert openssh_true(server, known_hosts, "node-alias", "-o", "StrictHostKeyChecking=yes") == 255
