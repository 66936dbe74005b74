"""The fact keys: the names a task gives to what its plan reads and what its changes change (Task.plans_from,
Task.alters), which decide the tasks that join one batch (core/facts.py overlaps). A key is a HostFacts field path,
dotted into nested dataclasses ("nvidia.gpus", "bmc.record"), or one a capability declares (Capability.fact_keys):
"*" stands for every fact. A key that is neither is a typo that would batch silently wrong, so the registry
refuses it when it folds the capabilities.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Iterable

from provision.core.plan import Task

ANY = "*"


def field_paths(cls: type) -> frozenset[str]:
    """Every field of a dataclass, and of the dataclasses its fields hold (X or X | None), dotted: not into
    lists or mappings, whose items no task names one by one."""
    paths: set[str] = set()
    for name, hint in typing.get_type_hints(cls).items():
        paths.add(name)
        inner = _dataclass_in(hint)
        if inner is not None:
            paths.update(f"{name}.{path}" for path in field_paths(inner))
    return frozenset(paths)


def _dataclass_in(hint: object) -> type | None:
    """The dataclass a field holds (itself, or in `X | None`); None for anything else."""
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return hint
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        held = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        return _dataclass_in(held[0]) if len(held) == 1 else None
    return None


def unknown_keys(tasks: Iterable[type[Task]], vocabulary: frozenset[str]) -> list[str]:
    """'TASK plans_from|alters KEY' for each key of a task that is not in the vocabulary (nor "*")."""
    return [f"{task.name} {side} {key!r}" for task in tasks
            for side, keys in (("plans_from", task.plans_from), ("alters", task.alters))
            for key in sorted(keys) if key != ANY and key not in vocabulary]
