"""Read an inventory: each -i source's documents (sources.py: files, directories, scripts), the variables files
beside them, then build.py; or this machine as the one host.

Every read and every expansion on the way is bounded, each limit named in its error: the files (files.py: regular
files, MAX_FILE_BYTES), YAML aliases (formats/yaml.py, MAX_ALIAS_VALUES), INI host ranges (formats/ini.py,
MAX_RANGE_HOSTS), a script's time and output (formats/script.py), a symbolic link loop (sources.py), and the
templates (templating.py: per value, and MAX_LOAD_STEPS for the whole inventory, opened here)."""

from __future__ import annotations

import dataclasses
import shlex
from pathlib import Path
from typing import Any, Sequence

from provision.core.errors import InputError, Problem
from provision.inventory.ansiblecfg import AnsibleConfig
from provision.inventory.extravars import parse_extra_vars
from provision.inventory.build import Builder
from provision.inventory.formats import yaml as yaml_format
from provision.inventory.model import Document, Inventory, where_group, where_host
from provision.inventory.sources import read_source, vars_files
from provision.inventory.templating import LOAD_SPENT, load_budget


def load_inventory(sources: str | Path | Sequence[str | Path], config: AnsibleConfig | None = None,
                   extra_vars: Sequence[str] = (), remote_user: str | None = None) -> Inventory:
    """Read and validate an inventory (one source, or several merged in order, as repeated -i), with the
    connection defaults of the user's Ansible configuration and -e/--extra-vars, if given; raises InputError
    listing every problem. `remote_user` (-u) is ansible-playbook's: a default over ansible.cfg's remote_user,
    under every ansible_user or ansible_ssh_user the inventory sets."""
    names = [str(sources)] if isinstance(sources, (str, Path)) else [str(s) for s in sources]
    builder = Builder()
    if config is not None and config.variables:
        builder.add_defaults(config.file or "environment", config.variables, config.base_dir)
    if remote_user is not None:  # the later default wins
        builder.add_defaults("command line (-u)", {"ansible_user": remote_user}, Path.cwd())
    for origin, variables in parse_extra_vars(tuple(extra_vars)):
        builder.add_extra_vars(origin, variables)
    for source in names:
        try:
            for document in read_source(source):
                builder.read(document)
        except InputError as exc:
            builder.problems += exc.problems
    for base in builder.bases:
        for kind, name, file in vars_files(base, builder.groups, builder.host_groups):
            try:
                data = yaml_format.read_vars(file)
            except InputError as exc:
                builder.problems += exc.problems
                continue
            builder.add_vars_file(base, where_group(name) if kind == "group" else where_host(name), str(file), data)
    with load_budget():
        try:
            inventory = builder.build()
        except InputError as exc:
            raise InputError(_spent_once(exc.problems)) from None
    inventory.path = names[0] if len(names) == 1 else " ".join(f"-i {shlex.quote(name)}" for name in names)
    inventory.sources = names
    return inventory


def _spent_once(problems: list[Problem]) -> list[Problem]:
    """The rendering budget, once spent, refuses every template after: said at the first, with how many more."""
    spent = [problem for problem in problems if LOAD_SPENT in problem.message]
    if len(spent) < 2:
        return problems
    first = dataclasses.replace(spent[0], message=f"{spent[0].message} (and {len(spent) - 1:,} more after it)")
    return [first if problem is spent[0] else problem for problem in problems
            if problem is spent[0] or LOAD_SPENT not in problem.message]


def local_inventory(vars: dict[str, Any] | None = None) -> Inventory:
    """This machine as the one host "localhost" (connection local), its settings validated from `vars`."""
    builder = Builder()
    builder.read(Document("<local>", {"all": {"hosts": {"localhost": {**(vars or {}), "ansible_connection": "local"}}}},
                          Path.cwd(), vars_dir=False))
    inventory = builder.build()
    inventory.path = "<local>"
    return inventory
