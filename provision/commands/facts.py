"""provision facts: read the selected hosts (the batch apply reads, with the topology), change nothing."""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from provision.capabilities.capability import FactLine
from provision.capabilities.registry import fact_views, fact_lines
from provision.commands.run import Target, engine_for
from provision.core.connection import SSHOptions
from provision.core.run import HostState, RunOptions

if TYPE_CHECKING:  # types only
    from provision.capabilities.host import HostFacts


def read(target: Target, options: RunOptions, ssh: SSHOptions) -> list[HostState]:
    """Each host's state: its facts, or why it could not be read (state.result)."""
    return engine_for(target, [], options, ssh).read_facts(target.hosts)


def shown(state: HostState) -> list[FactLine]:
    """What `provision facts` prints under a host that was read: every capability's lines."""
    return fact_lines(state.host, state.facts) if state.facts else []


def as_json(state: HostState) -> dict[str, Any]:
    """A host as `facts --json` gives it: its facts, and what each capability makes of them under its name; or
    why it could not be read."""
    if state.facts is None:
        return {"unreachable": state.result.message}
    return {**facts_json(state.facts), **fact_views(state.host, state.facts)}


def facts_json(facts: HostFacts) -> dict[str, Any]:
    """A host's facts as JSON can hold them: a mapping keyed by pairs (the topology's (GPU, NIC) links) as nested
    mappings, the first of each pair outside."""
    return _pairs_nested(asdict(facts))


def _pairs_nested(value: Any) -> Any:
    if isinstance(value, list):
        return [_pairs_nested(v) for v in value]
    if not isinstance(value, dict):
        return value
    if value and all(isinstance(k, tuple) and len(k) == 2 for k in value):
        nested: dict[Any, dict[Any, Any]] = {}
        for (a, b), v in value.items():
            nested.setdefault(a, {})[b] = _pairs_nested(v)
        return nested
    return {k: _pairs_nested(v) for k, v in value.items()}
