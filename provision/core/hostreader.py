"""How a run reads one host: the first read (connect, then one command), the read again under the host lock
before its changes (hostread.py's steps), and the read after each batch of changes, which leaves out a section
costly to read whose fields no change of the batch altered (FactSection.refresh_on) and gives the lock back
after the last batch."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Callable

from provision.core import hostlock
from provision.core.connection import Connection, Privilege, Unreachable
from provision.core.facts import EVERYTHING, FactRegistry, Reads, Section, new_token, split_sections
from provision.core.hostread import Stage, read_host, said
from provision.core.hoststate import HostState
from provision.core.results import NOT_STARTED, UNREACHABLE
from provision.core.runoptions import RunOptions
from provision.core.stopping import Stop

if TYPE_CHECKING:  # the types a run is given (the capabilities' facts, the inventory's hosts): never imported
    from provision.capabilities.host import HostFacts
    from provision.inventory.model import Host


class HostReader:
    """The reads of a run's hosts, each one command on its host."""

    def __init__(self, options: RunOptions, registry: FactRegistry, owner: hostlock.Owner, stop: Stop,
                 inventory_path: str):
        self.options, self.registry, self.owner, self.stop = options, registry, owner, stop
        self.inventory_path = inventory_path

    def gather(self, state: HostState, connect: Callable[[Host], Connection],
               reads: Callable[[Host], Reads]) -> None:
        """Connect and read facts, with what the tasks read of this host (reads). No lock: reading changes nothing
        (a run takes the lock only to change)."""
        state.started = time.monotonic()
        if self.stop:
            state.result.status, state.result.message = NOT_STARTED, self.stop.words()
            return
        try:
            state.conn = connect(state.host)
            state.conn.open()
        except Unreachable as exc:
            state.result.status, state.result.message = UNREACHABLE, str(exc)
            return
        state.reads = reads(state.host)
        self.read_into(state, lock=False)

    def read_into(self, state: HostState, lock: bool) -> bool:
        """Read the host's facts into state; with lock, take the host lock, waiting for it (hostlock.Taker). The
        lock taken at once, with the host's lock generation as this run read it, no other run changed the host
        since: the facts read stand, and taking the lock is the whole command. Else the host is read again in the
        command that takes it. False when the host could not be read or locked (state.result says why)."""
        taker = hostlock.Taker(self.owner, state.host.name, self.options.lock_wait, self.options.notice,
                               self.inventory_path, self.stop) if lock else None
        generation = self.options.reading == "apply" and not self.options.check
        conn = state.connection

        def send(take: list[str] | None, facts: bool) -> dict[str, Section]:
            return self.read(conn, state.reads, take, facts=facts, generation=generation)

        outcome = read_host(send, taker, state.generation, state.not_taking)
        state.locked = state.locked or outcome.locked
        if outcome.stage is Stage.LOST:
            state.result.status, state.result.message = UNREACHABLE, outcome.message
        elif outcome.stage is Stage.STOPPED:
            state.result.status, state.result.message = NOT_STARTED, self.stop.words()
        elif outcome.stage is Stage.REFUSED:
            state.result.message = outcome.message
        elif outcome.stage is Stage.FRESH:
            if "lock-generation" in outcome.sections:
                state.generation = said(outcome.sections, "lock-generation")
            state.facts = self.registry.parse(outcome.sections)
            conn.privilege = self.privilege(state.host, state.facts)
        return outcome.ok

    def read_after(self, state: HostState, altered: frozenset[str], last: bool) -> str | None:
        """Read the host again after a batch whose changes altered these fact keys (a section costly to read
        only when they alter its fields; the last batch's read gives the host lock back): why the host was
        lost, or None."""
        unlock = hostlock.release_argv(self.owner) if last and state.locked else None
        try:
            sections = self.read(state.connection, state.reads, altered=altered, unlock=unlock)
        except Unreachable as exc:
            return str(exc)
        if unlock and sections.get("unlock") and sections["unlock"].rc == 0:
            state.locked = False  # given back: no other command for it
        fresh = self.registry.parse(sections)
        if state.facts is not None:  # the fields of the sections left out: as read before
            self.registry.carry(state.facts, fresh, self.options.reading, state.reads, altered)
        state.facts = fresh
        return None

    def privilege(self, host: Host, facts: HostFacts) -> Privilege:
        """How to run privileged commands on host: as root, through passwordless sudo, or with the password."""
        return Privilege(is_root=facts.system.uid == 0, sudo_nopasswd=facts.system.sudo_nopasswd,
                         sudo_password=self.options.sudo_password, become=host.become)

    def read(self, conn: Connection, reads: Reads, lock: list[str] | None = None,
             altered: frozenset[str] = EVERYTHING, unlock: list[str] | None = None, generation: bool = False,
             facts: bool = True) -> dict[str, Section]:
        """One command: the lock taken first (lock), the facts (unless not facts: those a batch's changes
        altered, FactRegistry.sections), the lock's generation (generation: hostlock.generation_argv, for a run
        that may lock the host later), the lock given back last (unlock)."""
        token = new_token()
        before = {"lock": lock} if lock else {}
        after = {"lock-generation": hostlock.generation_argv()} if generation else {}
        if unlock:
            after["unlock"] = unlock
        script = self.registry.script(token, self.options.reading, reads, altered, before, after, facts)
        result = conn.run_script(script, timeout=120)
        return split_sections(token, result.stdout)
