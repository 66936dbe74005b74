"""Each level's variables checked where they are written, and each host's settings once merged: pure steps that
return what they found. provision reads its own variables (provision_*) and Ansible's (ansible_*); every other
variable is another role's, left alone whatever its name, type or value. Problems name keys as the inventory writes
them (provision_gpu.power_limit), though the settings models name their blocks' fields (gpu.power_limit)."""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any, get_args

from provision.capabilities.host import BLOCKS, VARIABLE_OF, VARIABLES, HostSettings, parse_host_settings
from provision.core.errors import Problem
from provision.core.settings import PREFIX, Block, did_you_mean
from provision.inventory.connection import CONNECTIONS, connection_problems, is_connection_key
from provision.inventory.templating import is_templated, without_templates
from provision.inventory.values import ValueKeys, conflicting_keys, deep_merge, is_vaulted, kind_of

OWN = (*VARIABLES, "provision_ssh_config")  # every provision_* variable provision reads
# The names before provision's namespace (issue 43): an inventory still written with them is told what to rename.
OLD_NAMES = {**VARIABLE_OF, "host": "ansible_host", "user": "ansible_user", "port": "ansible_port",
             "connection": "ansible_connection", "become": "ansible_become",
             "identity_file": "ansible_ssh_private_key_file", "become_user": "ansible_become_user",
             "become_method": "ansible_become_method", "ssh_config": "provision_ssh_config"}


NOTHING: Mapping[str, Any] = MappingProxyType({})  # shared by the many levels that hold none


@dataclass(frozen=True, slots=True)  # one per level: an inventory of 10,000 hosts has 10,000 of them
class LevelRead:
    """One level's variables as read: those provision reads, and what was found on the way."""

    variables: dict[str, Any]  # provision_* and ansible_*, as written
    problems: tuple[Problem, ...]  # the inventory's
    deferred: tuple[Problem, ...]  # only for the hosts a run selects (Host.refused)
    foreign: Mapping[str, Any]  # other roles' variables, for templates that name them (NOTHING: none)
    old_names: Mapping[str, str]  # provision's old names written here -> new names
    old_block: bool = False  # a block of provision's is written here under its old name (gpu:, ...)
    bad: bool = False  # its own settings have problems: its hosts' merged settings are not validated again
    templated: bool = False  # a value provision reads is a Jinja template, rendered per host


def read_level(mentions: list[tuple[str, Any]], file: str, where: str, base: Path) -> LevelRead:
    """The variables one level writes (all its mentions merged: where each was written, and what), normalized
    and validated there. `base`: where the relative paths it writes start."""
    merged, merging = merge_mentions(mentions, file, where)
    read = normalize(merged, file, where)
    known = without_templates(read.variables)  # a templated value is checked per host, once rendered
    settings = settings_problems(settings_part(known), file, where, partial=True)
    # What concerns how to reach its hosts is a problem for the runs that select them.
    connection = connection_problems(known, file, where, base)
    return replace(read, problems=(*merging, *read.problems, *settings), deferred=(*read.deferred, *connection),
                   bad=bool(settings), templated=is_templated(read.variables))


def merge_mentions(mentions: list[tuple[str, Any]], file: str, where: str) -> tuple[dict[str, Any], list[Problem]]:
    """A host or group written in several places of one file: its variables merged, the later value winning as in
    Ansible, except that a key of provision's own given two different values is a problem (which one was meant?)."""
    merged: dict[str, Any] = {}
    problems = []
    for written_in, raw in mentions:
        if raw is None:
            continue
        if not isinstance(raw, dict):
            problems.append(Problem(file, where, "", f"variables must be a mapping, not {kind_of(raw)}"))
            continue
        raw = {str(k): v for k, v in raw.items()}
        for key in (k for k in conflicting_keys(merged, raw) if k.lower().startswith(PREFIX)):
            problems.append(Problem(file, where, key, f"set to different values where {where} is written more "
                                    f"than once (again in {written_in})", "set it in one place"))
        merged = deep_merge(merged, raw)
    return merged, problems


def normalize(raw: dict[str, Any], file: str, where: str) -> LevelRead:
    """The variables provision reads, as written: its own (provision_*: another name with that prefix is a
    problem) and Ansible's (ansible_*). Every other variable is another role's, left alone. Passwords, and
    connections provision cannot use, are refused for the hosts a run selects; so is a vaulted value provision
    would need."""
    variables: dict[str, Any] = {}
    problems: list[Problem] = []
    deferred: list[Problem] = []
    foreign: dict[str, Any] = {}
    old_names: dict[str, str] = {}
    old_block = False
    for key, value in raw.items():
        if key.lower().startswith(PREFIX) and key not in OWN:  # Provision_gpu is a slip too
            problems.append(Problem(file, where, key, f"unknown variable {key!r}: provision_ names provision's "
                                         f"variables ({', '.join(OWN)})", did_you_mean(key, list(OWN))
                                         or "rename it: the provision_ prefix is provision's own"))
        elif is_vaulted(value) and (key in OWN or is_connection_key(key)):
            deferred.append(Problem(file, where, key, "is encrypted with Ansible Vault, which provision does "
                                         "not decrypt", "write the value in the clear (it is not a secret provision "
                                         "needs) or leave it out"))
        elif key.startswith("ansible_") and "pass" in key:  # never kept: a secret is neither shown nor logged
            deferred.append(Problem(file, where, key, "is a password: provision reads none from an inventory",
                                         "use SSH keys; a sudo password is asked once at run time (-K)"))
        elif key == "ansible_connection" and isinstance(value, str) and value not in CONNECTIONS:
            deferred.append(Problem(file, where, key, f"is {value!r}: provision reaches hosts by SSH (ssh, "
                                         "paramiko, smart) or works on this machine (local)", ""))
        elif key in OWN or key.startswith("ansible_"):
            variables[key] = value
        else:  # another role's variable (an inventory serves many): not provision's to read or judge
            if key in OLD_NAMES:
                old_names.setdefault(key, OLD_NAMES[key])
                old_block = old_block or is_old_block(key, value)
            foreign[key] = value  # a template may still name it
    return LevelRead(variables, tuple(problems), tuple(deferred), foreign or NOTHING, old_names or NOTHING, old_block)


def is_old_block(key: str, value: Any) -> bool:
    """Whether a variable named as one of provision's blocks before its namespace (gpu:, ...) is that block: a
    mapping that is, key for key, a valid block of provision's. Another role's `gpu: true` or `slurm: {...}` is
    not, and then nothing in its file is taken for an old name."""
    if key not in BLOCKS or key == "custom" or not isinstance(value, dict) or not value:
        return False
    model = block_model(key)
    keys = set(map(str, value))
    return bool(keys <= set(model.model_fields) and keys & telling_fields(model)
                and not parse_host_settings({key: value}, "", "", partial=True)[1])


def old_name_problem(file: str, renames: dict[str, str]) -> Problem:
    """One problem per file written with provision's old names: every rename it needs."""
    return Problem(file, "", "", "uses provision's names from before its namespace: rename "
                   + ", ".join(f"{old} to {new}" for old, new in renames.items()),
                   "provision reads only its own provision_* variables and Ansible's ansible_* ones, so other "
                   "roles' variables (gpu, user, slurm, ...) are never taken for provision's")


class SettingsCache:
    """A host's validated settings; hosts of one rack mostly share them, so one validation serves all
    (HostSettings is only ever copied, never changed in place)."""

    def __init__(self) -> None:
        self.validated: dict[Any, HostSettings | None] = {}  # the blocks' key -> their settings
        self.value_keys = ValueKeys()

    def settings_of(self, blocks: dict[str, Any], file: str, where: str) -> tuple[HostSettings | None, list[Problem]]:
        key = self.value_keys.key(blocks)
        if key in self.validated:
            return self.validated[key], []
        settings, found = parse_host_settings(blocks, file, where)
        problems = as_written(found)
        if not problems:  # a problem names its host: each host with one is validated, and told, on its own
            self.validated[key] = settings
        return settings, problems


def settings_part(variables: dict[str, Any]) -> dict[str, Any]:
    """provision's blocks under the settings' names: provision_gpu -> gpu."""
    return {VARIABLES[k]: v for k, v in variables.items() if k in VARIABLES}


def settings_problems(blocks: dict[str, Any], file: str, where: str, partial: bool = False) -> list[Problem]:
    """parse_host_settings' problems, each key named as the inventory writes it (provision_gpu.power_limit)."""
    return as_written(parse_host_settings(blocks, file, where, partial)[1])


def as_written(problems: list[Problem]) -> list[Problem]:
    """Problems of the settings model, each key named as the inventory writes it (gpu.x -> provision_gpu.x)."""
    return [replace(problem, key=_variable_key(problem.key)) for problem in problems]


def _variable_key(key: str) -> str:
    match = re.match(r"[A-Za-z_]*", key)
    head = match[0] if match else ""
    return VARIABLE_OF[head] + key[len(head):] if head in VARIABLE_OF else key


@functools.cache
def telling_fields(model: type[Block]) -> frozenset[str]:
    """The keys of a block no other role's mapping of the same name would plausibly hold (a Slurm role's `slurm:
    {partition: batch}` or `cluster_name` are its own): one of them marks a block as provision's. Fields named in
    several words, and those the block declares telling, less those it declares generic (core/settings.py Block)."""
    return frozenset(key for key in model.model_fields
                     if ("_" in key or key in model.telling_fields) and key not in model.generic_fields)


@functools.cache
def block_model(block: str) -> type[Block]:
    """The settings model of one of HostSettings' blocks: GpuSettings for gpu."""
    return next(m for m in get_args(HostSettings.model_fields[block].annotation)
                if isinstance(m, type) and issubclass(m, Block))
