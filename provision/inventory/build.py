"""From inventory documents and variables files to hosts with validated settings: which hosts, how to reach
them, and the settings each should have.

The documents have the shape of an Ansible YAML inventory (all: {hosts, children, vars}, nested groups); the
readers (formats/) put INI files and scripts' output in that shape, sources.py finds them and the group_vars/
and host_vars/ files beside them. Rules (see inventories/README.md):

- Precedence, as Ansible's (its default VARIABLE_PRECEDENCE; the differential tests hold it against
  ansible-inventory): ansible.cfg's defaults < the inventories' own variables of all, then of each group by
  rank < group_vars/all < group_vars/GROUP by rank < the host's own variables < host_vars/HOST. Groups are
  ranked by depth (longest path from all), then by ansible_group_priority (default 1, read from the
  inventories only), then by name: of two sibling groups that set the same key, the one whose name sorts last
  wins, wherever it is written. Several sources: each level in source order, the later winning.
- Mappings merge key by key at every level (a group sets provision_gpu.power_limit, a host adds provision_gpu.clocks: both
  apply); anything else, lists included, replaces. Ansible's default (hash_behaviour=replace) would replace
  the whole gpu block instead: provision's blocks are meant to be refined level by level.
- A host or group written in several places of one file: its variables merge, the later value winning as in
  Ansible, except that a key of provision's own given two different values there is an error (which one was
  meant?). In different files, the later wins.
- provision reads its own variables (provision_*) and Ansible's (ansible_*); every other variable is another
  role's, left alone. What concerns how to reach a host is refused for the runs that select it (Host.refused).
- Everything is validated before anything connects, where it is written (file, host or group, key): all
  problems are collected and raised as one InputError.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from provision.capabilities.host import BLOCKS, VARIABLE_OF, VARIABLES, HostSettings, parse_host_settings
from provision.core import cluster as clusters
from provision.core.errors import InputError, Problem
from provision.core.localfiles import not_a_file
from provision.core.settings import PREFIX, Port, did_you_mean, refuse, setting, validation_problems
from provision.core.sshargs import (ADDRESS_PATTERN, ARGS_KEYS, CHECKED_KEYS, NAME_LENGTHS, USER_PATTERN, host_args,
                                    is_address, key_refusals)
from provision.inventory.model import Document, Group, Host, Inventory
from provision.inventory.templating import HostContext, RenderError, is_templated, render, without_templates


GROUP_KEYS = ("hosts", "children", "vars")
CONNECTIONS = ("ssh", "local", "paramiko", "smart")  # Ansible's connection plugins that provision stands in for
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
OWN = (*VARIABLES, "provision_ssh_config")  # every provision_* variable provision reads
# The names before provision's namespace (issue 43): an inventory still written with them is told what to rename.
OLD_NAMES = {**VARIABLE_OF, "host": "ansible_host", "user": "ansible_user", "port": "ansible_port",
             "connection": "ansible_connection", "become": "ansible_become",
             "identity_file": "ansible_ssh_private_key_file", "become_user": "ansible_become_user",
             "become_method": "ansible_become_method", "ssh_config": "provision_ssh_config"}


BAD_NAME_CHARS = set(",!&*?[] \t")  # these would break --limit patterns


ANSIBLE_TRUE = frozenset({"y", "yes", "on", "1", "true", "t"})  # Ansible's boolean() of a string
ANSIBLE_FALSE = frozenset({"n", "no", "off", "0", "false", "f"})


class Vaulted:
    """A value Ansible Vault encrypted (`!vault`): provision cannot read it."""

    def __repr__(self) -> str:
        return "!vault"


def _vaulted(value: Any) -> bool:
    if isinstance(value, dict):
        return any(_vaulted(v) for v in value.values())
    if isinstance(value, list):
        return any(_vaulted(v) for v in value)
    return isinstance(value, Vaulted)


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
    connection: Literal[CONNECTIONS] | None = setting(
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


def deep_merge(base: dict, top: dict) -> dict:
    """`top` over `base`, key by key into nested mappings; anything else (lists too) is replaced."""
    merged = dict(base)
    for key, value in top.items():
        both_mappings = isinstance(value, dict) and isinstance(merged.get(key), dict)
        merged[key] = deep_merge(merged[key], value) if both_mappings else value
    return merged


def conflicting_keys(a: dict, b: dict, prefix: str = "") -> list[str]:
    """Dotted keys that a and b both set, to different values."""
    keys = []
    for key in a.keys() & b.keys():
        if isinstance(a[key], dict) and isinstance(b[key], dict):
            keys += conflicting_keys(a[key], b[key], f"{prefix}{key}.")
        elif a[key] != b[key]:
            keys.append(f"{prefix}{key}")
    return sorted(keys)


@dataclass(frozen=True)
class Level:
    """One place variables are written: a host's or group's inline variables in one inventory file, or one
    variables file (group_vars/gpu.yml, a file in host_vars/node1/)."""

    where: str  # "all", "group gpu", "host node1"
    file: str


class Builder:
    """Reads the documents (groups, hosts and the variables written at each, in order), takes the variables
    files of the groups and hosts found, then checks the structure, validates each level's variables where
    written, and merges them per host in Ansible's order (host_levels)."""

    def __init__(self) -> None:
        self.file = ""  # the file being read or checked: problems name it
        self.problems: list[Problem] = []
        self.groups: dict[str, Group] = {"all": Group("all", [], [], [], {})}
        self.host_groups: dict[str, list[str]] = {}  # host -> groups it is written in, in order
        self.written_in: dict[str, str] = {}  # "where" -> the first file that names that host or group
        self.mentions: dict[Level, list[tuple[str, Any]]] = {}  # level -> vars written there, in order
        self.inline: dict[str, list[Level]] = {}  # "where" -> its inline levels, in source order
        self.files: dict[tuple[Path, str], list[Level]] = {}  # (vars dir, "where") -> its variables files
        self.base: dict[Level, Path] = {}  # relative paths (ssh_config, key files) written there start here
        self.bases: list[Path] = []  # the sources' directories, in source order (group_vars/ beside them)
        self.bad_levels: set[Level] = set()  # levels whose own variables have problems
        self.foreign: set[str] = set()  # other roles' variables, left alone
        self.unread: list[str] = []  # variables files encrypted whole with Ansible Vault
        self.defaults: list[Level] = []  # ansible.cfg's remote_user & co.: below everything else
        self.deferred: dict[Level, list[Problem]] = {}  # problems for the hosts a run selects (Host.refused)
        self.foreign_vars: dict[Level, dict] = {}  # other roles' variables, for templates that name them
        self.extra: list[Level] = []  # -e/--extra-vars: above everything else
        self.templated: set[Level] = set()  # levels with a Jinja template in a value provision reads
        self.validated: dict[Any, HostSettings | None] = {}  # settings_of(): the blocks' key -> their settings
        self.value_keys = ValueKeys()
        self.members: dict[str, set[str]] = {}  # group -> its hosts, as Group.hosts (a list: the order written)
        self.old_names: dict[str, dict[str, str]] = {}  # file -> provision's old names written there -> new names
        self.old_blocks: set[str] = set()  # files with a block of provision's under its old name (gpu:, ...)
        self.skipped: list[str] = []  # what was read past, as Ansible's warnings say it
        self.vaulted_files: dict[str, list[str]] = {}  # "where" -> its variables files encrypted whole
        self.host_refused: dict[str, list[Problem]] = {}  # host -> what its rendered templates ask that cannot be

    def skip(self, message: str) -> None:
        """What Ansible reads past with a warning: said as one, naming the file."""
        self.skipped.append(f"{self.file}: {message}")

    def problem(self, where: str, key: str, message: str, hint: str = "") -> None:
        self.problems.append(Problem(self.file, where, key, message, hint))

    def at(self, where: str) -> None:
        """Problems found from here on about this host or group name the file that first wrote it."""
        self.file = self.written_in.get(where, self.file)

    def read(self, document: Document) -> None:
        """One inventory document (a file, a script's output), after those read before it."""
        self.file = document.file
        if document.vars_dir and document.base_dir.resolve() not in {b.resolve() for b in self.bases}:
            self.bases.append(document.base_dir)
        self.read_top(document.data, document.base_dir)

    def add_defaults(self, file: str, variables: dict, base: Path) -> None:
        """Connection settings every host has unless its inventory says otherwise (ansible.cfg's)."""
        level = Level("all", file)
        self.defaults.append(level)
        self.base[level] = base
        self.mentions[level] = [("all", variables)]

    def add_extra_vars(self, origin: str, variables: dict) -> None:
        """-e/--extra-vars (extravars.py): every host's highest level; relative paths start here."""
        level = Level("extra vars", origin)
        self.extra.append(level)
        self.base[level] = Path.cwd()
        self.mentions[level] = [("extra vars", variables)]

    def add_vars_file(self, base: Path, where: str, file: str, data: Any) -> None:
        """A group_vars/ or host_vars/ file beside a source (`base`), for the group or host `where`."""
        if isinstance(data, Vaulted):
            self.unread.append(file)
            self.vaulted_files.setdefault(where, []).append(file)
            return
        level = Level(where, file)
        self.files.setdefault((base, where), []).append(level)
        self.base[level] = base
        self.mentions[level] = [(where, data)]

    def build(self) -> Inventory:
        self.reconcile()
        if not self.host_groups and not self.problems:
            empty = len(self.groups) == 1 and not self.mentions
            self.problem("", "", "the inventory is empty" if empty else "the inventory has no hosts",
                         "start with all: {hosts: ..., children: ..., vars: ...}" if empty
                         else "add hosts under all: hosts: or under a group")
        self.check_names()
        cycle = self.find_cycle()
        if cycle:
            self.problem(where_group(cycle[0]), "children", f"groups contain each other: {' -> '.join(cycle)}",
                         "a group cannot be its own descendant; remove one of these children")
        level_vars = {level: self.level_vars(level) for level in self.mentions}
        self.problems[:0] = self.old_name_problems()
        self.check_controllers(level_vars)
        for name, group in self.groups.items():
            group.vars = merge_levels(level_vars, self.inline_levels(where_group(name))
                                      + self.file_levels(where_group(name)))
        hosts = {} if cycle else self.merge_hosts(level_vars)
        self.check_clusters(hosts)
        if self.problems:
            raise InputError(self.problems)
        return Inventory("", hosts, self.groups, sorted(self.foreign), unread=self.unread, skipped=self.skipped)

    # --- reading ---

    def read_top(self, data: Any, base: Path) -> None:
        if data is None:  # an empty file: one of a directory's may be; all of them empty is said in build()
            return
        if not isinstance(data, dict):
            self.problem("", "", f"the top level must be a mapping of groups, not {_kind(data)}",
                         "start with all: {hosts: ..., children: ..., vars: ...}")
            return
        if "all" in data:
            self.read_group("all", data["all"], None, (), base)
        for name, body in data.items():  # groups at the top level: children of all if no group names them
            if name != "all" and body is not None and not isinstance(body, dict):  # Ansible's yaml plugin too
                self.skip(f"group {name!r} skipped: a group is a mapping of {', '.join(GROUP_KEYS)}, not {_kind(body)}")
            elif name != "all":
                self.read_group(str(name), body, None, (), base)

    def read_group(self, name: str, body: Any, parent: str | None, path: tuple[str, ...], base: Path) -> None:
        where = where_group(name)
        if name in path:
            self.problem(where, "children", f"groups contain each other: {' -> '.join((*path, name))}",
                         "a group cannot be its own descendant")
            return
        group = self.groups.setdefault(name, Group(name, [], [], [], {}))
        self.written_in.setdefault(where, self.file)
        if parent is not None:
            _add(group.parents, parent)
            _add(self.groups[parent].children, name)
        if body is None:
            return
        if not isinstance(body, dict):
            self.problem(where, "", f"a group is a mapping of {', '.join(GROUP_KEYS)}, not {_kind(body)}")
            return
        for key in body:
            if key not in GROUP_KEYS:  # Ansible's yaml plugin warns and reads on
                hint = did_you_mean(str(key), list(GROUP_KEYS)) or "variables go under vars:"
                self.skip(f"{where}: key {key!r} skipped: a group holds only {', '.join(GROUP_KEYS)} ({hint})")
        if "vars" in body:
            self.mention(where, where, body["vars"], base)
        for host, host_vars in self.mapping(body, "hosts", where).items():
            host = str(host)
            if host not in self.members.setdefault(name, set()):
                self.members[name].add(host)
                group.hosts.append(host)
            _add(self.host_groups.setdefault(host, []), name)
            self.written_in.setdefault(where_host(host), self.file)
            self.mention(where_host(host), where, host_vars, base)
        for child, child_body in self.mapping(body, "children", where).items():
            self.read_group(str(child), child_body, name, (*path, name), base)

    def mention(self, where: str, written_in: str, variables: Any, base: Path) -> None:
        level = Level(where, self.file)
        if level not in self.mentions:
            self.mentions[level] = []
            self.inline.setdefault(where, []).append(level)
            self.base[level] = base
        self.mentions[level].append((written_in, variables))

    def reconcile(self) -> None:
        """As Ansible does once every source is read: a group no group names is a child of all (in the order
        the groups were first written); "ungrouped" holds the hosts in no other group, and only them."""
        for name, group in list(self.groups.items()):
            if name != "all" and not group.parents:
                _add(group.parents, "all")
                _add(self.groups["all"].children, name)
        loose = {host: None for host, groups in self.host_groups.items() if not set(groups) - {"all", "ungrouped"}}
        if loose and "ungrouped" not in self.groups:
            self.groups["ungrouped"] = Group("ungrouped", [], [], ["all"], {})
            _add(self.groups["all"].children, "ungrouped")
        if "ungrouped" in self.groups:
            self.groups["ungrouped"].hosts = list(loose)
            for host, groups in self.host_groups.items():
                if host in loose and "ungrouped" not in groups:
                    groups.append("ungrouped")
                elif host not in loose and "ungrouped" in groups:
                    groups.remove("ungrouped")

    def mapping(self, body: dict, key: str, where: str) -> dict:
        value = body.get(key)
        if value is None:
            return {}
        if not isinstance(value, dict):
            self.problem(where, key, f"{key} must be a mapping of names (each followed by a colon), "
                         f"not {_kind(value)}", f"write `{key}:` then one `name:` per line, indented")
            return {}
        return value

    # --- structure ---

    def check_names(self) -> None:
        for name in [*self.groups, *self.host_groups]:
            self.at(_where(name, self.groups))
            if any(not c.isprintable() for c in name):  # a newline would add lines to the files named after it
                self.problem(_where(name, self.groups), "", f"name {name!r} has a control character",
                             "host and group names are one line of printable text; rename it")
            elif BAD_NAME_CHARS.intersection(name) or not name:
                self.problem(_where(name, self.groups), "", f"name {name!r} has a space or one of , ! & * ? [ ]",
                             "these would break --limit patterns; rename it")
        for host, groups in self.host_groups.items():
            self.at(where_host(host))
            if host in self.groups:
                self.problem(where_host(host), "", f"{host!r} is both a host and a group name",
                             "rename one: --limit could not tell them apart")

    def find_cycle(self) -> list[str] | None:
        """A cycle in children (as a list ending where it started), or None."""
        done: set[str] = set()

        def visit(name: str, path: list[str]) -> list[str] | None:
            if name in path:
                return path[path.index(name):] + [name]
            if name in done:
                return None
            cycle = next((c for child in self.groups[name].children if (c := visit(child, path + [name]))), None)
            done.add(name)
            return cycle

        return next((c for g in list(self.groups) if (c := visit(g, []))), None)

    # --- variables ---

    def level_vars(self, level: Level) -> dict:
        """The variables one level writes (all its mentions merged), normalized and validated there."""
        self.file, where = level.file, level.where
        merged: dict = {}
        for written_in, raw in self.mentions[level]:
            if raw is None:
                continue
            if not isinstance(raw, dict):
                self.problem(where, "", f"variables must be a mapping, not {_kind(raw)}")
                continue
            raw = {str(k): v for k, v in raw.items()}
            # Ansible takes the later value; for provision's own settings, which one was meant is asked.
            for key in (k for k in conflicting_keys(merged, raw) if k.lower().startswith(PREFIX)):
                self.problem(where, key, f"set to different values where {where} is written more than once "
                             f"(again in {written_in})", "set it in one place")
            merged = deep_merge(merged, raw)
        variables = self.normalize(merged, level)
        if is_templated(variables):
            self.templated.add(level)
        if self.validate_level(variables, where, level):
            self.bad_levels.add(level)
        return variables

    def normalize(self, raw: dict, level: Level) -> dict:
        """The variables provision reads, as written: its own (provision_*: another name with that prefix is a
        problem) and Ansible's (ansible_*). Every other variable is another role's, left alone whatever its name,
        type or value. Passwords, and connections provision cannot use, are refused for the hosts a run
        selects; so is a vaulted value provision would need."""
        variables: dict = {}
        where = level.where
        for key, value in raw.items():
            if key.lower().startswith(PREFIX) and key not in OWN:  # Provision_gpu is a slip too
                self.problem(where, key, f"unknown variable {key!r}: provision_ names provision's variables "
                             f"({', '.join(OWN)})", did_you_mean(key, list(OWN))
                             or "rename it: the provision_ prefix is provision's own")
            elif _vaulted(value) and (key in OWN or key in SETTING_OF or key in CHECKED_KEYS):
                self.defer(level, key, "is encrypted with Ansible Vault, which provision does not decrypt",
                           "write the value in the clear (it is not a secret provision needs) or leave it out")
            elif key.startswith("ansible_") and "pass" in key:  # never kept: a secret is neither shown nor logged
                self.defer(level, key, "is a password: provision reads none from an inventory",
                           "use SSH keys; a sudo password is asked once at run time (-K)")
            elif key == "ansible_connection" and isinstance(value, str) and value not in CONNECTIONS:
                self.defer(level, key, f"is {value!r}: provision reaches hosts by SSH (ssh, paramiko, smart) or "
                           "works on this machine (local)", "")
            elif key in OWN or key.startswith("ansible_"):
                variables[key] = value
            else:  # another role's variable (an inventory serves many): not provision's to read or judge
                self.note_old_name(level, key, value)
                self.foreign.add(key)
                self.foreign_vars.setdefault(level, {})[key] = value  # a template may still name it
        return variables

    def note_old_name(self, level: Level, key: str, value: Any) -> None:
        """A name provision read before its namespace (gpu:, user:, ...). Only a mapping that is, key for key, a
        valid block of provision's marks the file as written for provision's old names; another role's `gpu:
        true` or `slurm: {...}` does not, and then nothing in that file is taken for an old name."""
        if key not in OLD_NAMES:
            return
        if key in BLOCKS and key != "custom" and isinstance(value, dict) and value:
            keys = set(map(str, value))
            if (keys <= _block_fields(key) and keys & _telling_fields(key)
                    and not parse_host_settings({key: value}, "", "", partial=True)[1]):
                self.old_blocks.add(level.file)
        self.old_names.setdefault(level.file, {}).setdefault(key, OLD_NAMES[key])

    def old_name_problems(self) -> list[Problem]:
        """One problem per file written with provision's old names: every rename it needs."""
        return [Problem(file, "", "", "uses provision's names from before its namespace: rename "
                        + ", ".join(f"{old} to {new}" for old, new in self.old_names[file].items()),
                        "provision reads only its own provision_* variables and Ansible's ansible_* ones, so other "
                        "roles' variables (gpu, user, slurm, ...) are never taken for provision's")
                for file in self.old_blocks]

    def defer(self, level: Level, key: str, message: str, hint: str) -> None:
        """A problem only for the hosts a run selects (Windows hosts and containers may share the inventory)."""
        self.deferred.setdefault(level, []).append(Problem(self.file, level.where, key, message, hint))

    def validate_level(self, variables: dict, where: str, level: Level) -> bool:
        """Whether the level's own settings have problems (reported here). What concerns how to reach its hosts
        is a problem for the runs that select them (deferred)."""
        before = len(self.problems)
        known = without_templates(variables)  # a templated value is checked per host, once rendered
        self.problems += settings_problems(_settings_part(known), self.file, where, partial=True)
        for problem in self.connection_problems(known, where, self.base[level]):
            self.deferred.setdefault(level, []).append(problem)
        return len(self.problems) > before

    def connection_problems(self, variables: dict, where: str, base: Path) -> list[Problem]:
        """Each of Ansible's connection variables checked as the setting it stands for, a file it names checked
        for being there, and the ssh arguments for what provision cannot honour."""
        problems: list[Problem] = []
        for name, value in variables.items():
            if name in SETTING_OF:
                try:
                    ConnectionVars.model_validate({SETTING_OF[name]: value})
                except ValidationError as exc:
                    problems += [replace(problem, key=name) for problem in
                                 validation_problems(exc, ConnectionVars, self.file, where)]
        for name, what in FILE_VARS.items():
            missing = file_missing(variables.get(name), base)
            if missing:
                problems.append(Problem(self.file, where, name, f"{variables[name]!r}: {missing}",
                                        f"give the path of {what}, or remove the key"))
        for key in CHECKED_KEYS:  # what ssh's command line asks that provision cannot honour (core/sshargs.py)
            for refused in key_refusals(key, variables[key], base) if key in variables else []:
                problems.append(Problem(self.file, where, key, str(refused), refused.hint))
        return problems

    def check_controllers(self, level_vars: dict[Level, dict]) -> None:
        for level, variables in level_vars.items():
            slurm = variables.get(VARIABLE_OF["slurm"])
            controller = slurm.get("controller") if isinstance(slurm, dict) else None
            if isinstance(controller, str) and controller not in self.host_groups:
                self.file = level.file
                self.problem(level.where, "provision_slurm.controller", f"{controller!r} is not a host of this inventory",
                             did_you_mean(controller, list(self.host_groups)) or "name one of its hosts")

    def check_clusters(self, hosts: dict[str, "Host"]) -> None:
        """What one host's block cannot know: the launcher's group holds the host; a Slurm host names its
        controller, and that controller is in the same Slurm cluster."""
        for name, host in hosts.items():
            self.at(where_host(name))
            launcher, slurm = host.settings.launcher, host.settings.slurm
            if launcher and launcher.group and launcher.group not in host.groups:
                known = launcher.group in self.groups
                self.problem(where_host(name), "provision_launcher.group",
                             f"{launcher.group!r} is {'a group this host is not in' if known else 'not a group'}",
                             did_you_mean(launcher.group, host.groups) or f"its groups: {', '.join(host.groups)}")
            for key, group, becomes in clusters.unwritable_names(host):
                host.refused.append(Problem(self.file, where_host(name), key, f"the group {group!r} would be "
                                            f"{becomes}: its name is not one word of letters, digits and _ . -",
                                            f"rename the group, or set {key} to a name that is"))
            if slurm and slurm.controller is None:
                self.problem(where_host(name), "provision_slurm.controller", "is required: the host where slurmctld "
                             "runs", "set it once for the cluster, e.g. in the group's vars: provision_slurm: "
                             "{controller: head}")
            elif slurm and slurm.controller in hosts and hosts[slurm.controller].settings.slurm is None:
                self.at(where_host(slurm.controller))
                self.problem(where_host(slurm.controller), "provision_slurm",
                             f"is not set, but {name} names this host as its Slurm controller",
                             "give the controller provision_slurm too (role: controller)")

    def inline_levels(self, where: str) -> list[Level]:
        return self.inline.get(where, [])

    def file_levels(self, where: str) -> list[Level]:
        return [level for base in self.bases for level in self.files.get((base, where), [])]

    def host_levels(self, name: str, groups: list[str]) -> list[Level]:
        """Where a host's variables come from, lowest precedence first, as Ansible orders them (its default
        VARIABLE_PRECEDENCE): the inventories' own group variables, all first and then by the groups' rank;
        group_vars/all beside each source; group_vars/GROUP by rank, beside each source; the host's own
        inline variables; host_vars/HOST beside each source. Below them all, ansible.cfg's defaults; above
        them all, -e/--extra-vars."""
        others = [where_group(g) for g in groups if g != "all"]
        return [*self.defaults,
                *(level for where in ["all", *others] for level in self.inline_levels(where)),
                *self.file_levels("all"),
                *(level for base in self.bases for g in others for level in self.files.get((base, g), [])),
                *self.inline_levels(where_host(name)),
                *self.file_levels(where_host(name)),
                *self.extra]

    def merge_hosts(self, level_vars: dict[Level, dict]) -> dict[str, Host]:
        depth = self.depths()
        priority = {}  # ansible_group_priority: read from the inventories only, never from group_vars files
        for name in self.groups:
            value = merge_levels(level_vars, self.inline_levels(where_group(name))).get("ansible_group_priority", 1)
            priority[name] = value if isinstance(value, int) else 1

        def rank(group: str) -> tuple:  # Ansible's sort_groups: depth, ansible_group_priority, name
            return depth[group], priority[group], group

        hosts, seen_at = {}, {}
        for name, direct in self.host_groups.items():
            self.at(where_host(name))
            groups = sorted(self.ancestors(direct), key=rank)
            levels = self.host_levels(name, groups)
            variables = merge_levels(level_vars, levels)
            if self.templated.intersection(levels):
                variables = self.rendered(name, groups, variables, levels, level_vars)
            settings = None
            if not self.bad_levels.intersection(levels):  # else already reported where it is written
                settings = self.settings_of(_settings_part(variables), where_host(name))
            bases = {key: self.base[level] for level in levels for key in (*ARGS_KEYS, *FILE_VARS)
                     if key in level_vars[level]}
            host = _host(name, groups, variables, settings or HostSettings(), bases)
            host.origins_of = functools.partial(origins_text, level_vars, levels)  # worked out when asked
            host.refused = [problem for level in levels for problem in self.deferred.get(level, [])]
            host.refused += self.host_refused.get(name, []) + self.vaulted_for(name, groups)
            if host.refused:  # not a host provision reaches: its address is not provision's business
                hosts[name] = host
                continue
            named_well = name.isprintable() and not BAD_NAME_CHARS.intersection(name)  # else check_names said so
            addressed = any(key in variables for key in CONNECTION_VARS["host"])
            if host.connection == "ssh" and not addressed and named_well and not is_address(name):
                self.problem(where_host(name), "host", f"the name {name!r} is the address (no ansible_host), and "
                             "it is not a host name or IP address", "set ansible_host, or rename the host")
            target = (str(host.address), str(host.port or 22))  # str: unchecked values may be unhashable
            if host.connection == "ssh" and target in seen_at:
                self.problem(where_host(name), "host", f"{host.address}:{target[1]} is also host "
                             f"{seen_at[target]!r}", "list each machine once; put it in several groups instead")
            seen_at.setdefault(target, name)
            hosts[name] = host
        return hosts

    def vaulted_for(self, name: str, groups: list[str]) -> list[Problem]:
        """A variables file encrypted whole may set anything for its hosts, provision's settings or how to reach
        them: a run that selects one stops, as Ansible's does without the vault password. Its values encrypted
        one by one (!vault) are other roles' secrets, left alone."""
        wheres = [where_group(g) for g in groups] + [where_host(name)]
        return [Problem(file, where, "", "is encrypted whole with Ansible Vault, which provision does not decrypt: "
                        "it may set variables of these hosts", "encrypt only the secret values in it "
                        "(ansible-vault encrypt_string: provision leaves them alone) and decrypt the file")
                for where in wheres for file in self.vaulted_files.get(where, [])]

    def settings_of(self, blocks: dict, where: str) -> HostSettings | None:
        """A host's validated settings; hosts of one rack mostly share them, so one validation serves all
        (HostSettings is only ever copied, never changed in place)."""
        key = self.value_keys.key(blocks)
        if key in self.validated:
            return self.validated[key]
        settings, found = parse_host_settings(blocks, self.file, where)
        problems = as_written(found)
        self.problems += problems
        if not problems:  # a problem names its host: each host with one is validated, and told, on its own
            self.validated[key] = settings
        return settings

    def rendered(self, name: str, groups: list[str], variables: dict, levels: list[Level],
                 level_vars: dict[Level, dict]) -> dict:
        """The host's variables with their templates rendered (templating.py), each checked as it would have
        been where it is written; a problem names the file that wrote the template, the host and the key."""
        context = HostContext({**merge_levels(self.foreign_vars, levels), **variables,
                               "inventory_hostname": name, "inventory_hostname_short": name.split(".")[0],
                               "group_names": [g for g in groups if g != "all"]})
        written = origins(level_vars, levels)
        done = dict(variables)
        for key, value in variables.items():
            if not is_templated(value):
                continue
            origin = next((level for k, level in written.items() if k == key or k.startswith(key + ".")), levels[-1])
            self.file = origin.file
            try:
                done[key] = render(value, context)
            except RenderError as exc:
                problem = Problem(self.file, where_host(name), key, f"cannot render {exc}", "write the value itself, "
                                  "or a template of Jinja's own filters over this host's variables")
                if key in SETTING_OF or key in CHECKED_KEYS:  # how to reach this host: its own runs' problem
                    self.host_refused.setdefault(name, []).append(problem)
                else:
                    self.problems.append(problem)
                done.pop(key)
                continue
            if key in SETTING_OF or key in CHECKED_KEYS:
                self.host_refused.setdefault(name, []).extend(
                    self.connection_problems({key: done[key]}, where_host(name), self.base[origin]))
        self.at(where_host(name))
        return done

    def depths(self) -> dict[str, int]:
        """Longest path from `all`: a child group is always deeper than each of its parents."""
        depth: dict[str, int] = {}

        def of(name: str) -> int:
            if name not in depth:
                depth[name] = 1 + max((of(p) for p in self.groups[name].parents), default=-1)
            return depth[name]

        for name in self.groups:
            of(name)
        return depth

    def ancestors(self, direct: list[str]) -> set[str]:
        found, todo = {"all"}, list(direct)
        while todo:
            name = todo.pop()
            if name not in found:
                found.add(name)
                todo += self.groups[name].parents
        return found


def _inventory_path(base_dir: Path, ssh_config: str) -> Path | None:
    """Relative to the inventory's directory, ~ expanded; None when ~user names no user."""
    try:
        return (base_dir / Path(ssh_config).expanduser()).absolute()
    except RuntimeError:
        return None


def _host(name: str, groups: list[str], variables: dict, settings: HostSettings, bases: dict[str, Path]) -> Host:
    """`bases`: for the ssh args keys and the files named, the directory their paths start at (that of the level
    that set them)."""
    names = _winning_names(variables)
    raw = {setting: variables[name] for setting, name in names.items()}
    try:  # the values as read (a port written as text is the number); each level was validated where written
        reach = ConnectionVars.model_validate(raw).model_dump()
    except ValidationError:  # a problem for the runs that select this host (host.refused)
        reach = raw
    files = {what: _inventory_path(bases.get(names[what], Path.cwd()), reach[what])
             for what in ("ssh_config", "identity_file") if isinstance(reach.get(what), str)}
    connection = "local" if reach.get("connection") == "local" else "ssh"
    ssh_args, user, port = host_args(variables, bases, reach.get("user"), reach.get("port"))
    return Host(name=name, address=reach.get("host") or name, user=user, port=port, connection=connection,
                ssh_config=str(files["ssh_config"]) if files.get("ssh_config") else None,
                become=reach.get("become") is not False, groups=groups, vars=variables, settings=settings,
                identity_file=str(files["identity_file"]) if files.get("identity_file") else None,
                ssh_args=ssh_args, reached_by=names)


def _winning_names(variables: dict) -> dict[str, str]:
    """Each connection setting -> the variable that gives it: of its names, the last one set (Ansible's order)."""
    names = {}
    for what, candidates in CONNECTION_VARS.items():
        for name in candidates:
            if variables.get(name) is not None:
                names[what] = name
    return names


def file_missing(path: Any, base: Path) -> str:
    """Why a file the inventory names (a key file, an ssh_config) is not there to read, or '' (also for a value
    that is not a path: its own check says so). Relative paths start at the inventory's directory."""
    if not isinstance(path, str) or not path:
        return ""
    found = _inventory_path(base, path)
    if found is None:
        return "cannot be read as a path (an unknown ~user?)"
    try:
        missing = "" if found.is_file() else not_a_file(found.stat().st_mode)
    except FileNotFoundError:
        missing = "no such file"
    except OSError as exc:  # a name longer than the file system takes, ...: not a file either
        missing = exc.strerror or str(exc)
    return f"{missing} (relative paths start at {base.absolute()})" if missing else ""


class ValueKeys:
    """Values as keys: equal only for equal values of the same types (1, True and "1" stay apart). A mapping or
    list is a number, the same for every equal one, worked out once per object: YAML's aliases give many hosts
    one object (a 4 KB file can hold a block of a million values), and each host would otherwise walk all of it.
    The values must not change while their keys are in use (one build)."""

    def __init__(self) -> None:
        self.known: dict[int, tuple[Any, int]] = {}  # id -> (the object, kept alive so its id is not reused; its key)
        self.numbers: dict[tuple, int] = {}

    def key(self, value: Any) -> Any:
        if not isinstance(value, (dict, list)):
            return (type(value).__name__, repr(value))
        known = self.known.get(id(value))
        if known is not None and known[0] is value:
            return known[1]
        if isinstance(value, dict):
            shape: tuple = ("dict", tuple(sorted(((type(k).__name__, repr(k)), self.key(v)) for k, v in value.items())))
        else:
            shape = ("list", tuple(self.key(v) for v in value))
        number = self.numbers.setdefault(shape, len(self.numbers))
        self.known[id(value)] = (value, number)
        return number


def origins_text(level_vars: dict[Level, dict], levels: list[Level]) -> dict[str, str]:
    return {key: f"{level.file} ({level.where})" for key, level in origins(level_vars, levels).items()}


def origins(level_vars: dict[Level, dict], levels: list[Level]) -> dict[str, Level]:
    """For each value of the merged variables (a dotted key into provision's blocks: provision_gpu.power_limit), the
    level that set it: what `provision inventory --host` shows beside each value."""
    found: dict[str, Level] = {}
    for level in levels:
        for key, _ in leaves(level_vars.get(level, {})):
            for covered in [k for k in found if k.startswith(key + ".") or key.startswith(k + ".")]:
                del found[covered]  # a value replaces the mapping under it, or a mapping the value it held
            found[key] = level
    return found


def leaves(data: dict, prefix: str = "", keep_empty: bool = False) -> list[tuple[str, Any]]:
    """(dotted key, value) of each value in nested mappings: provision_gpu.clocks.mem. An empty mapping is a value only
    with keep_empty (merged over another, it changes nothing)."""
    found: list[tuple[str, Any]] = []
    for key, value in data.items():
        if isinstance(value, dict) and (value or not keep_empty):
            found += leaves(value, f"{prefix}{key}.", keep_empty)
        else:
            found.append((f"{prefix}{key}", value))
    return found


def merge_levels(level_vars: dict[Level, dict], levels: list[Level]) -> dict:
    merged: dict = {}
    for level in levels:
        merged = deep_merge(merged, level_vars.get(level, {}))
    return merged


def _settings_part(variables: dict) -> dict:
    """provision's blocks under the settings' names: provision_gpu -> gpu."""
    return {VARIABLES[k]: v for k, v in variables.items() if k in VARIABLES}


def settings_problems(blocks: dict, file: str, where: str, partial: bool = False) -> list[Problem]:
    """parse_host_settings' problems, each key named as the inventory writes it (provision_gpu.power_limit)."""
    return as_written(parse_host_settings(blocks, file, where, partial)[1])


def as_written(problems: list[Problem]) -> list[Problem]:
    """Problems of the settings model, each key named as the inventory writes it (gpu.x -> provision_gpu.x)."""
    return [replace(problem, key=_variable_key(problem.key)) for problem in problems]


def _variable_key(key: str) -> str:
    head = re.match(r"[A-Za-z_]*", key)[0]  # type: ignore[index]
    return VARIABLE_OF[head] + key[len(head):] if head in VARIABLE_OF else key


# Keys of provision's blocks that no other role's mapping of the same name would plausibly hold (a Slurm role's
# `slurm: {partition: batch}` or `cluster_name` are its own): one of them is what marks a block as provision's.
TELLING_EXTRA = {"persistence", "clocks", "overrides", "controller"}
GENERIC_FIELDS = {"cluster_name", "conf_dir", "conf_path", "env_file", "master_port", "gpu_type", "wrapper_path",
                  "provision_command"}


@functools.cache
def _telling_fields(block: str) -> set[str]:
    return {key for key in _block_fields(block) if ("_" in key or key in TELLING_EXTRA) and key not in GENERIC_FIELDS}


@functools.cache
def _block_fields(block: str) -> set[str]:
    model = next(m for m in get_args(HostSettings.model_fields[block].annotation)
                 if isinstance(m, type) and issubclass(m, BaseModel))
    return set(model.model_fields)


def where_group(name: str) -> str:
    return "all" if name == "all" else f"group {name}"


def where_host(name: str) -> str:
    return f"host {name}"


def _where(name: str, groups: dict) -> str:
    return where_group(name) if name in groups else where_host(name)


def _add(items: list[str], item: str) -> None:
    if item not in items:
        items.append(item)


def _kind(value: Any) -> str:
    return {list: "a list", str: "a string", int: "a number", float: "a number", bool: "true/false"}.get(
        type(value), type(value).__name__)
