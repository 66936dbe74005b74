"""Inventory documents read into one inventory's shape, as Ansible's InventoryData holds it: the groups (parents,
children, hosts in the order written), each host's groups, the file that first names each, and every place
variables are written (a Level) with what is written there. The documents have the shape of an Ansible YAML
inventory (all: {hosts, children, vars}, nested groups); the readers (formats/) put INI files and scripts' output
in that shape, sources.py finds them and the group_vars/ and host_vars/ files beside them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from provision.core.errors import Problem
from provision.core.settings import did_you_mean
from provision.inventory.model import Document, Group, where_group, where_host
from provision.inventory.precedence import Level, Levels
from provision.inventory.values import Vaulted, kind_of

GROUP_KEYS = ("hosts", "children", "vars")
BAD_NAME_CHARS = set(",!&*?[] \t")  # these would break --limit patterns


class Documents:
    """The inventory read so far: each document after those read before it, then the variables files."""

    def __init__(self) -> None:
        self.file = ""  # the last document read: a problem about the whole inventory names it
        self.groups: dict[str, Group] = {"all": Group("all", [], [], [], {})}
        self.host_groups: dict[str, list[str]] = {}  # host -> groups it is written in, in order
        self.written_in: dict[str, str] = {}  # "where" -> the first file that names that host or group
        self.members: dict[str, set[str]] = {}  # group -> its hosts, as Group.hosts (a list: the order written)
        self.levels = Levels()
        self.mentions: dict[Level, list[tuple[str, Any]]] = {}  # level -> (where written, its variables), in order
        self.base: dict[Level, Path] = {}  # relative paths (ssh_config, key files) written there start here
        self.skipped: list[str] = []  # what was read past, as Ansible's warnings say it
        self.unread: list[str] = []  # variables files encrypted whole with Ansible Vault
        self.vaulted_files: dict[str, list[str]] = {}  # "where" -> its variables files encrypted whole

    def read(self, document: Document) -> list[Problem]:
        """One inventory document (a file, a script's output): its problems."""
        self.file = document.file
        bases = self.levels.bases
        if document.vars_dir and document.base_dir.resolve() not in {b.resolve() for b in bases}:
            bases.append(document.base_dir)
        problems: list[Problem] = []
        self._read_top(document, problems)
        return problems

    def add_defaults(self, file: str, variables: dict[str, Any], base: Path) -> None:
        """Connection settings every host has unless its inventory says otherwise (ansible.cfg's)."""
        level = Level("all", file)
        self.levels.defaults.append(level)
        self._add_level(level, base, ("all", variables))

    def add_extra_vars(self, origin: str, variables: dict[str, Any]) -> None:
        """-e/--extra-vars (extravars.py): every host's highest level; relative paths start here."""
        level = Level("extra vars", origin)
        self.levels.extra.append(level)
        self._add_level(level, Path.cwd(), ("extra vars", variables))

    def add_vars_file(self, base: Path, where: str, file: str, data: Any) -> None:
        """A group_vars/ or host_vars/ file beside a source (`base`), for the group or host `where`."""
        if isinstance(data, Vaulted):
            self.unread.append(file)
            self.vaulted_files.setdefault(where, []).append(file)
            return
        level = Level(where, file)
        self.levels.files.setdefault((base, where), []).append(level)
        self._add_level(level, base, (where, data))

    def _add_level(self, level: Level, base: Path, mention: tuple[str, Any]) -> None:
        self.base[level] = base
        self.mentions[level] = [mention]

    def file_of(self, where: str) -> str:
        """The file that first names this host or group."""
        return self.written_in.get(where, self.file)

    def _read_top(self, document: Document, problems: list[Problem]) -> None:
        data = document.data
        if data is None:  # an empty file: one of a directory's may be; all of them empty is said in build()
            return
        if not isinstance(data, dict):
            problems.append(Problem(self.file, "", "", f"the top level must be a mapping of groups, not "
                                    f"{kind_of(data)}", "start with all: {hosts: ..., children: ..., vars: ...}"))
            return
        if "all" in data:
            self._read_group("all", data["all"], None, (), document.base_dir, problems)
        for name, body in data.items():  # groups at the top level: children of all if no group names them
            if name != "all" and body is not None and not isinstance(body, dict):  # Ansible's yaml plugin too
                self._skip(f"group {name!r} skipped: a group is a mapping of {', '.join(GROUP_KEYS)}, "
                           f"not {kind_of(body)}")
            elif name != "all":
                self._read_group(str(name), body, None, (), document.base_dir, problems)

    def _read_group(self, name: str, body: Any, parent: str | None, path: tuple[str, ...], base: Path,
                    problems: list[Problem]) -> None:
        where = where_group(name)
        if name in path:
            problems.append(Problem(self.file, where, "children", f"groups contain each other: "
                                    f"{' -> '.join((*path, name))}", "a group cannot be its own descendant"))
            return
        group = self.groups.setdefault(name, Group(name, [], [], [], {}))
        self.written_in.setdefault(where, self.file)
        if parent is not None:
            _add(group.parents, parent)
            _add(self.groups[parent].children, name)
        if body is None:
            return
        if not isinstance(body, dict):
            problems.append(Problem(self.file, where, "", f"a group is a mapping of {', '.join(GROUP_KEYS)}, "
                                    f"not {kind_of(body)}"))
            return
        for key in body:
            if key not in GROUP_KEYS:  # Ansible's yaml plugin warns and reads on
                hint = did_you_mean(str(key), list(GROUP_KEYS)) or "variables go under vars:"
                self._skip(f"{where}: key {key!r} skipped: a group holds only {', '.join(GROUP_KEYS)} ({hint})")
        if "vars" in body:
            self._mention(where, where, body["vars"], base)
        for host, host_vars in self._mapping(body, "hosts", where, problems).items():
            host = str(host)
            if host not in self.members.setdefault(name, set()):
                self.members[name].add(host)
                group.hosts.append(host)
            _add(self.host_groups.setdefault(host, []), name)
            self.written_in.setdefault(where_host(host), self.file)
            self._mention(where_host(host), where, host_vars, base)
        for child, child_body in self._mapping(body, "children", where, problems).items():
            self._read_group(str(child), child_body, name, (*path, name), base, problems)

    def _skip(self, message: str) -> None:
        """What Ansible reads past with a warning: said as one, naming the file."""
        self.skipped.append(f"{self.file}: {message}")

    def _mention(self, where: str, written_in: str, variables: Any, base: Path) -> None:
        level = Level(where, self.file)
        if level not in self.mentions:
            self.mentions[level] = []
            self.levels.inline.setdefault(where, []).append(level)
            self.base[level] = base
        self.mentions[level].append((written_in, variables))

    def _mapping(self, body: dict[str, Any], key: str, where: str, problems: list[Problem]) -> dict[Any, Any]:
        value = body.get(key)
        if value is None:
            return {}
        if not isinstance(value, dict):
            problems.append(Problem(self.file, where, key, f"{key} must be a mapping of names (each followed by a "
                                    f"colon), not {kind_of(value)}",
                                    f"write `{key}:` then one `name:` per line, indented"))
            return {}
        return value

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

    def name_problems(self) -> list[Problem]:
        """Names that would break the files named after them or --limit's patterns."""
        problems = []
        for name in [*self.groups, *self.host_groups]:
            where = where_group(name) if name in self.groups else where_host(name)
            if any(not c.isprintable() for c in name):  # a newline would add lines to the files named after it
                problems.append(Problem(self.file_of(where), where, "", f"name {name!r} has a control character",
                                        "host and group names are one line of printable text; rename it"))
            elif BAD_NAME_CHARS.intersection(name) or not name:
                problems.append(Problem(self.file_of(where), where, "", f"name {name!r} has a space or one of "
                                        ", ! & * ? [ ]", "these would break --limit patterns; rename it"))
        for host in self.host_groups:
            if host in self.groups:
                problems.append(Problem(self.file_of(where_host(host)), where_host(host), "", f"{host!r} is both a "
                                        "host and a group name", "rename one: --limit could not tell them apart"))
        return problems

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


def well_named(name: str) -> bool:
    """Whether name_problems passes the name."""
    return name.isprintable() and not BAD_NAME_CHARS.intersection(name)


def _add(items: list[str], item: str) -> None:
    if item not in items:
        items.append(item)
