"""A host during a run: its connection, the facts read last, whether this run holds its lock, its plans and its
result so far (HostState); and the host lost in the middle of its changes (HostLost)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from provision.core.apply import Step
from provision.core.connection import Connection
from provision.core.errors import Problem
from provision.core.facts import Reads
from provision.core.plan import Plan, Task
from provision.core.results import HostResult

if TYPE_CHECKING:  # the types a run is given (the capabilities' facts, the inventory's hosts): never imported
    from provision.capabilities.host import HostFacts
    from provision.inventory.model import Host


@dataclass
class HostState:
    """A host between the two phases."""

    host: Host
    conn: Connection | None = None
    facts: HostFacts | None = None
    result: HostResult = field(init=False)  # what the run found and did on it
    locked: bool = False  # this run holds the host's lock
    reads: Reads = field(default_factory=Reads)  # files, units and packages the tasks read, re-read after changes
    started: float = 0.0
    plans: list[tuple[Task, Plan]] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)  # input errors found once its facts were read
    upkeep: list[Step] = field(default_factory=list)  # run with the host's first changes (Extensions.upkeep)
    prepared: set[tuple[str, ...]] = field(default_factory=set)  # Change.prepare commands run already (once a run)
    generation: str | None = None  # the host lock's generation when its facts were read (hostlock.generation_argv)
    # Clear while a command that takes the host's lock is in flight: an abandon's release waits for it, or the
    # release could run on the host first, find no lock, and the take then leave one with nobody to give it back.
    not_taking: threading.Event = field(default_factory=lambda: _set(threading.Event()))

    def __post_init__(self) -> None:
        self.result = HostResult(self.host.name)

    @property
    def connection(self) -> Connection:
        assert self.conn is not None, "a host is connected before it is read or changed (gather)"
        return self.conn

    @property
    def facts_now(self) -> HostFacts:
        assert self.facts is not None, "a host is changed only once its facts are read"
        return self.facts


def _set(event: threading.Event) -> threading.Event:
    event.set()
    return event


class HostLost(Exception):
    """The host stopped answering while a batch was applied or read again; its tasks are recorded already.
    `tasks` names those with changes, `after` is where the tasks not started begin."""

    def __init__(self, tasks: str, reason: str, after: int):
        super().__init__(reason)
        self.tasks, self.reason, self.after = tasks, reason, after
