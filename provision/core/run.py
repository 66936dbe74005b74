"""Run tasks over hosts: gather facts, plan everywhere, then apply, in parallel and bounded.

Two phases, so bad input never touches a host: first every host is read
(one batched command) and every task is planned; if any plan finds an input
error (a power limit outside a GPU's range, ...) the run stops with all of
them and nothing was changed. Then each host with something to change reads
itself again under the host lock (one command that takes the lock and
gathers, so another run's changes in between are seen) and applies its own
plan; one host failing never stops the others. A host with nothing to
change, and every host under --check, costs that first command alone.

The changes go in batches (batches.py joins): tasks in a row where none
plans from what another changes are planned on one read and applied in ONE
command, then the host is read again once and each change checked on that
read; the last read gives the lock back. A first converge of the GPU
settings, their boot unit and NCCL's files is four commands: read, read
under the lock (hostread.py), apply, read again.

A run never strands a host: its lock is given back as soon as the host is
done, a lease keeps it only while this process lives (hostlock.py), and the
first Ctrl-C or SIGTERM (stopping.py) lets the changes in flight finish and
starts nothing new; a second abandons them. A host lost in the middle of its
changes is unreachable, with what it changed before, not verified.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from provision.core import hostlock
from provision.core.apply import Step, run_batch
from provision.core.batches import Applied, Outcome, Planned, apply_batch, changes_gpus, checked, joins, planned
from provision.core.cluster import Cluster
from provision.core.connection import Connection, Privilege, Unreachable
from provision.core.errors import InputError, Problem
from provision.core.facts import FactRegistry, Reads, Section, new_token, split_sections
from provision.core.hostread import Stage, give_back, read_host, said
from provision.core.plan import CHANGED, FAILED, Plan, Task
from provision.core.results import NOT_STARTED, UNREACHABLE, HostResult, TaskResult, signal_name
from provision.core.runlog import RunLog
from provision.core.stopping import Stop

if TYPE_CHECKING:  # the types a run is given (the capabilities' facts, the inventory's hosts): never imported
    from provision.capabilities.host import HostFacts
    from provision.inventory.model import Host


@dataclass(frozen=True)
class Event:
    """Where a run is, for a progress display (output/progress.py)."""

    phase: str  # "read", then the host's word after its changes (ok, changed, would change, failed, unreachable,
    # not started); "applied" with a task: the task the host started
    done: int
    total: int
    host: str
    task: str = ""  # the task this host started (apply phase); "" when the host finished the phase


@dataclass(frozen=True)
class Extensions:
    """What the capabilities add to a run (capabilities/registry.py gives them): the facts batch's sections,
    steps that go with a host's first changes, and the reasons a host waits for a reboot."""

    facts: FactRegistry
    # Steps (core/apply.py Step) a run that may change the host runs with its first changes, given its facts: a
    # cache of what every later read would ask nvidia-smi again. Best effort: a failure is a notice.
    upkeep: Callable[[HostFacts], list[Step]] = lambda facts: []
    reboot_pending: Callable[[Host, HostFacts], list[str]] = lambda host, facts: []


@dataclass
class RunOptions:
    check: bool = False
    forks: int = 16
    lock_wait: float = 60.0  # seconds to wait for another run's lock on a host
    sudo_password: str | None = field(default=None, repr=False)
    command: str = "apply"
    progress: Callable[[Event], None] = lambda event: None  # where the run is (provision/output/progress.py)
    notice: Callable[[str], None] = lambda message: None  # said even on a pipe or with --json (on stderr)
    keep_backups: int = 3  # backups FILE.<time>~ kept per managed file
    # Settings made once a host's facts are read (the ad-hoc commands); None: the inventory's.
    adjust_host: Callable[[Host, HostFacts], Host] | None = None
    reading: str = "apply"  # which fact sections: apply's, or also those facts or verify read (core/facts.py)
    local: bool = False  # every host is this machine (--local): no other host's facts can be read


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
    generation: str | None = None  # the host lock's generation when its facts were read (hostlock.generation_argv)
    # Clear while a command that takes the host's lock is in flight: an abandon's release waits for it, or the
    # release could run on the host first, find no lock, and the take then leave one with nobody to give it back.
    not_taking: threading.Event = field(default_factory=lambda: _set(threading.Event()))

    def __post_init__(self) -> None:
        self.result = HostResult(self.host.name)


def _set(event: threading.Event) -> threading.Event:
    event.set()
    return event


def progress_word(label: str, status: str, check: bool) -> str:
    """What a host's progress line says once it is done with a phase: reading says "read" (or why it could not
    be read); after phase 2 the host's own word: ok, changed ("would change" under --check), failed, ..."""
    if label == "read" and status not in (UNREACHABLE, NOT_STARTED, FAILED):
        return label
    return "would change" if status == CHANGED and check else status


class HostLost(Exception):
    """The host stopped answering while a batch was applied or read again; its tasks are recorded already.
    `tasks` names those with changes, `after` is where the tasks not started begin."""

    def __init__(self, tasks: str, reason: str, after: int):
        super().__init__(reason)
        self.tasks, self.reason, self.after = tasks, reason, after


class Engine:
    def __init__(self, tasks: list[Task], options: RunOptions, connect: Callable[[Host], Connection],
                 extensions: Extensions, log: RunLog | None = None, inventory_path: str = "",
                 everyone: list[Host] | None = None):
        self.extensions = extensions
        self.inventory_path = inventory_path
        self.everyone = everyone  # the whole inventory (a run may be limited to some of it); None: the run's hosts
        self.tasks = tasks
        self.options = options
        self.connect = connect
        self.log = log
        self._done = self._total = 0  # hosts done in the current phase, of how many
        self.states: list[HostState] = []  # the last run's hosts, with the facts read last
        self._lock = threading.Lock()
        self.owner = hostlock.Owner.this_run(options.command)  # the lock owner line of this run, on every host
        self.stop = Stop(options.notice)  # set by the first SIGINT/SIGTERM while in stop.catching()
        self.abandoned = False  # a second signal: the run log's last word is said; workers that wake log nothing

    # -- phase 1: read and plan -------------------------------------------------

    def gather(self, state: HostState) -> None:
        """Connect and read facts. No lock: reading changes nothing (a run takes the lock only to change)."""
        state.started = time.monotonic()
        if self.stop:
            state.result.status, state.result.message = NOT_STARTED, self.stop.words()
            return
        try:
            state.conn = self.connect(state.host)
            state.conn.open()
        except Unreachable as exc:
            state.result.status, state.result.message = UNREACHABLE, str(exc)
            return
        state.reads = Reads.union(task.reads(state.host) for task in self.tasks)
        self.read_into(state, lock=False)

    def read_into(self, state: HostState, lock: bool) -> bool:
        """Read the host's facts into state; with lock, take the host lock, waiting for it (hostlock.Taker). The
        lock taken at once, with the host's lock generation as this run read it, no other run changed the host
        since: the facts read stand, and taking the lock is the whole command. Else the host is read again in the
        command that takes it. False when the host could not be read or locked (state.result says why)."""
        taker = hostlock.Taker(self.owner, state.host.name, self.options.lock_wait, self.options.notice,
                               self.inventory_path, self.stop) if lock else None
        generation = self.options.reading == "apply" and not self.options.check
        conn = state.conn
        assert conn is not None, "read_into: gather connects the host first"

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
            state.facts = self.extensions.facts.parse(outcome.sections)
            conn.privilege = self.privilege(state.host, state.facts)
        return outcome.ok

    def privilege(self, host: Host, facts: HostFacts) -> Privilege:
        """How to run privileged commands on host: as root, through passwordless sudo, or with the password."""
        return Privilege(is_root=facts.system.uid == 0, sudo_nopasswd=facts.system.sudo_nopasswd,
                         sudo_password=self.options.sudo_password, become=host.become)

    def read(self, conn: Connection, reads: Reads, lock: list[str] | None = None, gpu: bool = True,
             unlock: list[str] | None = None, generation: bool = False, facts: bool = True) -> dict[str, Section]:
        """One command: the lock taken first (lock), the facts (unless not facts), the lock's generation
        (generation: hostlock.generation_argv, for a run that may lock the host later), the lock given back last
        (unlock)."""
        token = new_token()
        before = {"lock": lock} if lock else {}
        after = {"lock-generation": hostlock.generation_argv()} if generation else {}
        if unlock:
            after["unlock"] = unlock
        script = self.extensions.facts.script(token, self.options.reading, reads, gpu, before, after, facts)
        result = conn.run_script(script, timeout=120)
        return split_sections(token, result.stdout)

    def see_cluster(self, states: list[HostState]) -> None:
        """Give the tasks the whole inventory and every host's facts they need: those read for the run, and,
        read now (no lock, no plan), the hosts outside --limit whose facts a task's plan needs (the other
        nodes of a Slurm cluster, for slurm.conf)."""
        everyone = self.everyone or [s.host for s in states]
        read = {s.host.name: s for s in states}
        wanted = {peer.name: peer for task in self.tasks for s in states if s.facts is not None
                  for peer in task.peer_hosts(s.host, everyone) if peer.name not in read}
        peers = [] if self.options.local else [HostState(host) for host in wanted.values()]
        if peers:
            try:
                self._parallel(self.gather, peers, "read")
            finally:
                self.close(peers)
        cluster = Cluster(everyone, local_only=self.options.local)
        for state in [*states, *peers]:
            if state.facts is not None:
                cluster.facts[state.host.name] = state.facts
            else:
                cluster.unread[state.host.name] = state.result.message or state.result.status
        for task in self.tasks:
            task.cluster = cluster

    def plan_all(self, host: Host, facts: HostFacts) -> list[tuple[Task, Plan]]:
        return [(task, task.plan(host, facts)) for task in self.tasks]

    # -- phase 2: apply -----------------------------------------------------------

    def apply_host(self, state: HostState) -> None:
        """The tasks in order, in batches: tasks in a row where none plans from what another changes (joins) are
        planned on one read, their changes applied in ONE command, and the host read again once after it, each
        change checked on that read. A stop starts no new batch (the one in flight finishes); a host lost during a
        batch is unreachable, with what the batch changed, and starts nothing more."""
        result = state.result
        batch: list[Outcome] = []
        first = 0  # where the batch begins in self.tasks
        try:
            for i, task in enumerate([*self.tasks, None]):
                if batch and (task is None or not joins(task, state.host, batch)):
                    if self.stop:
                        break
                    self._apply_batch(state, batch, i, last=task is None)
                    batch, first = [], i
                if task is not None:
                    self.options.progress(Event("applied", self._done, self._total, state.host.name, task.name))
                    batch.append(planned(task, task.plan(state.host, self._facts(state)), self.options.check))
            else:
                return
            if first == 0:  # read again under the lock, nothing changed: the host was not started
                result.status, result.message = NOT_STARTED, self.stop.words()
            else:
                self._not_started(state, self.tasks[first:], self.stop.words())
        except HostLost as lost:
            result.status, result.message = UNREACHABLE, f"lost during {lost.tasks}: {lost.reason}"
            self._not_started(state, self.tasks[lost.after:], "not started: the host was lost")

    def _apply_batch(self, state: HostState, batch: list[Outcome], after: int, last: bool) -> None:
        """Apply the batch's changes in one command, read the host again once, and record each task in order, its
        changes checked on that read. A host lost on the way: what ran is changed and unverified, and HostLost is
        raised once all are recorded."""
        planned = [p for p in batch if isinstance(p, Planned)]
        applied = Applied([], None, None)
        if planned:
            applied = apply_batch(self._conn(state), planned, self.options.keep_backups, state.upkeep)
            self._upkept(state, applied.upkeep_error)
        lost = applied.lost or (self._read_after(state, changes_gpus(planned), last) if planned else None)
        outcomes = iter(applied.outcomes)
        for task in batch:
            self._record(state, checked(task, next(outcomes), state.facts, lost) if isinstance(task, Planned) else task)
        if lost is not None:
            raise HostLost(", ".join(p.task.name for p in planned), lost, after)

    def _read_after(self, state: HostState, gpu: bool, last: bool) -> str | None:
        """Read the host again after a batch (nvidia-smi only when a change was a GPU's; the last batch's read
        gives the host lock back): why the host was lost, or None."""
        unlock = hostlock.release_argv(self.owner) if last and state.locked else None
        try:
            sections = self.read(self._conn(state), state.reads, gpu=gpu, unlock=unlock)
        except Unreachable as exc:
            return str(exc)
        if unlock and sections.get("unlock") and sections["unlock"].rc == 0:
            state.locked = False  # given back: no other command for it
        fresh = self.extensions.facts.parse(sections)
        if not gpu and state.facts is not None:  # not read again: these tasks changed no GPU
            fresh.nvidia = state.facts.nvidia
        state.facts = fresh
        return None

    @staticmethod
    def _conn(state: HostState) -> Connection:
        assert state.conn is not None, "a host is connected before it is read or changed (gather)"
        return state.conn

    @staticmethod
    def _facts(state: HostState) -> HostFacts:
        assert state.facts is not None, "a host is changed only once its facts are read"
        return state.facts

    def _upkept(self, state: HostState, error: str | None) -> None:
        state.upkeep = []
        if error:
            self.options.notice(f"{state.host.name}: {error}")

    def _record(self, state: HostState, task_result: TaskResult) -> None:
        state.result.tasks.append(task_result)
        if self.log and not self.abandoned:
            self.log.task(state.host.name, task_result, check=self.options.check)

    def _not_started(self, state: HostState, tasks: list[Task], why: str) -> None:
        for task in tasks:
            self._record(state, TaskResult(task.name, NOT_STARTED, message=why))

    def release_lock(self, state: HostState, timeout: float = 30, maybe: bool = False) -> None:
        """Give the host's lock back (best effort: a lost host's lock goes stale, for the next run to take). With
        maybe, also where this run may be taking it now: the release removes only this run's own lock. The host
        counts as locked until the release is done, so that an abandon (_abandon) never takes it for given back."""
        if (state.locked or maybe) and state.conn is not None:
            give_back(state.conn, self.owner, state.not_taking, timeout, maybe)
            state.locked = False

    def release(self, state: HostState) -> None:
        if state.conn is None:
            return
        try:
            self.release_lock(state)
        finally:
            state.conn.close()
        state.result.commands = state.conn.commands_run

    def held_locks(self) -> list[tuple[str, Connection]]:
        """The hosts whose lock this run holds now, for the heartbeat."""
        return [(s.host.name, s.conn) for s in self.states if s.locked and s.conn is not None]

    # -- stopping -----------------------------------------------------------------

    def _abandon(self, states: list[HostState]) -> None:
        """A second signal: give back the locks that can be given within seconds, then close every connection
        (the commands in flight on the hosts may finish or not; the next run reads what they did)."""
        self.abandoned = True
        releasing = [threading.Thread(target=self.release_lock, args=(s, 10, True), daemon=True) for s in states]
        for thread in releasing:
            thread.start()
        for thread in releasing:
            thread.join(12)
        for state in states:
            if state.conn is not None:
                try:
                    state.conn.close()
                except Exception:  # a connection in use by a worker: closing is all we want of it
                    pass

    # -- the run ------------------------------------------------------------------

    def run(self, hosts: list[Host]) -> list[HostResult]:
        """Read and plan every host, then apply. Stopped (self.stop), the hosts not started say so; a
        KeyboardInterrupt (a second signal) abandons the work in flight and is raised again."""
        states = self.states = [HostState(h) for h in hosts]  # kept: the caller may reboot some (reboot.py)
        try:
            self._parallel(self.gather, states, "read")
            if not self.stop:
                self.see_cluster(states)
                self._parallel(self._plan, states, None)
                problems = self._input_problems(states)
                if problems:
                    raise InputError(problems)
            with hostlock.Heartbeat(self.owner, self.held_locks, self.options.notice):
                self._parallel(self._phase2, states, "done")
        except KeyboardInterrupt:
            self._abandon(states)
            if self.log:
                self.log.abort("abandoned", "a second interrupt: the changes in flight were abandoned")
            raise
        except InputError as exc:  # the log says how the run ended
            if self.log:
                self.log.abort("bad input", str(exc))
            raise
        finally:
            self._parallel(self.release, states, None)
        results = [s.result for s in states]
        if self.log:
            self.log.summary(results, check=self.options.check,
                             aborted=signal_name(self.stop.signum) if self.stop.signum else "")
        return results

    def read_facts(self, hosts: list[Host], keep_open: bool = False) -> list[HostState]:
        """Read-only: connect, gather facts, disconnect (keep_open: the caller closes them with close()).
        No lock, no plan."""
        states = [HostState(h) for h in hosts]
        try:
            self._parallel(self.gather, states, "read")
            self.see_cluster(states)
        finally:
            if not keep_open:
                self.close(states)
        return states

    def close(self, states: list[HostState]) -> None:
        self._parallel(self.release, states, None)

    def _plan(self, state: HostState) -> None:
        if state.facts is not None:
            if self.options.adjust_host:
                try:
                    state.host = self.options.adjust_host(state.host, state.facts)
                except InputError as exc:  # e.g. an ad-hoc --gpu that matches no GPU of this host
                    state.problems += exc.problems
                    return
            state.plans = self.plan_all(state.host, state.facts)

    def _phase2(self, state: HostState) -> None:
        result = state.result
        if self.stop and result.status not in (UNREACHABLE, NOT_STARTED):
            result.status, result.message = NOT_STARTED, self.stop.words()
        elif state.facts is not None:
            try:
                # Something to change: read again under the host lock (another run may have changed the host
                # since the first read), then apply. A no-op and --check never lock: one command per host.
                changes = not self.options.check and any(plan.changes for _, plan in state.plans)
                if not changes or self.read_into(state, lock=True):
                    if not self.options.check:
                        state.upkeep = self.extensions.upkeep(state.facts)
                    self.apply_host(state)
                    if state.upkeep and not self.stop:  # no change went to the host to take it along
                        errors, _, _ = run_batch(self._conn(state), [state.upkeep])
                        self._upkept(state, errors[0])
                    result.reboot_pending = self.extensions.reboot_pending(state.host, state.facts)
            except Unreachable as exc:
                result.status, result.message = UNREACHABLE, str(exc)
            finally:
                self.release_lock(state)  # done with this host: another run may have it now
        result.settle()
        result.seconds = round(time.monotonic() - state.started, 3)

    def _input_problems(self, states: list[HostState]) -> list[Problem]:
        return [problem for state in states for problem in state.problems] + [
            Problem(self.inventory_path, f"host {state.host.name}", "", f"{task.name}: {problem}")
            for state in states for task, plan in state.plans for problem in plan.problems
        ]

    def _parallel(self, work: Callable[[HostState], None], states: list[HostState], label: str | None) -> None:
        self._done, self._total = 0, len(states)

        def one(state: HostState) -> None:
            try:
                work(state)
            except Exception as exc:  # a bug must not take the other hosts down with it
                state.result.status = FAILED
                state.result.message = f"internal error: {type(exc).__name__}: {exc}"
            if label:
                word = progress_word(label, state.result.status, self.options.check)
                with self._lock:
                    self._done += 1
                    self.options.progress(Event(word, self._done, len(states), state.host.name))

        # Not `with`: its exit waits for every queued host, and an abandoned run must not.
        pool = ThreadPoolExecutor(max_workers=max(1, min(self.options.forks, len(states))))
        try:
            for future in [pool.submit(one, s) for s in states]:
                future.result()
        finally:
            pool.shutdown(wait=False, cancel_futures=True)
