"""--limit: Ansible-like host patterns over an inventory."""

from __future__ import annotations

import fnmatch
from typing import TYPE_CHECKING

from provision.core.errors import InputError, Problem
from provision.core.settings import did_you_mean

if TYPE_CHECKING:
    from provision.inventory.model import Host, Inventory


def select(inventory: Inventory, limit: str | None) -> list[Host]:
    """Hosts matching Ansible-like patterns, in file order.

    Comma-separated host or group names or fnmatch globs on either; the
    plain patterns are united (all hosts when there are none), each
    "&pattern" intersects, each "!pattern" excludes.
    """
    if limit is None:
        return list(inventory.hosts.values())
    patterns = [p.strip() for p in limit.split(",") if p.strip()]
    plain = [p for p in patterns if p[0] not in "!&"]
    chosen = set().union(*(_matching(inventory, p) for p in plain)) if plain else set(inventory.hosts)
    for pattern in patterns:
        if pattern[0] == "&":
            chosen &= _matching(inventory, pattern[1:])
        elif pattern[0] == "!":
            chosen -= _matching(inventory, pattern[1:])
    if not chosen:
        raise InputError([Problem(inventory.path, "", "limit", f"{limit!r} selects no host", _known_names(inventory))])
    return [h for name, h in inventory.hosts.items() if name in chosen]


def _matching(inventory: Inventory, pattern: str) -> set[str]:
    groups = set(fnmatch.filter(inventory.groups, pattern))
    found = set(fnmatch.filter(inventory.hosts, pattern))
    found |= {h.name for h in inventory.hosts.values() if groups.intersection(h.groups)}
    if not found and not groups:
        hint = did_you_mean(pattern, [*inventory.hosts, *inventory.groups]) or _known_names(inventory)
        raise InputError([Problem(inventory.path, "", "limit", f"{pattern!r} matches no host or group", hint)])
    return found


def _known_names(inventory: Inventory) -> str:
    def first(names):
        names = list(names)
        return ", ".join(names[:20]) + (f" (+{len(names) - 20} more)" if len(names) > 20 else "")
    return f"groups: {first(inventory.groups)}; hosts: {first(inventory.hosts)}"
