"""The variables' values as the readers give them: nested mappings merged key by key, compared, walked; a value
Ansible Vault encrypted; values as dictionary keys. Nothing here knows what a variable means."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class Vaulted:
    """A value Ansible Vault encrypted (`!vault`): provision cannot read it."""

    def __repr__(self) -> str:
        return "!vault"


def is_vaulted(value: Any) -> bool:
    """Whether the value is, or holds, a value Ansible Vault encrypted."""
    if isinstance(value, dict):
        return any(is_vaulted(v) for v in value.values())
    if isinstance(value, list):
        return any(is_vaulted(v) for v in value)
    return isinstance(value, Vaulted)


def kind_of(value: Any) -> str:
    """The value's kind as a problem says it: "a list", "a string", ..."""
    return {list: "a list", str: "a string", int: "a number", float: "a number", bool: "true/false"}.get(
        type(value), type(value).__name__)


def deep_merge(base: Mapping[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    """`top` over `base`, key by key into nested mappings; anything else (lists too) is replaced."""
    merged = dict(base)
    for key, value in top.items():
        both_mappings = isinstance(value, dict) and isinstance(merged.get(key), dict)
        merged[key] = deep_merge(merged[key], value) if both_mappings else value
    return merged


def conflicting_keys(a: dict[str, Any], b: dict[str, Any], prefix: str = "") -> list[str]:
    """Dotted keys that a and b both set, to different values."""
    keys = []
    for key in a.keys() & b.keys():
        if isinstance(a[key], dict) and isinstance(b[key], dict):
            keys += conflicting_keys(a[key], b[key], f"{prefix}{key}.")
        elif a[key] != b[key]:
            keys.append(f"{prefix}{key}")
    return sorted(keys)


def leaves(data: dict[str, Any], prefix: str = "", keep_empty: bool = False) -> list[tuple[str, Any]]:
    """(dotted key, value) of each value in nested mappings: provision_gpu.clocks.mem. An empty mapping is a value only
    with keep_empty (merged over another, it changes nothing)."""
    found: list[tuple[str, Any]] = []
    for key, value in data.items():
        if isinstance(value, dict) and (value or not keep_empty):
            found += leaves(value, f"{prefix}{key}.", keep_empty)
        else:
            found.append((f"{prefix}{key}", value))
    return found


class ValueKeys:
    """Values as keys: equal only for equal values of the same types (1, True and "1" stay apart). A mapping or
    list is a number, the same for every equal one, worked out once per object: YAML's aliases give many hosts
    one object (a 4 KB file can hold a block of a million values), and each host would otherwise walk all of it.
    The values must not change while their keys are in use (one build)."""

    def __init__(self) -> None:
        self.known: dict[int, tuple[Any, int]] = {}  # id -> (the object, kept alive so its id is not reused; its key)
        self.numbers: dict[tuple[Any, ...], int] = {}

    def key(self, value: Any) -> Any:
        if not isinstance(value, (dict, list)):
            return (type(value).__name__, repr(value))
        known = self.known.get(id(value))
        if known is not None and known[0] is value:
            return known[1]
        shape: tuple[Any, ...]
        if isinstance(value, dict):
            shape = ("dict", tuple(sorted(((type(k).__name__, repr(k)), self.key(v)) for k, v in value.items())))
        else:
            shape = ("list", tuple(self.key(v) for v in value))
        number = self.numbers.setdefault(shape, len(self.numbers))
        self.known[id(value)] = (value, number)
        return number
