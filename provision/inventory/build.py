"""From inventory documents and variables files to hosts with validated settings: which hosts, how to reach
them, and the settings each should have. The steps, each its own module (see inventories/README.md for the rules):

- documents.py reads the documents into groups, hosts and the levels where variables are written;
- validate.py reads each level's variables, checked where written, and each host's merged settings;
- precedence.py orders a host's levels as Ansible does and merges them (provision's blocks key by key);
- templating.py renders the templates in a host's variables, connection.py makes the Host from them;
- the capabilities' rules across hosts (registry.HOST_RULES) check what one host's blocks cannot know.

A host or group written in several places of one file: its variables merge, the later value winning as in
Ansible, except that a key of provision's own given two different values there is an error. In different files,
the later wins. What concerns how to reach a host is refused for the runs that select it (Host.refused).
Everything is validated before anything connects, where it is written (file, host or group, key): all problems
are collected and raised as one InputError.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from provision.capabilities.host import HostSettings
from provision.capabilities.registry import HOST_REFUSALS, HOST_RULES
from provision.core.errors import InputError, Problem
from provision.core.sshargs import ARGS_KEYS, is_address
from provision.inventory.connection import CONNECTION_VARS, FILE_VARS, SETTING_OF, connection_problems, host_of
from provision.inventory.connection import is_connection_key
from provision.inventory.documents import Documents, well_named
from provision.inventory.model import Built, Document, Host, Inventory, Written, where_group, where_host
from provision.inventory.precedence import Level, ancestors, group_ranker, merge_levels, origins, origins_text
from provision.inventory.templating import HostContext, RenderError, is_templated, render
from provision.inventory.validate import LevelRead, SettingsCache, old_name_problem, read_level, settings_part
from provision.inventory.values import leaves as leaves  # commands/inventory.py reads it here

__all__ = ["SETTING_OF", "Builder", "leaves"]


class Builder:
    """Reads the documents and the variables files beside them (documents.py), then builds the Inventory from
    them in steps that each return what they found: structure, each level's variables, each host."""

    def __init__(self) -> None:
        self.documents = Documents()
        self.problems: list[Problem] = []  # the sources' and variables files' problems, as they are read

    @property
    def groups(self) -> dict[str, Any]:
        return self.documents.groups

    @property
    def host_groups(self) -> dict[str, list[str]]:
        return self.documents.host_groups

    @property
    def bases(self) -> list[Path]:
        return self.documents.levels.bases

    def read(self, document: Document) -> None:
        """One inventory document (a file, a script's output), after those read before it."""
        self.problems += self.documents.read(document)

    def add_defaults(self, file: str, variables: dict[str, Any], base: Path) -> None:
        self.documents.add_defaults(file, variables, base)

    def add_extra_vars(self, origin: str, variables: dict[str, Any]) -> None:
        self.documents.add_extra_vars(origin, variables)

    def add_vars_file(self, base: Path, where: str, file: str, data: Any) -> None:
        self.documents.add_vars_file(base, where, file, data)

    def build(self) -> Inventory:
        docs = self.documents
        docs.reconcile()
        problems = list(self.problems)
        if not docs.host_groups and not problems:
            empty = len(docs.groups) == 1 and not docs.mentions
            problems.append(Problem(docs.file, "", "", "the inventory is empty" if empty else
                                    "the inventory has no hosts", "start with all: {hosts: ..., children: ..., "
                                    "vars: ...}" if empty else "add hosts under all: hosts: or under a group"))
        problems += docs.name_problems()
        cycle = docs.find_cycle()
        if cycle:
            problems.append(Problem(docs.file_of(where_group(cycle[0])), where_group(cycle[0]), "children",
                                    f"groups contain each other: {' -> '.join(cycle)}",
                                    "a group cannot be its own descendant; remove one of these children"))
        reads = {level: read_level(mentions, level.file, level.where, docs.base[level])
                 for level, mentions in docs.mentions.items()}
        problems[:0] = _old_name_problems(reads)
        problems += [problem for read in reads.values() for problem in read.problems]
        hosts = HostsBuilt(docs, reads)
        if not cycle:
            problems += hosts.build()
        for name, group in docs.groups.items():
            group.vars = merge_levels(hosts.level_vars, docs.levels.group_levels(name))
        if not cycle:
            built = Built(hosts.hosts, docs.groups, [Written(level.file, level.where, read.variables)
                                                     for level, read in reads.items()])
            problems += [problem for rule in HOST_RULES for problem in rule(built)]
        if problems:
            raise InputError(problems)
        foreign = sorted({key for read in reads.values() for key in read.foreign})
        return Inventory("", hosts.hosts, docs.groups, foreign, unread=docs.unread, skipped=docs.skipped)


def _old_name_problems(reads: dict[Level, LevelRead]) -> list[Problem]:
    """One problem per file written with provision's old names, if a block of provision's there is one."""
    renames: dict[str, dict[str, str]] = {}
    old_blocks: dict[str, None] = {}
    for level, read in reads.items():
        for old, new in read.old_names.items():
            renames.setdefault(level.file, {}).setdefault(old, new)
        if read.old_block:
            old_blocks[level.file] = None
    return [old_name_problem(file, renames[file]) for file in old_blocks]


class HostsBuilt:
    """Each host from the levels read: its variables merged in Ansible's order, rendered, validated, refused."""

    def __init__(self, docs: Documents, reads: dict[Level, LevelRead]) -> None:
        self.docs = docs
        self.level_vars = {level: read.variables for level, read in reads.items()}
        self.foreign_vars = {level: read.foreign for level, read in reads.items() if read.foreign}
        self.templated = {level for level, read in reads.items() if read.templated}
        self.bad = {level for level, read in reads.items() if read.bad}  # their problems are said where written
        self.deferred = {level: read.deferred for level, read in reads.items() if read.deferred}
        self.hosts: dict[str, Host] = {}
        self.settings = SettingsCache()

    def build(self) -> list[Problem]:
        """The hosts, in the order first written; the problems found."""
        docs, problems = self.docs, []
        rank = group_ranker(docs.groups, docs.levels, self.level_vars)
        seen_at: dict[tuple[str, str], str] = {}
        for name, direct in docs.host_groups.items():
            groups = sorted(ancestors(docs.groups, direct), key=rank)
            host, found = self.host(name, groups)
            problems += found
            self.hosts[name] = host
            if not host.refused:  # else not a host provision reaches: its address is not provision's business
                problems += _address_problems(host, seen_at)
            host.refused += [problem for refusal in HOST_REFUSALS for problem in refusal(host)]
        return problems

    def host(self, name: str, groups: list[str]) -> tuple[Host, list[Problem]]:
        docs = self.docs
        file, where = docs.file_of(where_host(name)), where_host(name)
        levels = docs.levels.host_levels(name, groups)
        variables = merge_levels(self.level_vars, levels)
        problems: list[Problem] = []
        refused: list[Problem] = []
        if self.templated.intersection(levels):
            variables, problems, refused = self.rendered(name, groups, variables, levels)
        settings = None
        if not self.bad.intersection(levels):  # else already reported where it is written
            settings, found = self.settings.settings_of(settings_part(variables), file, where)
            problems += found
        bases = {key: docs.base[level] for level in levels for key in (*ARGS_KEYS, *FILE_VARS)
                 if key in self.level_vars[level]}
        host = host_of(name, groups, variables, settings or HostSettings(), bases)
        host.written_in = file
        host.origins_of = functools.partial(origins_text, self.level_vars, levels)  # worked out when asked
        host.refused = [problem for level in levels for problem in self.deferred.get(level, ())]
        host.refused += refused + _vaulted_for(docs.vaulted_files, name, groups)
        return host, problems

    def rendered(self, name: str, groups: list[str], variables: dict[str, Any],
                 levels: list[Level]) -> tuple[dict[str, Any], list[Problem], list[Problem]]:
        """The host's variables with their templates rendered (templating.py), each checked as it would have
        been where it is written; a problem names the file that wrote the template, the host and the key.
        Returns the variables, the problems, and what refuses the host's runs (how to reach it)."""
        context = HostContext({**merge_levels(self.foreign_vars, levels), **variables,
                               "inventory_hostname": name, "inventory_hostname_short": name.split(".")[0],
                               "group_names": [g for g in groups if g != "all"]})
        written = origins(self.level_vars, levels)
        done = dict(variables)
        problems: list[Problem] = []
        refused: list[Problem] = []
        for key, value in variables.items():
            if not is_templated(value):
                continue
            origin = next((level for k, level in written.items() if k == key or k.startswith(key + ".")), levels[-1])
            try:
                done[key] = render(value, context)
            except RenderError as exc:
                problem = Problem(origin.file, where_host(name), key, f"cannot render {exc}", "write the value "
                                  "itself, or a template of Jinja's own filters over this host's variables")
                (refused if is_connection_key(key) else problems).append(problem)  # how to reach it: its own runs'
                done.pop(key)
                continue
            if is_connection_key(key):
                refused += connection_problems({key: done[key]}, origin.file, where_host(name),
                                               self.docs.base[origin])
        return done, problems, refused


def _address_problems(host: Host, seen_at: dict[tuple[str, str], str]) -> list[Problem]:
    """A host reached by its name must be named as an address; two hosts at one address are one machine."""
    problems = []
    addressed = any(key in host.vars for key in CONNECTION_VARS["host"])
    if host.connection == "ssh" and not addressed and well_named(host.name) and not is_address(host.name):
        problems.append(Problem(host.written_in, host.where, "host", f"the name {host.name!r} is the address (no "
                                "ansible_host), and it is not a host name or IP address",
                                "set ansible_host, or rename the host"))
    target = (str(host.address), str(host.port or 22))  # str: unchecked values may be unhashable
    if host.connection == "ssh" and target in seen_at:
        problems.append(Problem(host.written_in, host.where, "host", f"{host.address}:{target[1]} is also host "
                                f"{seen_at[target]!r}", "list each machine once; put it in several groups instead"))
    seen_at.setdefault(target, host.name)
    return problems


def _vaulted_for(vaulted_files: dict[str, list[str]], name: str, groups: list[str]) -> list[Problem]:
    """A variables file encrypted whole may set anything for its hosts, provision's settings or how to reach
    them: a run that selects one stops, as Ansible's does without the vault password. Its values encrypted
    one by one (!vault) are other roles' secrets, left alone."""
    wheres = [where_group(g) for g in groups] + [where_host(name)]
    return [Problem(file, where, "", "is encrypted whole with Ansible Vault, which provision does not decrypt: "
                    "it may set variables of these hosts", "encrypt only the secret values in it "
                    "(ansible-vault encrypt_string: provision leaves them alone) and decrypt the file")
            for where in wheres for file in vaulted_files.get(where, [])]
