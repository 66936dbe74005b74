"""How to reach a host, from Ansible's connection variables: each checked as the setting it stands for where it is
written, and the winning ones made into the Host's address, user, port, files and ssh arguments. What provision
cannot honour is a problem for the runs that select the host (Host.refused), never for the whole inventory."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from provision.capabilities.host import HostSettings
from provision.core.errors import Problem
from provision.core.localfiles import not_a_file
from provision.core.settings import Port, refuse, setting, validation_problems
from provision.core.sshargs import (ADDRESS_PATTERN, CHECKED_KEYS, NAME_LENGTHS, USER_PATTERN, host_args,
                                    is_address, key_refusals)
from provision.inventory.model import Host

Connection = Literal["ssh", "local", "paramiko", "smart"]  # Ansible's connection plugins that provision stands in for
CONNECTIONS: tuple[str, ...] = get_args(Connection)
# Ansible's connection variables, as its ssh plugin reads them: of several names for one setting, the last one set
# wins (ansible_ssh_user over ansible_user), whichever level set each: an -e ansible_user loses to a host's
# ansible_ssh_user, as in Ansible. provision_ssh_config is provision's own (an ssh_config file to read).
CONNECTION_VARS: dict[str, tuple[str, ...]] = {
    "host": ("ansible_host", "ansible_ssh_host"),
    "user": ("ansible_user", "ansible_ssh_user"),
    "port": ("ansible_port", "ansible_ssh_port"),
    "connection": ("ansible_connection",),
    "become": ("ansible_become",),
    "identity_file": ("ansible_private_key_file", "ansible_ssh_private_key_file"),
    "become_user": ("ansible_become_user",),
    "become_method": ("ansible_become_method",),
    "ssh_config": ("provision_ssh_config",),
}
SETTING_OF = {name: setting for setting, names in CONNECTION_VARS.items() for name in names}
FILE_VARS = {"ansible_private_key_file": "an SSH private key file", "ansible_ssh_private_key_file":
             "an SSH private key file", "provision_ssh_config": "an ssh_config file"}

ANSIBLE_TRUE = frozenset({"y", "yes", "on", "1", "true", "t"})  # Ansible's boolean() of a string
ANSIBLE_FALSE = frozenset({"n", "no", "off", "0", "false", "f"})


class ConnectionVars(BaseModel):
    """How to reach a host, one field per setting of CONNECTION_VARS (each of its names is checked as the field),
    checked where it is written."""

    model_config = ConfigDict(extra="forbid", strict=True)
    # Never read as an ssh option ("-oProxyCommand=...") nor a shell word: names and addresses only.
    # A single ":" would be read as host:port (Fabric's shorthand): only IPv6 addresses (2+ colons) have them.
    host: str | None = setting(None, "a host name, an IPv4 or an IPv6 address (letters, digits, . - _; not "
                               "starting with -; the port goes in ansible_port)", pattern=ADDRESS_PATTERN)
    user: str | None = setting(None, "a user name (letters, digits, . _ -; not starting with -)",
                               pattern=USER_PATTERN)
    port: Port | None = setting(None, "a port, 1..65535")
    connection: Connection | None = setting(
        None, "ssh or local (Ansible's paramiko and smart mean ssh)")
    ssh_config: str | None = setting(None, "an ssh_config file, relative to the inventory file", min_length=1)
    become: bool | None = setting(None, "true (default: setters run as root, through sudo when needed) or false")
    identity_file: str | None = setting(None, "an SSH private key file, relative to the inventory file", min_length=1)
    become_user: Literal["root"] | None = setting(None, "root: provision's setters run as root")
    become_method: Literal["sudo"] | None = setting(None, "sudo: the one way provision becomes root")

    @field_validator("host")
    @classmethod
    def _name_lengths(cls, value: str | None) -> str | None:
        if value is not None and not is_address(value):  # the pattern holds: its lengths do not
            raise refuse(f"got {value[:40]!r}... ({len(value)} characters): not {NAME_LENGTHS}",
                         "is this the address meant? a template that made it?")
        return value

    @field_validator("port", mode="before")
    @classmethod
    def _port_as_text(cls, value: Any) -> Any:
        """Ansible takes a port written as text (`ansible_port: "2222"`, a quoted INI value) as the number."""
        return int(value) if isinstance(value, str) and value.strip().isdigit() else value

    @field_validator("become", mode="before")
    @classmethod
    def _ansible_boolean(cls, value: Any) -> Any:
        """Ansible's words for true and false (`ansible_become: "yes"`, an INI `yes`)."""
        if isinstance(value, str) and value.strip().lower() in ANSIBLE_TRUE | ANSIBLE_FALSE:
            return value.strip().lower() in ANSIBLE_TRUE
        return value


def is_connection_key(key: str) -> bool:
    """Whether the variable concerns how to reach the host: its problems refuse only the runs that select it."""
    return key in SETTING_OF or key in CHECKED_KEYS


def connection_problems(variables: dict[str, Any], file: str, where: str, base: Path) -> list[Problem]:
    """Each of Ansible's connection variables checked as the setting it stands for, a file it names checked
    for being there, and the ssh arguments for what provision cannot honour. `base`: where relative paths start."""
    problems: list[Problem] = []
    for name, value in variables.items():
        if name in SETTING_OF:
            try:
                ConnectionVars.model_validate({SETTING_OF[name]: value})
            except ValidationError as exc:
                problems += [replace(problem, key=name) for problem in
                             validation_problems(exc, ConnectionVars, file, where)]
    for name, what in FILE_VARS.items():
        missing = file_missing(variables.get(name), base)
        if missing:
            problems.append(Problem(file, where, name, f"{variables[name]!r}: {missing}",
                                    f"give the path of {what}, or remove the key"))
    for key in CHECKED_KEYS:  # what ssh's command line asks that provision cannot honour (core/sshargs.py)
        for refused in key_refusals(key, variables[key], base) if key in variables else []:
            problems.append(Problem(file, where, key, str(refused), refused.hint))
    return problems


def inventory_path(base_dir: Path, path: str) -> Path | None:
    """Relative to the inventory's directory, ~ expanded; None when ~user names no user."""
    try:
        return (base_dir / Path(path).expanduser()).absolute()
    except RuntimeError:
        return None


def file_missing(path: Any, base: Path) -> str:
    """Why a file the inventory names (a key file, an ssh_config) is not there to read, or '' (also for a value
    that is not a path: its own check says so). Relative paths start at the inventory's directory."""
    if not isinstance(path, str) or not path:
        return ""
    if "\0" in path:  # no file system takes one; os.stat refuses it with ValueError, not OSError
        return "a path cannot hold a NUL character"
    found = inventory_path(base, path)
    if found is None:
        return "cannot be read as a path (an unknown ~user?)"
    try:
        missing = "" if found.is_file() else not_a_file(found.stat().st_mode)
    except FileNotFoundError:
        missing = "no such file"
    except OSError as exc:  # a name longer than the file system takes, ...: not a file either
        missing = exc.strerror or str(exc)
    return f"{missing} (relative paths start at {base.absolute()})" if missing else ""


def winning_names(variables: dict[str, Any]) -> dict[str, str]:
    """Each connection setting -> the variable that gives it: of its names, the last one set (Ansible's order)."""
    names = {}
    for what, candidates in CONNECTION_VARS.items():
        for name in candidates:
            if variables.get(name) is not None:
                names[what] = name
    return names


def host_of(name: str, groups: list[str], variables: dict[str, Any], settings: HostSettings,
            bases: dict[str, Path]) -> Host:
    """The host as provision reaches it. `bases`: for the ssh args keys and the files named, the directory their
    paths start at (that of the level that set them)."""
    names = winning_names(variables)
    raw = {setting: variables[name] for setting, name in names.items()}
    try:  # the values as read (a port written as text is the number); each level was validated where written
        reach = ConnectionVars.model_validate(raw).model_dump()
    except ValidationError:  # a problem for the runs that select this host (host.refused)
        reach = raw
    files = {what: inventory_path(bases.get(names[what], Path.cwd()), reach[what])
             for what in ("ssh_config", "identity_file") if isinstance(reach.get(what), str)}
    connection = "local" if reach.get("connection") == "local" else "ssh"
    ssh_args, user, port = host_args(variables, bases, reach.get("user"), reach.get("port"))
    return Host(name=name, address=reach.get("host") or name, user=user, port=port, connection=connection,
                ssh_config=str(files["ssh_config"]) if files.get("ssh_config") else None,
                become=reach.get("become") is not False, groups=groups, vars=variables, settings=settings,
                identity_file=str(files["identity_file"]) if files.get("identity_file") else None,
                ssh_args=ssh_args, reached_by=names)
