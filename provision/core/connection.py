"""Connections to hosts: SSH through Fabric, or the local machine.

Every command is an argument list, quoted exactly once here (shlex.join) at
the edge. Setters run through sudo when the login user is not root: with
NOPASSWD, or with one password asked once per run and fed on stdin (never
on a command line, never logged).
"""

from __future__ import annotations

import errno
import logging
import os
import select
import shlex
import socket
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable

import paramiko

from provision.core.errors import ProvisionError
from provision.core.sshargs import Hop, SshArgs, expand_command

if TYPE_CHECKING:  # types only: Fabric has no type information (Any to mypy), and is imported where it is used
    from fabric import Config as FabricConfig
    from fabric import Connection as FabricConnection

# paramiko logs a failed handshake ("Exception (client): Error reading SSH protocol banner") from its own
# thread; with no handler configured, Python prints it on stderr, between our lines. The same error
# reaches us as an exception and is reported per host: its log line is noise.
logging.getLogger("paramiko").addHandler(logging.NullHandler())


class Unreachable(ProvisionError):
    """The host could not be reached or refused us (network, auth, host key)."""


class HostKeyRefused(Unreachable):
    pass


class Lost(Unreachable):
    """The connection went in the middle of a command: stdout holds what the command printed before (a batch's
    finished changes are known by it)."""

    def __init__(self, message: str, stdout: str = ""):
        super().__init__(message)
        self.stdout = stdout


@dataclass
class CommandResult:
    argv: list[str]
    rc: int
    stdout: str
    stderr: str = ""
    timed_out: bool = False  # stopped at its deadline (rc 124): what it would have printed next is unknown

    @property
    def ok(self) -> bool:
        return self.rc == 0

    @property
    def output(self) -> str:
        """stdout and stderr together, as a user would see them."""
        return "\n".join(part for part in (self.stdout.strip(), self.stderr.strip()) if part)


@dataclass
class Privilege:
    """How this host runs privileged commands; learnt from the facts batch."""

    is_root: bool = True
    sudo_nopasswd: bool = False
    sudo_password: str | None = field(default=None, repr=False)
    become: bool = True  # false (inventory `become: false`): privileged commands run as the login user

    def wrap(self, argv: list[str], stdin: str | None) -> tuple[list[str], str | None]:
        if self.is_root or not self.become:
            return argv, stdin
        if self.sudo_nopasswd:
            return ["sudo", "-n", "--", *argv], stdin
        if self.sudo_password is not None:
            # -k: always ask, so the password line is consumed even if a
            # cached credential exists; -p '': no prompt text in our output.
            return ["sudo", "-k", "-S", "-p", "", "--", *argv], self.sudo_password + "\n" + (stdin or "")
        raise ProvisionError(
            "this needs root and sudo asks for a password: run as root, allow NOPASSWD, "
            "or pass --ask-sudo-pass (-K) to be asked once for all hosts"
        )


class Connection:
    """What the engine needs from a host: run an argv, optionally privileged, with stdin."""

    name: str
    commands_run: int = 0

    def __init__(self, name: str):
        self.name = name
        self.privilege = Privilege()
        self.commands_run = 0

    def open(self) -> None:
        """Connect; raise Unreachable with a clear reason."""

    def close(self) -> None:
        pass

    def run(self, argv: list[str], *, sudo: bool = False, stdin: str | None = None,
            timeout: float | None = None) -> CommandResult:
        shown = list(argv)
        if sudo:
            argv, stdin = self.privilege.wrap(argv, stdin)
        self.commands_run += 1
        result = self._run(argv, stdin, timeout)
        result.argv = shown  # report what we meant, without sudo plumbing
        return result

    def run_script(self, script: str, timeout: float | None = None) -> CommandResult:
        """Run a POSIX sh script we wrote ourselves (the facts batch); never privileged."""
        return self.run(["sh", "-c", script], timeout=timeout)

    def _run(self, argv: list[str], stdin: str | None, timeout: float | None) -> CommandResult:
        raise NotImplementedError


class LocalConnection(Connection):
    """This machine, no SSH: the same tasks, run with subprocess."""

    def _run(self, argv: list[str], stdin: str | None, timeout: float | None) -> CommandResult:
        try:
            proc = subprocess.run(
                argv, input=stdin, capture_output=True, text=True, timeout=timeout,
                stdin=None if stdin is not None else subprocess.DEVNULL,
            )
        except FileNotFoundError as exc:
            return CommandResult(argv, 127, "", f"{argv[0]}: command not found ({exc.strerror})")
        except subprocess.TimeoutExpired as exc:
            said = exc.stdout.decode("utf-8", "replace") if isinstance(exc.stdout, bytes) else exc.stdout or ""
            return CommandResult(argv, 124, said, f"timed out after {timeout}s", timed_out=True)
        return CommandResult(argv, proc.returncode, proc.stdout, proc.stderr)


def network_words(exc: BaseException, host: str, port: int | None) -> str:
    """Why a connection failed and what to check, instead of the library's words ("[Errno None] Unable to connect
    to port 22 on 192.0.2.10" says neither)."""
    port = port or 22
    tried = getattr(exc, "errors", None)  # paramiko's NoValidConnectionsError: one OSError per address tried
    if tried:
        exc = next(iter(tried.values()))
    text = str(exc)
    if isinstance(exc, socket.gaierror):
        return f"the name {host} does not resolve: check its ansible_host, DNS or /etc/hosts"
    if isinstance(exc, (socket.timeout, TimeoutError)) or getattr(exc, "errno", None) == errno.ETIMEDOUT:
        return (f"no answer on port {port} within the connect timeout: is the host up, and is a firewall "
                f"dropping port {port}? (--connect-timeout)")
    said = {
        errno.ECONNREFUSED: f"connection refused on port {port}: is sshd running there, and on that port "
                            "(ansible_port)?",
        errno.EHOSTUNREACH: "no route to the host: is it powered on and on this network?",
        errno.ENETUNREACH: "the network is unreachable from this machine: check its routes and interfaces",
        errno.ECONNRESET: "the connection was reset: sshd dropped it (restarting, MaxStartups, a firewall?)",
    }.get(getattr(exc, "errno", None) or 0)
    if said:
        return said
    if isinstance(exc, paramiko.ChannelException):  # a ProxyJump gateway's answer to "connect me there"
        return (f"the gateway could not connect to it ({exc.text}): is it up, and is port {port} open to the "
                "gateway?")
    if "Connection reset" in text or "banner" in text:
        return f"SSH did not answer on port {port} (sshd gone, restarting or overloaded?): {text}"
    if isinstance(exc, EOFError) or "closed" in text.lower():
        return "the connection was closed (the host rebooted, or sshd or the network went away?)"
    return text


# The files' identity (path, inode, size, mtime), and their keys.
_known_hosts: tuple[tuple[tuple[str, int, int, int], ...], paramiko.HostKeys] | None = None
_KNOWN_HOSTS_LOCK = threading.Lock()


def known_host_keys(paths: list[str]) -> paramiko.HostKeys:
    """These known_hosts files, in order, parsed once per run and kept while none changes (a file identified by
    inode, size and mtime: a key recorded by --accept-new-host-keys is read). Loading them into every
    connection parsed every key again for every host: 3.8 ms per host with 32 entries, hosts x entries in all."""
    identity = []
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            continue
        identity.append((path, st.st_ino, st.st_size, st.st_mtime_ns))
    global _known_hosts
    with _KNOWN_HOSTS_LOCK:
        if _known_hosts is None or _known_hosts[0] != tuple(identity):
            keys = paramiko.HostKeys()
            for path, *_ in identity:
                keys.load(path)
            _known_hosts = (tuple(identity), keys)
        return _known_hosts[1]


class HostKeyPolicy(paramiko.MissingHostKeyPolicy):
    """Refuse unknown host keys unless the user opted in (like StrictHostKeyChecking=accept-new).

    A *changed* key is always refused by paramiko itself (BadHostKeyException). `alias`: the HostKeyAlias, the
    name the key is recorded under in known_hosts instead of the host's (paramiko still asks by the host's name).
    """

    def __init__(self, accept_new: bool, known_hosts: Path, alias: str | None = None):
        self.accept_new = accept_new
        self.known_hosts = known_hosts
        self.alias = alias

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        fingerprint = key.fingerprint  # "SHA256:..." as ssh-keygen -l prints it
        recorded = self.alias or hostname
        if not self.accept_new:
            raise HostKeyRefused(
                f"unknown SSH host key for {hostname}{_as_alias(self.alias)} ({key.get_name()} {fingerprint}); "
                f"verify it and add it to {self.known_hosts} as {recorded} (ssh-keyscan), "
                "or rerun with --accept-new-host-keys to trust and record it"
            )
        client.get_host_keys().add(hostname, key.get_name(), key)
        self.known_hosts.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        with open(self.known_hosts, "a") as fh:
            fh.write(f"{recorded} {key.get_name()} {key.get_base64()}\n")


def _as_alias(alias: str | None) -> str:
    return f" (known_hosts name {alias}: its HostKeyAlias)" if alias else ""


@dataclass
class SSHOptions:
    ssh_config: str | None = None  # an ssh_config file instead of ~/.ssh/config (else the args' -F, if any)
    connect_timeout: float = 10.0
    accept_new_host_keys: bool = False
    identity_file: str | None = None
    known_hosts: str | None = None  # default: UserKnownHostsFile from ssh_config, else ~/.ssh/known_hosts
    args: SshArgs = field(default_factory=SshArgs)  # the host's ansible_ssh_*args: beat ssh_config, as in OpenSSH


class SSHConnection(Connection):
    """A Fabric Connection with host keys checked and commands quoted once."""

    def __init__(self, name: str, address: str, user: str | None, port: int | None, options: SSHOptions):
        super().__init__(name)
        import fabric  # imported here: local-only runs do not pay for it

        args = options.args
        config = _fabric_config(options.ssh_config or args.config_file)
        timeout = int(args.connect_timeout or options.connect_timeout)  # the inventory's, for its host
        self.fabric = fabric.Connection(
            address, user=user, port=port, config=config, connect_timeout=timeout,
            connect_kwargs=_connect_kwargs(options), forward_agent=args.forward_agent,
            gateway=False if args.gateway_given else None,  # the args' gateway (or none), never ssh_config's then
        )
        if args.proxy_jump:
            self.fabric.gateway = _jump_chain(fabric.Connection, args.proxy_jump, config, timeout)
        self.hops = _hops(self.fabric)
        # ProxyJump hops (the args' or ssh_config's): the same policy; the args' HostKeyAlias names the target only
        self.host_key_alias = self._secure(self.fabric, options, args.host_key_alias)
        for hop in self.hops:
            self._secure(hop, options, None)
        self.proxy_command = args.proxy_command
        self.keepalive = args.server_alive_interval
        self.liveness: Liveness | None = None  # once open

    @staticmethod
    def _secure(conn: FabricConnection, options: SSHOptions, alias: str | None) -> str | None:
        """Fabric auto-adds unknown host keys and loads no known_hosts: undo both. The args' UserKnownHostsFile,
        StrictHostKeyChecking and HostKeyAlias (`alias`) beat ssh_config's, as on ssh's command line;
        --accept-new-host-keys beats both. Returns the HostKeyAlias used (None: the host's own name)."""
        files = [options.known_hosts] if options.known_hosts else []
        files += list(options.args.known_hosts) or conn.ssh_config.get("userknownhostsfile", "").split()
        files = [os.path.expanduser(f) for f in files] or [os.path.expanduser("~/.ssh/known_hosts")]
        # The name paramiko looks the host up by when it connects (with its port); with a HostKeyAlias, OpenSSH
        # looks up the alias alone, no port added, and never the host's own name: its keys are given under `name`.
        name = conn.host if int(conn.port) == 22 else f"[{conn.host}]:{conn.port}"
        alias = alias or conn.ssh_config.get("hostkeyalias")
        known = known_host_keys(["/etc/ssh/ssh_known_hosts", *files]).lookup(alias or name)
        for keytype, key in (known or {}).items():
            conn.client.get_host_keys().add(name, keytype, key)
        # The user's own ssh_config may opt in too, as OpenSSH would honour it. No and off read as accept-new:
        # a changed key is always refused (paramiko's BadHostKeyException); checking is never turned off.
        strict = options.args.strict_host_key_checking or conn.ssh_config.get("stricthostkeychecking", "")
        opted_in = strict.lower() in ("accept-new", "no", "off")
        policy = HostKeyPolicy(options.accept_new_host_keys or opted_in, Path(files[0]), alias)
        conn.client.set_missing_host_key_policy(policy)
        return alias

    def open(self) -> None:
        try:
            if self.proxy_command:  # at open: paramiko's ProxyCommand starts its process when made
                self.fabric.connect_kwargs["sock"] = self._proxy_command()
            self.fabric.open()
        except HostKeyRefused:
            raise
        except paramiko.BadHostKeyException as exc:
            raise HostKeyRefused(
                f"SSH host key for {exc.hostname}{_as_alias(self.host_key_alias)} CHANGED (got "
                f"{exc.key.fingerprint}, expected {exc.expected_key.fingerprint}); if the machine was reinstalled, "
                f"remove the old key with ssh-keygen -R {self.host_key_alias or exc.hostname}"
            ) from None
        except paramiko.AuthenticationException as exc:
            at = self._failed_at()
            raise Unreachable(f"SSH authentication failed as {at.user}{self._via(at)}: {exc}") from None
        except (OSError, paramiko.SSHException, EOFError) as exc:
            at = self._failed_at()
            if "No authentication methods available" in str(exc):  # paramiko had no key to offer, nor an agent
                raise Unreachable(f"SSH authentication failed as {at.user}{self._via(at)}: no key to offer (give "
                                  "one: ansible_ssh_private_key_file, --identity, or IdentityFile in ssh_config)"
                                  ) from None
            raise Unreachable(f"cannot connect to {at.host}:{at.port}{self._via(at)}: "
                              f"{network_words(exc, at.host, at.port)}") from None
        interval = self.keepalive or KEEPALIVE_S  # ServerAliveInterval, with OpenSSH's ServerAliveCountMax of 3
        self.liveness = Liveness(self.fabric.transport, interval, max(SILENT_AFTER_S, 3 * interval))

    def _proxy_command(self) -> paramiko.ProxyCommand:
        """The args' ProxyCommand, tokens replaced, run by paramiko without a shell (words joined for its split).
        Made once: should Fabric reopen a lost connection, it fails on the spent command, never goes direct."""
        words = expand_command(self.proxy_command or (), self.fabric.host, self.fabric.port, self.fabric.user,
                               self.fabric.original_host)
        return paramiko.ProxyCommand(shlex.join(words))

    def _failed_at(self) -> FabricConnection:
        """Where opening failed: the first ProxyJump hop not connected, else the host itself."""
        return next((hop for hop in self.hops if not hop.is_connected), self.fabric)

    def _via(self, at: FabricConnection) -> str:
        if at is not self.fabric:
            return f" (a ProxyJump hop to {self.fabric.host})"
        if self.hops:
            return f" (through {self.hops[-1].host})"
        return " (through its ProxyCommand)" if self.proxy_command else ""

    def close(self) -> None:
        if self.liveness is not None:
            self.liveness.stop()
        for conn in (self.fabric, *reversed(self.hops)):  # Fabric closes no gateway: the hops' connections too
            conn.close()

    def _run(self, argv: list[str], stdin: str | None, timeout: float | None) -> CommandResult:
        """One channel of the connection (run_on_channel). A host that stopped answering (Liveness) or a connection
        that closed mid-command raises Lost, with what the command printed until then."""
        try:
            out, err, rc, timed_out = run_on_channel(self.fabric.client.get_transport(), shlex.join(argv), stdin,
                                                     timeout, self.fabric.forward_agent)
        except (OSError, paramiko.SSHException, EOFError, AttributeError) as exc:
            raise Lost(f"lost the connection to {self.name}: {self._why_lost(exc)}") from None
        said = out.decode("utf-8", "replace")
        if timed_out:
            return CommandResult(argv, 124, said, f"timed out after {timeout}s", timed_out=True)
        if rc == -1:  # the channel closed without an exit status: the host went away mid-command
            why = self._why_lost(None) or "the command ended without an exit status"
            raise Lost(f"lost the connection to {self.name}: {why}", said)
        return CommandResult(argv, rc, said, err.decode("utf-8", "replace"))

    def _why_lost(self, exc: BaseException | None) -> str:
        """The host's silence when Liveness ended the connection (the library's words then say only "closed"),
        else what the error says."""
        if self.liveness is not None and self.liveness.lost:
            return self.liveness.lost
        return "" if exc is None else network_words(exc, self.fabric.host, self.fabric.port)


def run_on_channel(transport: paramiko.Transport | None, command: str, stdin: str | None, timeout: float | None,
                   forward_agent: bool = False) -> tuple[bytes, bytes, int, bool]:
    """The command on a new channel of the transport: stdin sent then EOF, stdout and stderr read as they come:
    (stdout, stderr, exit status: -1 when the channel closed without one, timed out). Not Fabric's run: Invoke's
    runner polls (its reader and waiter threads wake every 10 ms), which cost the control machine CPU for as long
    as a host's command runs (32 hosts waiting 10 s: 3 s of CPU); and its in_stream never closes the remote stdin,
    so `cat > file` would wait on it. No wait here outlasts a silent host: Liveness closes its transport, which
    ends each of them (opening the channel, sending stdin, reading), and what had arrived is still read."""
    if transport is None:
        raise EOFError("not connected")
    deadline = None if timeout is None else time.monotonic() + timeout
    channel = transport.open_session()
    agent = paramiko.agent.AgentRequestHandler(channel) if forward_agent else None
    try:
        channel.exec_command(command)
        if stdin is not None:
            channel.sendall(stdin.encode())
        channel.shutdown_write()
        out, err, timed_out = _read_until_exit(channel, deadline)
        return out, err, 124 if timed_out else channel.recv_exit_status(), timed_out
    finally:
        channel.close()
        if agent:
            agent.close()


def _read_until_exit(channel: paramiko.Channel, deadline: float | None) -> tuple[bytes, bytes, bool]:
    """stdout and stderr as they arrive (select on the channel: no polling), until both the end of the output
    (EOF) and the exit status are in, the channel closes, or the deadline: (stdout, stderr, timed out). The
    exit status alone is not the end: OpenSSH sends it when the command exits, and what the command wrote just
    before may still be on its way. A closed channel's buffered output is read before the end is said."""
    out, err = bytearray(), bytearray()
    while True:
        if channel.recv_ready():
            out += channel.recv(65536)
        elif channel.recv_stderr_ready():
            err += channel.recv_stderr(65536)
        elif channel.closed or (channel.eof_received and channel.exit_status_ready()):
            return bytes(out), bytes(err), False
        else:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return bytes(out), bytes(err), True
            if channel.eof_received:  # the output is all in; the exit status still to come: nothing to select on
                channel.status_event.wait(remaining)
            else:
                select.select([channel], [], [], remaining)


# A host that stops answering without closing the connection (its link or switch port dead, its kernel panicked:
# no FIN, no RST) leaves TCP retransmitting for some 15 minutes, and a command waiting for its deadline (a batch
# of changes: 5 minutes and more). So after KEEPALIVE_S seconds in which nothing was sent, the host is asked for
# an answer, as OpenSSH's ServerAliveInterval does it (a global request that wants a reply: paramiko's own
# keepalive wants none, so it proves nothing); a host with an ask unanswered for SILENT_AFTER_S is lost. sshd
# answers from its own process, with no fork and no disk: a loaded host answers within a second or two, and four
# asks in a row unanswered are not load. A command that runs long on a host that answers is alive: only its own
# deadline (the caller's timeout, for what it does) ends it.
KEEPALIVE_S = 5.0
SILENT_AFTER_S = 20.0


class Liveness:
    """Whether one transport's host still answers. The asks go from paramiko's own thread, when the connection
    has sent nothing for the interval (Packetizer.set_keepalive); a watchdog thread, waking once an interval,
    judges: an ask unanswered for the limit closes the transport, which ends every wait on it at once (lost says
    why). The watchdog, not the asking thread, closes it: a dead link with a full send buffer blocks the sender."""

    ASK = "keepalive@openssh.com"

    def __init__(self, transport: Any, interval: float, limit: float):  # a paramiko Transport: its handler table
        self.transport = transport  # and its user-message sender are not in paramiko's annotations
        self.interval, self.limit = interval, limit
        self.asked: float | None = None  # when the oldest unanswered ask went (None: all answered)
        self.lost: str | None = None
        self._done = threading.Event()
        table = self.transport._handler_table  # per instance, "for easier per-instance manipulation" (paramiko)
        for kind in (paramiko.common.MSG_REQUEST_SUCCESS, paramiko.common.MSG_REQUEST_FAILURE):
            table[kind] = self._answered(table[kind])
        transport.packetizer.set_keepalive(interval, self.ask)
        threading.Thread(target=self._watch, daemon=True, name="provision-liveness").start()

    def _answered(self, handler: Callable[[paramiko.Message], None]) -> Callable[[paramiko.Message], None]:
        def answered(message: paramiko.Message) -> None:  # any reply: OpenSSH refuses the ask (REQUEST_FAILURE), which is an answer
            self.asked = None
            handler(message)
        return answered

    def ask(self) -> None:
        if not self.transport.clear_to_send.is_set():  # mid key exchange: a message now would wait for its end
            return
        message = paramiko.Message()
        message.add_byte(paramiko.common.cMSG_GLOBAL_REQUEST)
        message.add_string(self.ASK)
        message.add_boolean(True)  # want a reply
        if self.asked is None:
            self.asked = time.monotonic()
        self.transport._send_user_message(message)

    def silent_for(self) -> float:
        return 0.0 if self.asked is None else time.monotonic() - self.asked

    def _watch(self) -> None:
        while not self._done.wait(min(self.interval, self.limit / 4)):
            if not self.transport.is_active():  # closed, or lost with a FIN or RST: that says why, not silence
                return
            if self.silent_for() >= self.limit:
                self.lost = (f"it stopped answering: no reply to a keepalive for {self.limit:.0f} s, and no FIN or "
                             "RST (the host is down or hung, or its network link or switch port is): check it from "
                             "its console or BMC")
                self.transport.close()
                return

    def stop(self) -> None:
        self._done.set()


def _fabric_config(ssh_config: str | None) -> FabricConfig:
    """Fabric's configuration with this ssh_config file alone (as ssh -F: neither ~/.ssh/config nor the system's);
    "" (-F none): no ssh_config at all; None: the user's and the system's, as ssh reads them."""
    import fabric

    if ssh_config:
        return fabric.Config(runtime_ssh_path=ssh_config)
    return fabric.Config(overrides={"load_ssh_configs": False}) if ssh_config == "" else fabric.Config()


def _connect_kwargs(options: SSHOptions) -> dict[str, Any]:
    """paramiko's connect() arguments: the key files (--identity or the inventory's, then the args' IdentityFile),
    IdentitiesOnly (those keys only: no agent, no ~/.ssh/id_*), Compression."""
    keys = [options.identity_file] if options.identity_file else []
    keys += options.args.identity_files
    kwargs: dict[str, Any] = {"key_filename": keys} if keys else {}
    if options.args.identities_only:
        kwargs.update(look_for_keys=False, allow_agent=False)
    if options.args.compression:
        kwargs["compress"] = True
    return kwargs


def _jump_chain(connection: type[FabricConnection], hops: Iterable[Hop], config: FabricConfig,
                timeout: int) -> FabricConnection | None:
    """ProxyJump a,b: a Fabric Connection per hop, each reached through the one before (the first as its ssh_config
    says). As with OpenSSH's -J, a hop takes its user and keys from ssh_config, not from the target's options;
    its host key is checked with the target's policy (_secure: the args' known_hosts and StrictHostKeyChecking)."""
    gateway = None
    for hop in hops:
        gateway = connection(hop.host, user=hop.user, port=hop.port, config=config.clone(), connect_timeout=timeout,
                             gateway=gateway)
    return gateway


def _hops(conn: FabricConnection) -> list[FabricConnection]:
    """A connection's ProxyJump hops, the first (outermost) first."""
    import fabric

    hops: list[FabricConnection] = []
    while isinstance(conn.gateway, fabric.Connection):  # not a ProxyCommand string, False or None
        conn = conn.gateway
        hops.insert(0, conn)
    return hops
