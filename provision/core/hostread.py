"""Reading a host, with its lock taken in the same command when the run is about to change it.

A locked read is a few steps, one command each: take the lock (alone when the facts read before may stand,
or with the facts after it), wait and take again while another run holds it (hostlock.Taker), read again
once it is ours if another run had the host in between. One `Stage` says where a read is; `after_take` is
the whole rule for the next one, and `read_host` sends the commands until a stage is an end. `give_back`
returns the lock outside of a read (a host done, or a run abandoned); the last read after a host's changes
gives it back in its own command.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from enum import Enum
from typing import Callable

from provision.core.connection import Connection, Unreachable
from provision.core.errors import ProvisionError
from provision.core.facts import Section
from provision.core.hostlock import Owner, Taker, release_argv


class Stage(Enum):
    """Where a host's read is: the first three send a command, the rest are ends."""

    READ = "read the facts (no lock wanted, or the lock is this run's already)"
    TAKE = "take the lock only: the facts read before stand if no other run had the host since"
    TAKE_AND_READ = "take the lock and read the facts in one command"
    FRESH = "the facts just read are the host's"
    STANDS = "the lock is this run's and the facts read before stand"
    REFUSED = "the lock could not be had"
    STOPPED = "the run was stopped while waiting for the lock"
    LOST = "the host did not answer"

    @property
    def sends(self) -> bool:
        return self in (Stage.READ, Stage.TAKE, Stage.TAKE_AND_READ)

    @property
    def takes(self) -> bool:
        return self in (Stage.TAKE, Stage.TAKE_AND_READ)


def first_stage(lock: bool, generation: str | None) -> Stage:
    """With the lock wanted and the host's lock generation known from a read before, the lock alone is taken."""
    if not lock:
        return Stage.READ
    return Stage.TAKE if generation is not None else Stage.TAKE_AND_READ


def after_take(stage: Stage, judged: str, free: bool, same_generation: bool) -> Stage:
    """The stage after a take that Taker.judge judged: taken at once with no other run in between since the read
    before, those facts stand; taken after another run's hands, the host is read again, the lock now ours."""
    if judged == Taker.TAKEN:
        if stage is Stage.TAKE:
            return Stage.STANDS if free and same_generation else Stage.READ
        return Stage.FRESH
    if judged == Taker.STOPPED:
        return Stage.STOPPED
    return stage if judged == Taker.AGAIN else Stage.REFUSED


@dataclass(frozen=True)
class HostRead:
    """How a host's read ended: the last command's sections, whether this run holds the host's lock now (also
    when the host was lost after it was taken), and why it ended short (REFUSED, LOST)."""

    stage: Stage
    sections: dict[str, Section] = field(default_factory=dict)
    locked: bool = False
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.stage in (Stage.FRESH, Stage.STANDS)


# send(lock argv or None, whether to read the facts): the sections of ONE command on the host
Send = Callable[[list[str] | None, bool], dict[str, Section]]

NO_ANSWER = "cannot take the host lock: the command that takes it did not answer"


def said(sections: dict[str, Section], name: str) -> str | None:
    section = sections.get(name)
    return section.output.strip() if section is not None else None


def read_host(send: Send, taker: Taker | None, generation: str | None, taking: threading.Event) -> HostRead:
    """Read the host, taking its lock first when a taker is given. taking is cleared while a command that takes
    the lock is in flight: an abandon's release waits for it, or the release could run on the host first, find
    no lock, and the take then leave one with nobody to give it back."""
    stage, locked = first_stage(taker is not None, generation), False
    while stage.sends:
        if stage.takes:
            taking.clear()
        try:
            sections = send(taker.argv() if taker is not None and stage.takes else None, stage is not Stage.TAKE)
        except Unreachable as exc:
            return HostRead(Stage.LOST, locked=locked, message=str(exc))
        finally:
            taking.set()
        if not stage.takes:
            return HostRead(Stage.FRESH, sections, locked)
        if taker is None or "lock" not in sections:
            return HostRead(Stage.REFUSED, sections, locked, NO_ANSWER)
        judged = taker.judge(sections["lock"])
        locked = locked or judged == Taker.TAKEN
        stage = after_take(stage, judged, taker.free, said(sections, "lock-generation") == generation)
        if stage is Stage.REFUSED:
            return HostRead(stage, sections, locked, judged)
    return HostRead(stage, sections, locked)


def give_back(conn: Connection, owner: Owner, taking: threading.Event, timeout: float, maybe: bool) -> None:
    """Give the host's lock back, best effort: a lost host's lock goes stale, for the next run to take. With maybe
    (an abandon: this run may be taking it now), a take in flight finishes first, for 5 s at most; the release
    removes only this run's own lock, so sending it where none was taken is harmless."""
    if maybe:
        taking.wait(min(timeout, 5))
    try:
        conn.run(release_argv(owner), timeout=timeout)
    except ProvisionError:
        pass
