"""Which variables a host ends with: the levels they are written at, in Ansible's order, merged.

- Precedence, as Ansible's (its default VARIABLE_PRECEDENCE; the differential tests hold it against
  ansible-inventory): ansible.cfg's defaults < the inventories' own variables of all, then of each group by
  rank < group_vars/all < group_vars/GROUP by rank < the host's own variables < host_vars/HOST < -e. Groups are
  ranked by depth (longest path from all), then by ansible_group_priority (default 1, read from the
  inventories only), then by name: of two sibling groups that set the same key, the one whose name sorts last
  wins, wherever it is written. Several sources: each level in source order, the later winning.
- Mappings merge key by key at every level (a group sets provision_gpu.power_limit, a host adds
  provision_gpu.clocks: both apply); anything else, lists included, replaces. Ansible's default
  (hash_behaviour=replace) would replace the whole block instead: provision's blocks are meant to be refined
  level by level.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Mapping
from typing import Any, Callable

from provision.inventory.model import Group, where_group, where_host
from provision.inventory.values import deep_merge, leaves


@dataclass(frozen=True)
class Level:
    """One place variables are written: a host's or group's inline variables in one inventory file, or one
    variables file (group_vars/gpu.yml, a file in host_vars/node1/)."""

    where: str  # "all", "group gpu", "host node1"
    file: str


@dataclass
class Levels:
    """Where variables are written, each kind in the order read: what host_levels puts in Ansible's order."""

    defaults: list[Level] = field(default_factory=list)  # ansible.cfg's remote_user & co.: below everything else
    inline: dict[str, list[Level]] = field(default_factory=dict)  # "where" -> its inline levels, in source order
    files: dict[tuple[Path, str], list[Level]] = field(default_factory=dict)  # (vars dir, "where") -> its files
    bases: list[Path] = field(default_factory=list)  # the sources' directories, in order (group_vars/ beside them)
    extra: list[Level] = field(default_factory=list)  # -e/--extra-vars: above everything else

    def inline_levels(self, where: str) -> list[Level]:
        return self.inline.get(where, [])

    def file_levels(self, where: str) -> list[Level]:
        return [level for base in self.bases for level in self.files.get((base, where), [])]

    def group_levels(self, name: str) -> list[Level]:
        """A group's own variables: its inline levels, then its variables files."""
        return self.inline_levels(where_group(name)) + self.file_levels(where_group(name))

    def host_levels(self, name: str, groups: list[str]) -> list[Level]:
        """Where a host's variables come from, lowest precedence first, as Ansible orders them (its default
        VARIABLE_PRECEDENCE): the inventories' own group variables, all first and then by the groups' rank;
        group_vars/all beside each source; group_vars/GROUP by rank, beside each source; the host's own
        inline variables; host_vars/HOST beside each source. Below them all, ansible.cfg's defaults; above
        them all, -e/--extra-vars. `groups`: the host's, ranked."""
        others = [where_group(g) for g in groups if g != "all"]
        return [*self.defaults,
                *(level for where in ["all", *others] for level in self.inline_levels(where)),
                *self.file_levels("all"),
                *(level for base in self.bases for g in others for level in self.files.get((base, g), [])),
                *self.inline_levels(where_host(name)),
                *self.file_levels(where_host(name)),
                *self.extra]


def merge_levels(level_vars: Mapping[Level, Mapping[str, Any]], levels: list[Level]) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for level in levels:
        merged = deep_merge(merged, level_vars.get(level, {}))
    return merged


def group_ranker(groups: dict[str, Group], levels: Levels,
                 level_vars: dict[Level, dict[str, Any]]) -> Callable[[str], tuple[int, int, str]]:
    """Ansible's sort_groups: depth, ansible_group_priority (read from the inventories only, never from
    group_vars files), name."""
    depth = depths(groups)
    priority = {}
    for name in groups:
        value = merge_levels(level_vars, levels.inline_levels(where_group(name))).get("ansible_group_priority", 1)
        priority[name] = value if isinstance(value, int) else 1
    return lambda group: (depth[group], priority[group], group)


def depths(groups: dict[str, Group]) -> dict[str, int]:
    """Longest path from `all`: a child group is always deeper than each of its parents."""
    depth: dict[str, int] = {}

    def of(name: str) -> int:
        if name not in depth:
            depth[name] = 1 + max((of(p) for p in groups[name].parents), default=-1)
        return depth[name]

    for name in groups:
        of(name)
    return depth


def ancestors(groups: dict[str, Group], direct: list[str]) -> set[str]:
    """The groups a host written in `direct` is in: those and their ancestors, all included."""
    found, todo = {"all"}, list(direct)
    while todo:
        name = todo.pop()
        if name not in found:
            found.add(name)
            todo += groups[name].parents
    return found


def origins_text(level_vars: dict[Level, dict[str, Any]], levels: list[Level]) -> dict[str, str]:
    return {key: f"{level.file} ({level.where})" for key, level in origins(level_vars, levels).items()}


def origins(level_vars: dict[Level, dict[str, Any]], levels: list[Level]) -> dict[str, Level]:
    """For each value of the merged variables (a dotted key into provision's blocks: provision_gpu.power_limit), the
    level that set it: what `provision inventory --host` shows beside each value."""
    found: dict[str, Level] = {}
    for level in levels:
        for key, _ in leaves(level_vars.get(level, {})):
            for covered in [k for k in found if k.startswith(key + ".") or key.startswith(k + ".")]:
                del found[covered]  # a value replaces the mapping under it, or a mapping the value it held
            found[key] = level
    return found
