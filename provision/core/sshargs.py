"""ansible_ssh_args, ansible_ssh_common_args and ansible_ssh_extra_args: OpenSSH command-line arguments, read as
OpenSSH reads Ansible's ssh command line, and mapped to what Fabric and paramiko do. What they cannot do is
refused, never dropped: the host would be reached another way than the inventory says (directly, not through
its bastion).

Read: `-o Option=value` (also `-oOption=value`, `-o "Option value"`), `-J hops`, the flags short for an
option (-A -C -i -l -p) and `-F file`. As in OpenSSH the first value of an option wins (IdentityFile adds a
key), the last -F wins, and ProxyJump and ProxyCommand share one slot. Ansible writes ansible_ssh_args first, then
ansible_port and ansible_user (as -o Port=, -o User=), then ansible_ssh_common_args and ansible_ssh_extra_args:
host_args() follows that order. ansible.cfg's [ssh_connection] ssh_args is the same Ansible option as ansible_ssh_args (a host's
ansible_ssh_args replaces it; ansiblecfg.py reads it). A ProxyCommand runs as paramiko runs it: split into words,
no shell. ansible_ssh_executable names the program Ansible would run: provision runs none (executable_refusals).
"""

from __future__ import annotations

import functools
import io
import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

from provision.core.errors import Problem
from provision.core.localfiles import not_a_file

ARGS_KEYS = ("ansible_ssh_args", "ansible_ssh_common_args", "ansible_ssh_extra_args")  # Ansible's order

# Host names and addresses, never read as an ssh option nor a shell word. A single ":" would be read as host:port
# (Fabric's shorthand): only IPv6 addresses (2+ colons) have them.
ADDRESS_PATTERN = r"^(?:[A-Za-z0-9_.][A-Za-z0-9_.-]*|[0-9A-Fa-f.]*:[0-9A-Fa-f.]*:[0-9A-Fa-f:.]*(?:%[A-Za-z0-9_.-]+)?)$"
USER_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.-]*\$?$"
NAME_LENGTHS = "a host name of at most 253 characters, 63 between dots (RFC 1035)"
HOP = re.compile(r"(?:(?P<user>[^@]+)@)?(?:\[(?P<v6>[^\]]+)\]|(?P<host>[^:]+))(?::(?P<port>[0-9]+))?")

SHORT_FLAGS = {"A": ("ForwardAgent", "yes"), "C": ("Compression", "yes")}  # flags without a value
# flags taking one; -F is no -o option: its name here, "-F", cannot be written as one (_pairs reads letters only)
VALUE_FLAGS = {"J": "ProxyJump", "i": "IdentityFile", "l": "User", "p": "Port", "F": "-F"}
SHELL_OPERATORS = set("|;&<>()")
TOKENS = re.compile(r"%(.?)", re.S)
COMMAND_TOKENS = "hnpr%"  # %h host, %n the name as given, %p port, %r remote user, %% a percent sign
SSH_CONFIG_BYTES = 64 << 20  # a generated ssh_config for 100,000 hosts is a few MiB
SSH_CONFIG_HINT = "name an OpenSSH client configuration file (man ssh_config: Host blocks of 'Keyword value' lines)"
EXECUTABLE_KEY = "ansible_ssh_executable"
# OpenSSH's ssh, as Ansible's default (ssh, found on PATH) or at the places distributions install it. provision
# speaks SSH itself (paramiko), so naming the stock client changes nothing; any other program may do more.
PLAIN_SSH = ("ssh", "/usr/bin/ssh", "/bin/ssh", "/usr/local/bin/ssh")
# A name written into known_hosts as it is (OpenSSH: no port added): no space or comma (a line's name list), no
# pattern character (it would match other hosts), not the marker of a hashed name (|) or of @cert-authority.
ALIAS_PATTERN = r"^[^\s,*?!|@#][^\s,*?!]*$"


class Refused(ValueError):
    """One argument provision cannot honour: what is wrong, and what to do instead."""

    def __init__(self, message: str, hint: str = ""):
        super().__init__(message)
        self.hint = hint


@dataclass(frozen=True)
class Hop:
    """One ProxyJump hop: [user@]host[:port]."""

    host: str
    user: str | None = None
    port: int | None = None


@dataclass(frozen=True)
class SshArgs:
    """What a host's ssh arguments ask for, in paramiko's terms (None: not given; ssh_config and defaults decide).
    User and Port are the Host's own (build.py); the rest goes to SSHConnection."""

    proxy_jump: tuple[Hop, ...] | None = None  # () = "none": no gateway, not even ssh_config's
    proxy_command: tuple[str, ...] | None = None  # words, %h %n %p %r %% still in them (expand_command)
    identity_files: tuple[str, ...] = ()  # absolute (written relative to the inventory)
    known_hosts: tuple[str, ...] = ()  # UserKnownHostsFile: absolute
    strict_host_key_checking: str | None = None  # yes | accept-new (no and off read as accept-new; ask as yes)
    connect_timeout: int | None = None
    server_alive_interval: int | None = None
    compression: bool | None = None
    forward_agent: bool | None = None
    identities_only: bool | None = None
    host_key_alias: str | None = None  # HostKeyAlias: the name looked up in and recorded to known_hosts
    config_file: str | None = None  # -F: absolute; "" for -F none (no ssh_config at all, as OpenSSH)

    @property
    def gateway_given(self) -> bool:
        """A ProxyJump or ProxyCommand (or `none`) was given: it wins over ssh_config's, as on ssh's command line."""
        return self.proxy_jump is not None or self.proxy_command is not None


# --- values: each takes the text after "Option=" and returns what SshArgs holds, or raises Refused ---

def _word(value: str) -> str:
    words = _split(value)
    if len(words) != 1:
        raise Refused(f"takes one value, not {len(words)}")
    return words[0]


def _split(value: str) -> list[str]:
    try:
        return shlex.split(value)
    except ValueError as exc:  # "No closing quotation"
        raise Refused(f"cannot be split into words: {exc}") from None


def _yes_no(value: str) -> bool:
    word = _word(value).lower()
    if word not in ("yes", "no"):
        raise Refused("is yes or no")
    return word == "yes"


def _number(word: str, high: int) -> int | None:
    """1..high, written in ASCII digits; else None."""
    return int(word) if re.fullmatch(r"[0-9]{1,6}", word) and 0 < int(word) <= high else None


def _seconds(value: str) -> int:
    if (seconds := _number(_word(value), 3600)) is None:
        raise Refused("is a number of seconds, 1..3600")
    return seconds


def _port(value: str) -> int:
    if (port := _number(_word(value), 65535)) is None:
        raise Refused("is a port, 1..65535")
    return port


def _user(value: str) -> str:
    word = _word(value)
    if not re.match(USER_PATTERN, word):
        raise Refused("is a user name (letters, digits, . _ -; not starting with -)")
    return word


def _hops(value: str) -> tuple[Hop, ...]:
    word = _word(value)
    if word.lower() == "none":
        return ()
    return tuple(_hop(text) for text in word.split(","))


def is_address(text: str) -> bool:
    """ADDRESS_PATTERN, and a name's lengths as DNS takes them (NAME_LENGTHS): a longer one would fail only when
    it is looked up, mid-run ("label too long")."""
    if not re.match(ADDRESS_PATTERN, text):
        return False
    return ":" in text or len(text.rstrip(".")) <= 253 and all(len(label) <= 63 for label in text.split("."))


def _hop(text: str) -> Hop:
    match = HOP.fullmatch(text)
    host = (match["v6"] or match["host"]) if match else ""
    if (not match or not is_address(host) or (match["v6"] and host.count(":") < 2)
            or not re.match(USER_PATTERN, match["user"] or "_") or not _number(match["port"] or "22", 65535)):
        raise Refused(f"hop {text!r} is not [user@]host[:port] (a user name, a host name or address, IPv6 in [ ], "
                      "a port 1..65535)")
    return Hop(host, match["user"], int(match["port"]) if match["port"] else None)


def _command(value: str) -> tuple[str, ...]:
    """ProxyCommand: words for paramiko's ProxyCommand, which runs them without a shell (never one we build):
    what only a shell could do is refused, not passed on as words."""
    lexer = shlex.shlex(value, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        words = list(lexer)
    except ValueError as exc:
        raise Refused(f"cannot be split into words: {exc}") from None
    if len(words) == 1 and words[0].lower() == "none":
        return ()
    needs_shell = [w for w in words if set(w) <= SHELL_OPERATORS] + [c for c in "$`" if c in value]
    if needs_shell:
        raise Refused(f"needs a shell ({' '.join(needs_shell)}); provision runs a ProxyCommand without one",
                      "put the pipeline in a script and name the script, or use ProxyJump")
    words = words[1:] if words[:1] == ["exec"] else words  # OpenSSH's shell exec's it anyway
    if not words:
        raise Refused("is empty")
    for word in words:
        unknown = [token for token in TOKENS.findall(word) if not token or token not in COMMAND_TOKENS]
        if unknown:
            raise Refused(f"has %{unknown[0]}: of OpenSSH's tokens a ProxyCommand here takes %h %n %p %r %%")
    return tuple(os.path.expanduser(w) if w.startswith("~") else w for w in words)


def _alias(value: str) -> str:
    word = _word(value)
    if not re.match(ALIAS_PATTERN, word):
        raise Refused("is one name, as known_hosts holds it (no space, comma, * ? !; not starting with | @ #)")
    return word


def _strictness(value: str) -> str:
    word = _word(value).lower()
    if word not in ("yes", "ask", "accept-new", "no", "off"):
        raise Refused("is yes, accept-new, no or off")
    # no/off never turn host key checking off here: read as accept-new, an unknown key is accepted and recorded,
    # a changed key is still refused (as _secure reads an ssh_config's no/off). ask: nobody is asked, so yes.
    return {"ask": "yes", "no": "accept-new", "off": "accept-new"}.get(word, word)


def _noop(*allowed: str) -> Callable[[str], None]:
    """Options that change nothing for provision (it is always batch, one connection per host for the run, which
    is what ControlMaster/ControlPersist give OpenSSH): accepted, where the value is one provision already has."""
    def accept(value: str) -> None:
        if allowed and _word(value).lower() not in allowed:
            raise Refused(f"is {' or '.join(allowed)} here: provision has no other way")
    return accept


# Option (lower case) -> (its name, SshArgs field or "user"/"port" or "" for a no-op, the value's reader).
# Paths (IdentityFile, UserKnownHostsFile) are read by _paths, which needs the inventory's directory.
OPTIONS: dict[str, tuple[str, str, Callable[[str], Any]]] = {
    "proxyjump": ("ProxyJump", "proxy_jump", _hops),
    "proxycommand": ("ProxyCommand", "proxy_command", _command),
    "user": ("User", "user", _user),
    "port": ("Port", "port", _port),
    "identityfile": ("IdentityFile", "identity_files", _word),
    "userknownhostsfile": ("UserKnownHostsFile", "known_hosts", _split),
    "stricthostkeychecking": ("StrictHostKeyChecking", "strict_host_key_checking", _strictness),
    "connecttimeout": ("ConnectTimeout", "connect_timeout", _seconds),
    "serveraliveinterval": ("ServerAliveInterval", "server_alive_interval", _seconds),
    "compression": ("Compression", "compression", _yes_no),
    "forwardagent": ("ForwardAgent", "forward_agent", _yes_no),
    "identitiesonly": ("IdentitiesOnly", "identities_only", _yes_no),
    "hostkeyalias": ("HostKeyAlias", "host_key_alias", _alias),
    "-f": ("-F", "config_file", _word),
    "controlmaster": ("ControlMaster", "", _noop()),
    "controlpersist": ("ControlPersist", "", _noop()),
    "controlpath": ("ControlPath", "", _noop()),
    "loglevel": ("LogLevel", "", _noop()),
    "batchmode": ("BatchMode", "", _noop("yes")),
    "passwordauthentication": ("PasswordAuthentication", "", _noop("no")),
    "kbdinteractiveauthentication": ("KbdInteractiveAuthentication", "", _noop("no")),
}
PROXY = ("proxy_jump", "proxy_command")  # one slot: whichever comes first wins, as in OpenSSH
HINT = (f"provision honours -o {', '.join(name for name, field, _ in OPTIONS.values() if field and name[0] != '-')} "
        "and -J -A -C -i -l -p -F; leave others out, or keep them in an ssh_config file (-F FILE, or "
        "provision_ssh_config: FILE) for OpenSSH")


# --- reading a value ---

def _pairs(words: list[str]) -> Iterator[tuple[str, str, str]]:
    """(as written, option, value) per option, as ssh's getopt reads its arguments (-AC, -p2222, -o X=y)."""
    words = list(words)
    while words:
        word = words.pop(0)
        if not word.startswith("-") or word == "-":
            raise Refused(f"{word!r} is not an option: these keys hold ssh options only",
                          "the host goes in ansible_host, a command in the playbook")
        flags = word[1:]
        while flags:
            flag, flags = flags[0], flags[1:]
            if flag in SHORT_FLAGS:
                yield f"-{flag}", *SHORT_FLAGS[flag]
                continue
            if flag != "o" and flag not in VALUE_FLAGS:
                raise Refused(f"-{flag}: provision does not read this ssh flag", HINT)
            if not flags and not words:
                raise Refused(f"-{flag} needs a value")
            value = flags or words.pop(0)
            flags = ""
            if flag == "o":
                match = re.fullmatch(r"\s*([A-Za-z][A-Za-z0-9]*)(?:\s*=\s*|\s+)(.*?)\s*", value, re.S)
                yield f"-o {value}", match[1] if match else "", match[2] if match else value
            else:
                yield f"-{flag} {value}", VALUE_FLAGS[flag], shlex.quote(value)  # one word, as ssh takes it


def _read(text: Any, base_dir: Path) -> tuple[dict[str, Any], list[Refused]]:
    """One key's value: SshArgs fields (and user, port) as given, the first value of each; what was refused."""
    if not isinstance(text, str):
        return {}, [Refused(f"is {type(text).__name__}, not text", "write the ssh arguments as one string, "
                                                                    "as on ssh's command line")]
    if any(not c.isprintable() for c in text.replace("\t", " ")):
        return {}, [Refused("has a control character (a newline?)", "write the ssh arguments on one line")]
    given: dict[str, Any] = {}
    refused: list[Refused] = []
    try:
        for shown, option, value in _pairs(_split(text)):
            try:
                _take(given, *_value(option, value, base_dir))
            except Refused as exc:
                refused.append(Refused(f"{shown}: {exc}", exc.hint))
    except Refused as exc:  # the words cannot be read on: the rest is not looked at
        refused.append(exc)
    return given, refused


def _value(option: str, value: str, base_dir: Path) -> tuple[str, Any]:
    if not option:
        raise Refused("is not Option=value", "write -o Option=value")
    if option.lower() not in OPTIONS:
        raise Refused(f"provision cannot honour {option} (paramiko, which it connects with, has no equivalent)",
                      HINT)
    _, field, read = OPTIONS[option.lower()]
    if not value:
        raise Refused("has no value")
    if field in ("identity_files", "known_hosts"):
        return field, _paths(read(value), base_dir, must_exist=field == "identity_files")
    if field == "config_file":
        return field, _config_file(read(value), base_dir)
    value = read(value)
    if field == "proxy_command" and not value:  # ProxyCommand none: no gateway, as ProxyJump none
        return "proxy_jump", ()
    return field, value


def _paths(words: str | list[str], base_dir: Path, must_exist: bool) -> tuple[str, ...]:
    """Files, relative to the inventory's directory as its other paths are; ~ expanded, no %-tokens."""
    paths = []
    for word in [words] if isinstance(words, str) else words:
        if "%" in word:
            raise Refused(f"{word!r}: %-tokens are not expanded here", "write the path itself")
        path = base_dir / os.path.expanduser(word)
        if must_exist and not _is_file(path):
            raise Refused(f"{word!r}: no such file (relative paths start at {base_dir})")
        paths.append(str(path))
    return tuple(paths)


def _config_file(word: str, base_dir: Path) -> str:
    """-F: a file paramiko reads as an ssh_config (refused here when it cannot: Fabric would skip it without a word
    and connect without what it says); `none`: no ssh_config at all."""
    if word.lower() == "none":
        return ""
    path = _paths(word, base_dir, must_exist=False)[0]
    refused = _ssh_config_refused(path, _identity(path))
    if refused is not None:
        raise Refused(f"{word!r} {refused} (relative paths start at {base_dir})", refused.hint)
    return path


@functools.lru_cache(maxsize=64)
def _ssh_config_refused(path: str, identity: tuple[int, int, int] | None) -> Refused | None:
    """Why paramiko cannot read this ssh_config, read once per version of the file (`identity`): every host's
    args are read (host_args), and thousands of hosts share one -F file of a few MiB."""
    try:
        _read_ssh_config(path)
    except Refused as exc:
        return exc
    return None


def _identity(path: str) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except OSError:  # a name too long, ...
        return False


def _take(given: dict[str, Any], field: str, value: Any) -> None:
    """The first value wins (OpenSSH); keys add up; one proxy slot."""
    if field == "identity_files":
        given[field] = given.get(field, ()) + value
    elif field == "config_file":  # ssh keeps the last -F it reads
        given[field] = value
    elif field and not (field in PROXY and given.keys() & set(PROXY)):
        given.setdefault(field, value)


# --- what build.py and SSHConnection use ---

def refusals(text: Any, base_dir: Path) -> list[Refused]:
    """What one key's value asks that provision cannot honour (empty: all of it is honoured)."""
    return _read(text, base_dir)[1]


def executable_refusals(value: Any) -> list[Refused]:
    """ansible_ssh_executable (or ansible.cfg's ssh_executable): Ansible runs this program for ssh; provision
    connects with paramiko and runs none. OpenSSH's own ssh changes nothing; any other program (a wrapper that
    logs, picks a jump host, fetches a key) is refused, never dropped: the host would be reached without it."""
    if value in PLAIN_SSH:
        return []
    if not isinstance(value, str):
        return [Refused(f"is {type(value).__name__}, not a program's path", "write the program as text, or leave "
                        "the key out")]
    return [Refused(f"{value!r}: provision connects with paramiko and runs no ssh program, so what this one does "
                    "besides OpenSSH's ssh would not happen", "leave it out (or write ssh) for this host if it "
                    "only runs OpenSSH's ssh; what a wrapper adds goes in ansible_ssh_common_args, which provision "
                    "honours (-J, -o ProxyCommand=, -i, -F), or leave the host out of the run with --limit")]


CHECKED_KEYS = (*ARGS_KEYS, EXECUTABLE_KEY)  # the keys key_refusals() reads


def key_refusals(key: str, value: Any, base_dir: Path) -> list[Refused]:
    """What one of CHECKED_KEYS asks that provision cannot honour (empty: none, or not a key of these)."""
    if key == EXECUTABLE_KEY:
        return executable_refusals(value)
    return refusals(value, base_dir) if key in ARGS_KEYS else []


def host_args(variables: Mapping[str, Any], bases: Mapping[str, Path], user: Any,
              port: Any) -> tuple[SshArgs, Any, Any]:
    """A host's ssh arguments, its user and its port, in the order Ansible writes them on ssh's command line:
    ansible_ssh_args, then ansible_port and ansible_user, then common and extra args. What was refused is
    left out (build.py reports it where it is written). `bases`: where each key's relative paths start."""
    given: dict[str, Any] = {}
    for key in ARGS_KEYS:
        if key == "ansible_ssh_common_args":
            for field, value in (("port", port), ("user", user)):
                if value is not None:
                    _take(given, field, value)
        if key in variables:
            for field, value in _read(variables[key], bases.get(key, Path.cwd()))[0].items():
                _take(given, field, value)
    user, port = given.pop("user", None), given.pop("port", None)
    return SshArgs(**given), user, port


def expand_command(words: tuple[str, ...], host: str, port: int, user: str, name: str) -> list[str]:
    """A ProxyCommand's words with OpenSSH's tokens replaced: %h the host, %p its port, %r the remote user, %n the
    name as given, %% a percent sign."""
    values = {"h": host, "p": str(port), "r": user, "n": name, "%": "%"}
    return [TOKENS.sub(lambda match: values[match[1]], word) for word in words]


# --- an ssh_config file (the inventory's ssh_config, --ssh-config) ---

def ssh_config_problem(path: str, file: str, where: str, key: str) -> Problem | None:
    """Where `path` is not an ssh_config paramiko reads (Fabric reads it when the host is connected to, and skips
    what is not a regular file without a word), what is wrong, located as Problem(file, where, key). A line is
    named by its number, never quoted: the file named may be a secret (/etc/shadow, a private key)."""
    try:
        _read_ssh_config(path)
    except Refused as exc:
        return Problem(file, where, key, f"{path!r} {exc}", exc.hint)
    return None


def _read_ssh_config(path: str) -> None:
    from paramiko import SSHConfig
    from paramiko.ssh_exception import ConfigParseError

    try:
        if kind := not_a_file(os.stat(path).st_mode):
            raise Refused(f"is {kind}, not an ssh_config file", SSH_CONFIG_HINT)
        with open(path) as fh:  # as Fabric opens it
            text = fh.read(SSH_CONFIG_BYTES + 1)
    except OSError as exc:
        raise Refused(f"cannot be read: {exc.strerror or exc}", SSH_CONFIG_HINT) from None
    except UnicodeDecodeError:
        raise Refused("is not text: not an ssh_config file (its bytes are not shown)", SSH_CONFIG_HINT) from None
    if len(text) > SSH_CONFIG_BYTES:
        raise Refused(f"is larger than {SSH_CONFIG_BYTES >> 20} MiB: not an ssh_config file", SSH_CONFIG_HINT)
    read = 0

    def lines() -> Iterator[str]:
        nonlocal read
        for read, line in enumerate(io.StringIO(text), 1):
            yield line

    try:
        SSHConfig().parse(lines())
    except (ConfigParseError, ValueError):  # paramiko's message quotes the line
        raise Refused(f"is not an ssh_config file: paramiko cannot read its line {read} (the line is not shown: the "
                      "file may hold secrets)", SSH_CONFIG_HINT) from None
