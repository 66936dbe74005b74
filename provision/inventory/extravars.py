"""-e/--extra-vars, as Ansible reads them: `key=value key2=value2` (values are text), a YAML or JSON mapping
(`{"gpu": {"power_limit": 180}}`), or `@FILE` of one. They are every selected host's highest level; provision's
blocks still merge key by key (Ansible's would replace a whole block). A mapping given whole, or in @FILE, is read
as the inventory's YAML is (formats/yaml.py: a key written twice is refused, aliases are bounded); @FILE is a
regular file of at most files.MAX_FILE_BYTES."""

from __future__ import annotations

import shlex
from typing import Any

from provision.core.errors import InputError, Problem
from provision.inventory.formats import yaml as yaml_format


def parse_extra_vars(values: tuple[str, ...] | list[str]) -> list[tuple[str, dict[str, Any]]]:
    """(where it came from, its variables) for each -e, in order; InputError for one that is not a mapping."""
    parsed = []
    for value in values:
        origin = value[1:] if value.startswith("@") else f"-e {_shown(value)}"
        data = _read(value)
        if data is None:
            continue
        if not isinstance(data, dict):
            raise InputError([Problem(origin, "", "", "is not a mapping of variables",
                                      "give key=value pairs, a YAML or JSON mapping, or @FILE of one")])
        parsed.append((origin, data))
    return parsed


def _read(value: str) -> Any:
    if value.startswith("@"):
        return yaml_format.read_vars(value[1:])
    text = value.strip()
    if text.startswith(("{", "[")):
        return yaml_format.parse(text, "-e", invalid=f"{_shown(value)!r} is not valid YAML or JSON")
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise InputError([Problem("-e", "", "", f"{value!r}: {exc}", "close the quote")]) from None
    pairs = {}
    for word in words:
        key, equals, rest = word.partition("=")
        if not equals or not key:
            raise InputError([Problem("-e", "", "", f"{word!r} is not key=value",
                                      "key=value gives text; give a mapping whole, as YAML or JSON: "
                                      "-e '{\"gpu\": {\"power_limit\": 180}}', or @FILE")])
        pairs[key] = rest
    return pairs or None


def _shown(value: str) -> str:
    return value if len(value) <= 40 else value[:37] + "..."
