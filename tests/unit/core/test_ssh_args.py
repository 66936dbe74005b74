"""ansible_ssh_args, _common_args and _extra_args: read as OpenSSH reads Ansible's ssh command line, mapped to
Fabric and paramiko (a ProxyJump is a chain of gateway Connections, host keys checked on each hop), and what
cannot be honoured refused with the host or group, the key and the option named. No remote host is contacted: the
connections are built, not opened (the host-key tests talk to an in-process paramiko server over a socketpair)."""

from __future__ import annotations

import socket
import textwrap
import threading
from dataclasses import replace
from pathlib import Path

import paramiko
import pytest

from provision.commands.run import connector
from provision.core import connection as connection_module
from provision.core.connection import (HostKeyPolicy, HostKeyRefused, SSHConnection, SSHOptions, Unreachable,
                                      known_host_keys)
from provision.core.sshargs import ARGS_KEYS, Hop, SshArgs, expand_command, host_args, refusals
from provision.inventory.load import load_inventory, local_inventory


def _every(base: Path) -> dict[str, Path]:
    """Every args key's relative paths start at `base`."""
    return dict.fromkeys(ARGS_KEYS, base)


def args_of(text: str, base: Path = Path("/inv"), **variables) -> SshArgs:
    return host_args({"ansible_ssh_common_args": text, **variables}, _every(base), None, None)[0]


def load(tmp_path: Path, text: str):
    path = tmp_path / "inventory.yaml"
    path.write_text(textwrap.dedent(text))
    return load_inventory(path)


def problems(tmp_path: Path, text: str) -> list[str]:
    """What stops a run that selects every host (how to reach a host is that host's problem alone)."""
    inventory = load(tmp_path, text)
    return [str(p).split("inventory.yaml: ", 1)[1] for p in inventory.refusals(list(inventory.hosts.values()))]


# --- reading: the forms Ansible users write ---

@pytest.mark.parametrize("text", [
    "-o ProxyJump=ops@bastion:2222", "-oProxyJump=ops@bastion:2222", "-o 'ProxyJump ops@bastion:2222'",
    '-o "proxyjump=ops@bastion:2222"', "-J ops@bastion:2222", "-Jops@bastion:2222",
])
def test_a_proxyjump_in_each_form_ssh_takes(text):
    assert args_of(text).proxy_jump == (Hop("bastion", "ops", 2222),)


def test_hops_in_order_with_ipv6_in_brackets():
    assert args_of("-J bastion,root@[2001:db8::7]:22,10.0.0.5").proxy_jump == (
        Hop("bastion"), Hop("2001:db8::7", "root", 22), Hop("10.0.0.5"))


def test_proxycommand_is_words_for_paramiko_with_openssh_tokens():
    args = args_of("""-o ProxyCommand="ssh -W %h:%p -q -i ~/keys/k -F '/etc/my config' ops@bastion" """)
    assert args.proxy_command == ("ssh", "-W", "%h:%p", "-q", "-i", str(Path.home() / "keys/k"), "-F",
                                  "/etc/my config", "ops@bastion")  # ~ as the shell would expand it
    assert expand_command(args.proxy_command, "10.0.0.5", 2222, "root", "gpu1")[:3] == ["ssh", "-W", "10.0.0.5:2222"]
    assert expand_command(("nc", "%%h", "%r@%n"), "h", 22, "root", "gpu1") == ["nc", "%h", "root@gpu1"]
    assert args_of("-o 'ProxyCommand exec nc %h %p'").proxy_command == ("nc", "%h", "%p")  # the shell's exec


def test_other_options_and_the_flags_short_for_them(tmp_path):
    (tmp_path / "key").write_text("")
    args = args_of("-AC -o StrictHostKeyChecking=accept-new -o UserKnownHostsFile='kh /etc/kh2' -i key "
                   "-o ConnectTimeout=30 -o ServerAliveInterval=15 -o IdentitiesOnly=yes "
                   "-o ControlMaster=auto -o ControlPersist=60s -o BatchMode=yes", tmp_path)
    assert args == SshArgs(identity_files=(str(tmp_path / "key"),), known_hosts=(str(tmp_path / "kh"), "/etc/kh2"),
                           strict_host_key_checking="accept-new", connect_timeout=30, server_alive_interval=15,
                           compression=True, forward_agent=True, identities_only=True)


def test_the_first_value_wins_keys_add_up_and_proxyjump_and_proxycommand_share_one_slot(tmp_path):
    for name in ("a", "b"):
        (tmp_path / name).write_text("")
    args = args_of("-o ConnectTimeout=5 -o ConnectTimeout=50 -i a -o IdentityFile=b "
                   "-o ProxyCommand='nc %h %p' -J bastion", tmp_path)
    assert (args.connect_timeout, args.identity_files) == (5, (str(tmp_path / "a"), str(tmp_path / "b")))
    assert (args.proxy_command, args.proxy_jump) == (("nc", "%h", "%p"), None)
    assert args_of("-o ProxyJump=none -J bastion").proxy_jump == ()  # none: no gateway, not even ssh_config's
    assert args_of("-o ProxyCommand=none").proxy_jump == ()


def test_user_and_port_in_the_order_ansible_writes_them_on_ssh_command_line():
    """ssh_args, then ansible_port/ansible_user (-o Port=, -o User=), then common and extra args: first wins."""
    both = {"ansible_ssh_args": "-o User=first", "ansible_ssh_common_args": "-o User=common -p 2200",
            "ansible_ssh_extra_args": "-o Port=2300"}
    assert host_args(both, _every(Path("/")), "ops", None)[1:] == ("first", 2200)
    assert host_args({"ansible_ssh_common_args": "-l common -p 2200"}, _every(Path("/")), "ops", 22)[1:] == ("ops", 22)
    assert host_args({"ansible_ssh_extra_args": "-l extra"}, _every(Path("/")), None, None)[1:] == ("extra", None)


def test_strict_host_key_checking_no_is_read_as_accept_new_never_as_off():
    assert args_of("-o StrictHostKeyChecking=no").strict_host_key_checking == "accept-new"
    assert args_of("-o StrictHostKeyChecking=off").strict_host_key_checking == "accept-new"
    assert args_of("-o StrictHostKeyChecking=ask").strict_host_key_checking == "yes"  # nobody is asked


def test_refusals_are_empty_for_what_is_honoured():
    assert refusals("-C -o ControlMaster=auto -o ControlPersist=60s", Path("/")) == []  # Ansible's default ssh_args
    assert refusals("-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR", Path("/")) == []


# --- the inventory: honoured on the host, refused where written ---

def test_the_inventory_carries_them_on_the_host(tmp_path):
    inv = load(tmp_path, """
        all:
          children:
            behind:
              hosts:
                gpu1: {ansible_host: 10.0.0.5}
                gpu2: {ansible_host: 10.0.0.6, ansible_ssh_common_args: -o ProxyCommand='nc %h %p'}
              vars:
                ansible_ssh_common_args: -o ProxyJump=ops@bastion -o User=admin -p 2222
    """)
    gpu1, gpu2 = inv.hosts["gpu1"], inv.hosts["gpu2"]
    assert (gpu1.ssh_args.proxy_jump, gpu1.user, gpu1.port) == ((Hop("bastion", "ops"),), "admin", 2222)
    # A host's own value replaces its group's, as any Ansible variable: not merged option by option.
    assert (gpu2.ssh_args.proxy_jump, gpu2.ssh_args.proxy_command, gpu2.user) == (None, ("nc", "%h", "%p"), None)


def test_what_cannot_be_honoured_is_refused_naming_the_host_or_group_the_key_and_the_option(tmp_path):
    lines = problems(tmp_path, """
        all:
          children:
            behind:
              hosts:
                a: {ansible_ssh_common_args: "-o ForwardX11=yes -o ServerAliveCountMax=3"}
                b: {ansible_ssh_extra_args: "-o ProxyCommand='nc %h %p | tee log'"}
                c: {ansible_ssh_args: "-X"}
                d: {ansible_ssh_common_args: "-J 'bastion;touch x' -o ProxyCommand='ssh $(id) %x' -i 'missing key'"}
                e: {ansible_ssh_common_args: "-o ProxyJump=-oProxyCommand=touch"}
                f: {ansible_ssh_common_args: ["-J", "bastion"]}
                g: {ansible_ssh_common_args: "bastion"}
                h: {ansible_ssh_common_args: "-o StrictHostKeyChecking=maybe -o BatchMode=no -p 99999"}
                i: {ansible_ssh_common_args: "-J bastion -o 'unclosed"}  # nothing of it is read
              vars:
                ansible_ssh_common_args: "-F ssh_config"
    """)
    expected = [
        ("host a: ansible_ssh_common_args: -o ForwardX11=yes: provision cannot honour ForwardX11", "ssh_config: FILE"),
        ("host a: ansible_ssh_common_args: -o ServerAliveCountMax=3: provision cannot honour", "-o ProxyJump, "),
        ("host b: ansible_ssh_extra_args: -o ProxyCommand=nc %h %p | tee log: needs a shell (|); provision runs a "
         "ProxyCommand without one", "put the pipeline in a script"),
        ("host c: ansible_ssh_args: -X: provision does not read this ssh flag", "and -J -A -C -i -l -p"),
        ("host d: ansible_ssh_common_args: -J bastion;touch x: hop 'bastion;touch x' is not [user@]host[:port]", ""),
        ("host d: ansible_ssh_common_args: -o ProxyCommand=ssh $(id) %x: needs a shell", ""),
        ("host d: ansible_ssh_common_args: -i missing key: 'missing key': no such file", ""),
        ("host e: ansible_ssh_common_args: -o ProxyJump=-oProxyCommand=touch: hop '-oProxyCommand=touch' is not", ""),
        ("host f: ansible_ssh_common_args: is list, not text", "one string"),
        ("host g: ansible_ssh_common_args: 'bastion' is not an option", "ansible_host"),
        ("host h: ansible_ssh_common_args: -o StrictHostKeyChecking=maybe: is yes, accept-new, no or off", ""),
        ("host h: ansible_ssh_common_args: -o BatchMode=no: is yes here", ""),
        ("host h: ansible_ssh_common_args: -p 99999: is a port, 1..65535", ""),
        ("host i: ansible_ssh_common_args: cannot be split into words: No closing quotation", ""),
        ("group behind: ansible_ssh_common_args: -F ssh_config: 'ssh_config' cannot be read: No such file", ""),
    ]
    for start, hint in expected:
        found = [line for line in lines if line.startswith(start) and hint in line]
        assert len(found) == 1, (start, lines)
    assert len(lines) == len(expected), lines


def test_the_connector_gives_a_host_its_args_and_an_identity_on_the_command_line_wins(tmp_path):
    host = replace(local_inventory().hosts["localhost"], connection="ssh", address="192.0.2.9",
                   ssh_args=SshArgs(identity_files=(str(tmp_path / "k"),), proxy_jump=(Hop("bastion"),)))
    plain = connector(False, SSHOptions())(host)
    assert (plain.fabric.connect_kwargs["key_filename"], plain.hops[0].host) == ([str(tmp_path / "k")], "bastion")
    cli_key = connector(False, SSHOptions(identity_file="/cli"))(host)
    assert (cli_key.fabric.connect_kwargs["key_filename"], cli_key.hops[0].host) == (["/cli"], "bastion")


# --- the connection: a gateway chain, host keys checked on every hop ---

def ssh_connection(args: str, tmp_path: Path, ssh_config: str = "", **options) -> SSHConnection:
    config = tmp_path / "ssh_config"
    config.write_text(textwrap.dedent(ssh_config))
    host_args_ = host_args({"ansible_ssh_common_args": args}, _every(tmp_path), "root", None)[0] if args else SshArgs()
    return SSHConnection("gpu1", "10.0.0.5", "root", None,
                         SSHOptions(ssh_config=str(config), args=host_args_, **options))


def policy(conn) -> HostKeyPolicy:
    found = conn.client._policy
    assert isinstance(found, HostKeyPolicy), found  # never Fabric's AutoAddPolicy
    return found


def test_a_proxyjump_is_a_chain_of_gateway_connections_each_checking_host_keys(tmp_path):
    key, key2 = paramiko.ECDSAKey.generate(), paramiko.ECDSAKey.generate()
    (tmp_path / "kh").write_text(f"[bastion]:2222 {key.get_name()} {key.get_base64()}\n"
                                 f"jump2 {key2.get_name()} {key2.get_base64()}\n")
    conn = ssh_connection("-o ProxyJump=ops@bastion:2222,jump2 -o UserKnownHostsFile=kh", tmp_path)
    last = conn.fabric.gateway
    local_user = conn.fabric.config.user  # a hop's user: its own, else ssh_config's, else ours (not the target's)
    assert (last.host, last.user, last.port) == ("jump2", local_user, 22)
    first = last.gateway
    assert (first.host, first.user, first.port, first.gateway) == ("bastion", "ops", 2222, None)
    assert conn.hops == [first, last]
    for hop in (conn.fabric, first, last):
        assert policy(hop).accept_new is False
        assert policy(hop).known_hosts == tmp_path / "kh"
    # the args' known_hosts: each hop knows its own keys, by the name paramiko looks it up by (with its port)
    assert first.client.get_host_keys().lookup("[bastion]:2222")["ecdsa-sha2-nistp256"] == key
    assert last.client.get_host_keys().lookup("jump2")["ecdsa-sha2-nistp256"] == key2
    assert first.client.get_host_keys().lookup("jump2") is None


def test_known_hosts_files_are_parsed_once_and_again_when_one_changes(tmp_path):
    keys = [paramiko.ECDSAKey.generate() for _ in range(2)]
    known = tmp_path / "known_hosts"
    known.write_text(f"node1 {keys[0].get_name()} {keys[0].get_base64()}\n")
    first = known_host_keys([str(known), str(tmp_path / "absent")])
    assert known_host_keys([str(known), str(tmp_path / "absent")]) is first
    with known.open("a") as fh:  # as --accept-new-host-keys records a key
        fh.write(f"node2 {keys[1].get_name()} {keys[1].get_base64()}\n")
    again = known_host_keys([str(known), str(tmp_path / "absent")])
    assert again is not first and again.lookup("node2")["ecdsa-sha2-nistp256"] == keys[1]


def test_the_args_proxyjump_beats_ssh_configs_and_none_removes_it(tmp_path):
    config = """\
        Host 10.0.0.5
          ProxyJump from-config
        Host from-config bastion
          User jumper
          UserKnownHostsFile {kh}
    """.format(kh=tmp_path / "config_kh")
    plain = ssh_connection("", tmp_path, config)
    assert [hop.host for hop in plain.hops] == ["from-config"]  # ssh_config's, secured as before
    assert policy(plain.hops[0]).known_hosts == tmp_path / "config_kh"
    ours = ssh_connection("-J bastion", tmp_path, config)
    assert [(hop.host, hop.user) for hop in ours.hops] == [("bastion", "jumper")]  # the hop's ssh_config: its user
    assert policy(ours.hops[0]).known_hosts == tmp_path / "config_kh"
    assert ssh_connection("-o ProxyJump=none", tmp_path, config).fabric.gateway is False
    command = ssh_connection("-o ProxyCommand='nc %h %p'", tmp_path, config)
    assert (command.fabric.gateway, command.hops, command.proxy_command) == (False, [], ("nc", "%h", "%p"))


def test_host_key_policy_from_the_args_beats_ssh_configs_and_the_command_line_beats_both(tmp_path):
    lax = "Host *\n  StrictHostKeyChecking no\n"
    assert policy(ssh_connection("", tmp_path, lax).fabric).accept_new is True
    assert policy(ssh_connection("-o StrictHostKeyChecking=yes", tmp_path, lax).fabric).accept_new is False
    strict = ssh_connection("-o StrictHostKeyChecking=yes -J bastion", tmp_path, accept_new_host_keys=True)
    assert [policy(c).accept_new for c in (strict.fabric, *strict.hops)] == [True, True]
    lax_args = ssh_connection("-o StrictHostKeyChecking=no -J bastion", tmp_path)
    assert [policy(c).accept_new for c in (lax_args.fabric, *lax_args.hops)] == [True, True]


def test_the_proxycommand_runs_with_the_hosts_real_name_port_and_user(tmp_path, monkeypatch):
    started = []

    def proxy_command(line):
        started.append(line)
        raise FileNotFoundError(2, "No such file or directory")

    monkeypatch.setattr(connection_module.paramiko, "ProxyCommand", proxy_command)
    conn = ssh_connection("-o ProxyCommand='ssh -W %h:%p %r@bastion'", tmp_path,
                          "Host 10.0.0.5\n  HostName gpu1.internal\n  Port 2222\n")
    with pytest.raises(Unreachable, match=r"cannot connect to gpu1.internal:2222 \(through its ProxyCommand\)"):
        conn.open()
    assert started == ["ssh -W gpu1.internal:2222 root@bastion"]


def test_other_options_reach_paramiko(tmp_path):
    (tmp_path / "k").write_text("")
    conn = ssh_connection("-C -A -i k -o IdentitiesOnly=yes -o ConnectTimeout=42", tmp_path, identity_file="/cli")
    assert conn.fabric.connect_kwargs == {"key_filename": ["/cli", str(tmp_path / "k")], "look_for_keys": False,
                                          "allow_agent": False, "compress": True}
    assert (conn.fabric.forward_agent, conn.fabric.connect_timeout) == (True, 42)


def test_a_hop_that_cannot_be_reached_is_named(tmp_path):
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))  # bound, not listening: refused at once
    port = closed.getsockname()[1]
    conn = ssh_connection(f"-J 127.0.0.1:{port}", tmp_path)
    with pytest.raises(Unreachable, match=rf"cannot connect to 127.0.0.1:{port} \(a ProxyJump hop to 10.0.0.5\): "
                                          "connection refused"):
        conn.open()
    closed.close()


# --- StrictHostKeyChecking=no against a real handshake: unknown keys recorded, a changed key refused ---

@pytest.fixture
def ssh_server():
    """An in-process SSH server on one end of a socketpair: (its host key, the client's end)."""
    key = paramiko.ECDSAKey.generate()
    ours, theirs = socket.socketpair()
    server = paramiko.Transport(theirs)
    server.add_server_key(key)
    thread = threading.Thread(target=lambda: _serve(server), daemon=True)
    thread.start()
    yield key, ours
    server.close()
    ours.close()


def _serve(server: paramiko.Transport) -> None:
    try:
        server.start_server(server=paramiko.ServerInterface())  # accepts no login: the key check comes first
    except (paramiko.SSHException, EOFError, OSError):
        pass


def connect_over(conn: SSHConnection, sock) -> None:
    conn.fabric.connect_kwargs["sock"] = sock
    conn.open()


def test_no_still_refuses_a_changed_key(tmp_path, ssh_server):
    _, sock = ssh_server
    other = paramiko.ECDSAKey.generate()
    (tmp_path / "kh").write_text(f"10.0.0.5 {other.get_name()} {other.get_base64()}\n")
    conn = ssh_connection("-o StrictHostKeyChecking=no -o UserKnownHostsFile=kh -o IdentitiesOnly=yes", tmp_path)
    with pytest.raises(HostKeyRefused, match="CHANGED"):
        connect_over(conn, sock)


def test_no_accepts_and_records_an_unknown_key(tmp_path, ssh_server):
    key, sock = ssh_server
    conn = ssh_connection("-o StrictHostKeyChecking=no -o UserKnownHostsFile=kh -o IdentitiesOnly=yes", tmp_path)
    with pytest.raises(Unreachable) as caught:  # past the host key, no login (no key given)
        connect_over(conn, sock)
    assert not isinstance(caught.value, HostKeyRefused), caught.value
    assert (tmp_path / "kh").read_text() == f"10.0.0.5 {key.get_name()} {key.get_base64()}\n"


def test_yes_refuses_an_unknown_key(tmp_path, ssh_server):
    _, sock = ssh_server
    conn = ssh_connection("-o StrictHostKeyChecking=yes -o UserKnownHostsFile=kh", tmp_path,
                          "Host *\n  StrictHostKeyChecking accept-new\n")
    with pytest.raises(HostKeyRefused, match="unknown SSH host key for 10.0.0.5"):
        connect_over(conn, sock)
