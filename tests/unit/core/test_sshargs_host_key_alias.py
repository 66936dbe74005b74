"""HostKeyAlias (issue 43): honoured as OpenSSH honours it, never refused. The alias is the name looked up in
known_hosts, and recorded there by --accept-new-host-keys, instead of the host's name or address: the alias alone,
no [host]:port, and never the host's own entry (OpenSSH sshconnect.c, get_hostfile_hostname_ipaddr). Given in
ansible_ssh_*args it beats ssh_config's, as ssh's -o does; a ProxyJump hop keeps its own. Real handshakes with an
in-process paramiko server over a socketpair, against known_hosts files written as ssh writes them.
tests/engine/test_ssh_host_key_alias.py checks the same against OpenSSH's own client and server."""

from __future__ import annotations

import socket
import threading
from pathlib import Path
from typing import Iterator

import paramiko
import pytest

from provision.core.connection import HostKeyPolicy, HostKeyRefused, SSHConnection, SSHOptions, Unreachable
from provision.core.sshargs import ARGS_KEYS, host_args, refusals

ALIAS = "gpu1-by-serial"


def args(text: str, extra: str = ""):
    variables = {"ansible_ssh_common_args": text, "ansible_ssh_extra_args": extra}
    return host_args(variables, dict.fromkeys(ARGS_KEYS, Path("/")), None, None)[0]


def line(name: str, key: paramiko.PKey) -> str:
    return f"{name} {key.get_name()} {key.get_base64()}\n"


def connection(tmp_path: Path, ssh_args: str, config_text: str = "", port: int = 2222, **options) -> SSHConnection:
    """gpu1 at 10.0.0.5 on `port`, its known_hosts tmp_path/kh (the args' UserKnownHostsFile)."""
    config = tmp_path / "ssh_config"
    config.write_text(config_text)
    return SSHConnection("gpu1", "10.0.0.5", "root", port, SSHOptions(
        ssh_config=str(config), **options,
        args=args(f"{ssh_args} -o UserKnownHostsFile={tmp_path / 'kh'} -o IdentitiesOnly=yes")))


@pytest.fixture
def server() -> Iterator[tuple[paramiko.PKey, socket.socket]]:
    """An SSH server's end of a socketpair, serving its host key (it lets nobody log in): (the key, our end)."""
    key = paramiko.ECDSAKey.generate()
    ours, theirs = socket.socketpair()
    transport = paramiko.Transport(theirs)
    transport.add_server_key(key)
    threading.Thread(target=_handshake, args=(transport,), daemon=True).start()
    yield key, ours
    transport.close()
    ours.close()


def _handshake(transport: paramiko.Transport) -> None:
    try:
        transport.start_server(server=paramiko.ServerInterface())
    except (paramiko.SSHException, EOFError, OSError):  # the client hung up (a refused key)
        pass


def open_over(conn: SSHConnection, sock: socket.socket) -> Exception:
    """Open the connection over the server's socket: what stopped it (no key is offered, so something does)."""
    conn.fabric.connect_kwargs["sock"] = sock
    with pytest.raises(Unreachable) as caught:
        conn.open()
    return caught.value


# --- reading ---

def test_the_alias_is_read_not_refused_and_the_first_one_given_wins():
    assert refusals(f"-o HostKeyAlias={ALIAS}", Path("/")) == []
    assert args(f"-o HostKeyAlias={ALIAS}", "-o HostKeyAlias=later").host_key_alias == ALIAS
    assert args("-o 'hostkeyalias [gw]:2222'").host_key_alias == "[gw]:2222"  # a name with its port, as written


@pytest.mark.parametrize("value, why", [
    ("'a b'", "takes one value"), ("a,b", "is one name"), ("'*.cluster'", "is one name"),
    ("'|1|salt|hash'", "is one name"), ("@cert-authority", "is one name"),
])
def test_an_alias_that_known_hosts_would_read_as_something_else_is_refused(value, why):
    refused = refusals(f"-o HostKeyAlias={value}", Path("/"))
    assert len(refused) == 1 and why in str(refused[0]), refused


# --- looking up and recording ---

def test_a_key_known_under_the_alias_lets_the_host_in(tmp_path, server):
    key, sock = server
    (tmp_path / "kh").write_text(line(ALIAS, key))  # no [10.0.0.5]:2222 entry at all
    stopped = open_over(connection(tmp_path, f"-o HostKeyAlias={ALIAS}"), sock)
    assert not isinstance(stopped, HostKeyRefused) and "authentication" in str(stopped), stopped


def test_a_key_known_only_under_the_hosts_own_name_is_unknown(tmp_path, server):
    key, sock = server
    (tmp_path / "kh").write_text(line("[10.0.0.5]:2222", key))
    stopped = open_over(connection(tmp_path, f"-o HostKeyAlias={ALIAS}"), sock)
    assert isinstance(stopped, HostKeyRefused), stopped
    assert f"unknown SSH host key for [10.0.0.5]:2222 (known_hosts name {ALIAS}" in str(stopped)
    assert f"as {ALIAS} (ssh-keyscan)" in str(stopped)
    assert (tmp_path / "kh").read_text() == line("[10.0.0.5]:2222", key)  # nothing recorded


def test_a_changed_key_under_the_alias_is_refused_naming_the_alias(tmp_path, server):
    _, sock = server
    (tmp_path / "kh").write_text(line(ALIAS, paramiko.ECDSAKey.generate()))
    stopped = open_over(connection(tmp_path, f"-o HostKeyAlias={ALIAS}", port=22), sock)
    assert isinstance(stopped, HostKeyRefused) and "CHANGED" in str(stopped), stopped
    assert str(stopped).endswith(f"ssh-keygen -R {ALIAS}")


def test_accept_new_records_the_key_under_the_alias_alone(tmp_path, server):
    key, sock = server
    stopped = open_over(connection(tmp_path, f"-o HostKeyAlias={ALIAS}", accept_new_host_keys=True), sock)
    assert not isinstance(stopped, HostKeyRefused), stopped
    assert (tmp_path / "kh").read_text() == line(ALIAS, key)  # as ssh -o HostKeyAlias records it: no port


# --- where the alias comes from ---

def test_ssh_configs_alias_is_honoured_and_the_args_beat_it(tmp_path):
    config = "Host 10.0.0.5\n  HostKeyAlias from-config\nHost bastion\n  HostKeyAlias bastion-alias\n"
    assert connection(tmp_path, "", config).host_key_alias == "from-config"
    ours = connection(tmp_path, f"-o HostKeyAlias={ALIAS} -J bastion", config)
    assert ours.host_key_alias == ALIAS
    hop_policy = ours.hops[0].client._policy
    assert isinstance(hop_policy, HostKeyPolicy) and hop_policy.alias == "bastion-alias"  # its own, not the target's
    assert connection(tmp_path, "").host_key_alias is None
