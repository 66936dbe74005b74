"""The read after a batch of changes: a section costly to read (FactSection.refresh_on) is read again only when a
change of the batch altered one of its fields, and its fields are otherwise carried over from the read before. The
core knows no section by name: a made-up one here, of no GPU."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from provision.core import hostlock
from provision.core.connection import CommandResult
from provision.core.facts import FactReader, FactRegistry, FactSection, Section
from provision.core.hostreader import HostReader
from provision.core.hoststate import HostState
from provision.core.runoptions import RunOptions
from provision.core.stopping import Stop


@dataclass
class Facts:
    system: Any = None
    files: dict[str, Any] = field(default_factory=dict)
    weather: str = ""  # from the costly section
    mood: str = ""  # from a section read every time


def parse(sections: dict[str, Section], facts: Facts) -> None:
    facts.weather = sections["weather"].output if "weather" in sections else "not read"
    facts.mood = sections["mood"].output if "mood" in sections else "not read"


class Shell:
    """A host that is this machine: each script runs in sh; the scripts sent are kept."""

    def __init__(self):
        self.scripts: list[str] = []

    def run_script(self, script: str, timeout: float) -> CommandResult:
        self.scripts.append(script)
        done = subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=timeout)
        return CommandResult(["sh"], done.returncode, done.stdout)


def reads_of(tmp_path) -> tuple[HostReader, HostState, Shell]:
    count = "echo . >>{0}; wc -l <{0}"  # how many times the section was read
    registry = FactRegistry(Facts, [FactReader((
        FactSection("weather", count.format(tmp_path / "weather"), refresh_on=frozenset({"weather"})),
        FactSection("mood", count.format(tmp_path / "mood"))), parse)])
    conn = Shell()
    reader = HostReader(RunOptions(), registry, hostlock.Owner.this_run("apply"), Stop(lambda said: None), "")
    state = HostState(SimpleNamespace(name="node1"), conn=conn)
    state.facts = registry.parse(reader.read(conn, state.reads))
    return reader, state, conn


def test_a_costly_section_is_carried_over_when_no_change_altered_its_fields(tmp_path):
    reader, state, conn = reads_of(tmp_path)
    assert (state.facts.weather, state.facts.mood) == ("1", "1")
    assert reader.read_after(state, frozenset({"units.enabled"}), last=False) is None
    assert "weather" not in conn.scripts[-1] and (state.facts.weather, state.facts.mood) == ("1", "2")
    assert reader.read_after(state, frozenset(), last=False) is None
    assert (state.facts.weather, state.facts.mood) == ("1", "3")


def test_a_costly_section_is_read_again_when_a_change_altered_one_of_its_fields(tmp_path):
    reader, state, conn = reads_of(tmp_path)
    for altered, weather in ((frozenset({"weather.wind"}), "2"), (frozenset({"weather"}), "3"), (frozenset({"*"}), "4")):
        assert reader.read_after(state, altered, last=False) is None
        assert "weather" in conn.scripts[-1] and state.facts.weather == weather


def test_refresh_on_names_fields_of_the_facts():
    with pytest.raises(ValueError, match="climate"):
        FactRegistry(Facts, [FactReader((FactSection("weather", "true", refresh_on=frozenset({"climate"})),), parse)])
