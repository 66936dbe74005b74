"""Run tasks over hosts: gather facts, plan everywhere, then apply, in parallel and bounded.

Two phases, so bad input never touches a host: first every host is read
(one batched command) and every task is planned; if any plan finds an input
error (a power limit outside a GPU's range, ...) the run stops with all of
them and nothing was changed. Then each host with something to change reads
itself again under the host lock (one command that takes the lock and
gathers, so another run's changes in between are seen) and applies its own
plan; one host failing never stops the others. A host with nothing to
change, and every host under --check, costs that first command alone.

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
from typing import TYPE_CHECKING, Any, Callable, cast

from provision.core import hostlock
from provision.core.apply import apply_changes
from provision.core.cluster import Cluster
from provision.core.connection import Connection, Privilege, Unreachable
from provision.core.errors import InputError, Problem, ProvisionError
from provision.core.facts import FactRegistry, Reads, Section, new_token, split_sections
from provision.core.plan import CHANGED, FAILED, SKIPPED, Item, Plan, Task
from provision.core.results import NOT_STARTED, UNREACHABLE, HostResult, TaskResult, signal_name, task_status
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
    a step before a host's changes once it is read under its lock, and the reasons a host waits for a reboot."""

    facts: FactRegistry
    # (connection, facts, notice): e.g. cache what every later read would ask nvidia-smi again
    prepare: Callable[[Connection, Any, Callable[[str], None]], None] = lambda conn, facts, notice: None
    reboot_pending: Callable[[Any, Any], list[str]] = lambda host, facts: []  # (host, facts)


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
    result: HostResult | None = None
    locked: bool = False  # this run holds the host's lock
    reads: Reads = field(default_factory=Reads)  # files, units and packages the tasks read, re-read after changes
    started: float = 0.0
    plans: list[tuple[Task, Plan]] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)  # input errors found once its facts were read


NOT_VERIFIED = "not verified: the host was lost before it was read again"


@dataclass
class Applied:
    """A task's changes applied on a host, waiting for the re-read that checks them (Engine._settle)."""

    task: Task
    items: list[Item]  # its unchanged and refused items
    applied: list[tuple[Any, str | None]]  # each Change with its error (None: it ran)
    printed: list[str]  # what each change's commands printed


class HostLost(Exception):
    """The host stopped answering in the middle of a task's changes; `task` says what was done before."""

    def __init__(self, task: TaskResult, reason: str, recorded: bool = False):
        super().__init__(reason)
        self.task, self.reason, self.recorded = task, reason, recorded  # recorded: already in the host's result


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
        state.result = HostResult(state.host.name)
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
        """Read the host's facts into state; with lock, take the host lock in the same command, waiting for it
        (hostlock.Taker). False when the host could not be read or locked (state.result says why)."""
        taker = hostlock.Taker(self.owner, state.host.name, self.options.lock_wait, self.options.notice,
                               self.inventory_path, self.stop) if lock else None
        while True:
            try:
                sections = self.read(state.conn, state.reads, taker.argv() if taker else None)
            except Unreachable as exc:
                state.result.status, state.result.message = UNREACHABLE, str(exc)
                return False
            if taker is None or "lock" not in sections:
                break
            outcome = taker.judge(sections["lock"])
            if outcome == taker.TAKEN:
                state.locked = True
                break
            if outcome == taker.STOPPED:
                state.result.status, state.result.message = NOT_STARTED, self.stop.words()
                return False
            if outcome != taker.AGAIN:
                state.result.message = outcome
                return False
        state.facts = self.extensions.facts.parse(sections)
        state.conn.privilege = self.privilege(state.host, state.facts)
        return True

    def privilege(self, host: Host, facts: HostFacts) -> Privilege:
        """How to run privileged commands on host: as root, through passwordless sudo, or with the password."""
        return Privilege(is_root=facts.system.uid == 0, sudo_nopasswd=facts.system.sudo_nopasswd,
                         sudo_password=self.options.sudo_password, become=host.become)

    def read(self, conn: Connection, reads: Reads, lock: list[str] | None = None, gpu: bool = True
             ) -> dict[str, Section]:
        token = new_token()
        script = self.extensions.facts.script(token, self.options.reading, reads, lock, gpu)
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
            elif state.result is not None:
                cluster.unread[state.host.name] = state.result.message or state.result.status
        for task in self.tasks:
            task.cluster = cluster

    def plan_all(self, state: HostState) -> list[tuple[Task, Plan]]:
        return [(task, task.plan(state.host, state.facts)) for task in self.tasks]

    # -- phase 2: apply -----------------------------------------------------------

    def apply_host(self, state: HostState) -> None:
        """The tasks in order. A stop lets the task in flight finish and starts no other; a host lost in the
        middle of a task is unreachable, with what that task changed before, and starts no other. The tasks of
        one re-read group in a row (Task.reread_group) share the re-read after them."""
        result = state.result
        pending: list[Applied | TaskResult] = []  # from the first applied task on: waiting for the re-read
        begun = 0  # the tasks begun so far: those after them are not started when the host is lost
        try:
            for i, task in enumerate(self.tasks):
                if pending and not self._joins(state, pending, task):
                    self._settle(state, pending)
                if self.stop:
                    self._settle(state, pending)
                    if i == 0:  # locked and read again, nothing changed: the host was not started
                        result.status, result.message = NOT_STARTED, self.stop.words()
                    else:
                        self._not_started(state, self.tasks[i:], self.stop.words())
                    return
                begun = i + 1
                self.options.progress(Event("applied", self._done, self._total, state.host.name, task.name))
                plan = task.plan(state.host, state.facts)  # re-plan: earlier tasks may have changed facts
                outcome = self.report_or_apply(state, task, plan)
                if pending or isinstance(outcome, Applied):  # recorded in order, after the re-read
                    pending.append(outcome)
                else:
                    self._record(state, outcome)
            self._settle(state, pending)
        except HostLost as lost:
            result.status, result.message = UNREACHABLE, f"lost during {lost.task.name}: {lost.reason}"
            for earlier in pending:  # applied before the task it was lost in, never read again: unverified
                self._record(state, self._checked(state, earlier, lost.reason) if isinstance(earlier, Applied)
                             else earlier)
            if not lost.recorded:
                self._record(state, lost.task)
            self._not_started(state, self.tasks[begun:], "not started: the host was lost")

    def _joins(self, state: HostState, pending: list[Applied | TaskResult], task: Task) -> bool:
        """Whether task may be planned on the facts as they were before the pending tasks changed the host: the
        same re-read group, and none of the files it reads written by them."""
        applied = [p for p in pending if isinstance(p, Applied)]
        written = {c.write.path for p in applied for c, _ in p.applied if c.write}
        group = applied[0].task.reread_group
        return bool(group) and task.reread_group == group and not written & set(task.reads(state.host).paths)

    def _settle(self, state: HostState, pending: list[Applied | TaskResult]) -> None:
        """Read the host again once for the pending tasks and record each in order, its changes checked on that
        read; the list is emptied. Lost during the read: each applied one is recorded as changed, unverified,
        and HostLost raised."""
        waiting, pending[:] = list(pending), []
        done = [p for p in waiting if isinstance(p, Applied)]
        if not done:
            for outcome in waiting:
                self._record(state, cast(TaskResult, outcome))
            return
        lost = None
        try:
            gpu = any(p.task.changes_gpus for p in done)
            fresh = self.extensions.facts.parse(self.read(state.conn, state.reads, gpu=gpu))
            if not gpu:  # not read again: these tasks changed files and units only
                fresh.nvidia = state.facts.nvidia
            state.facts = fresh
        except Unreachable as exc:
            lost = str(exc)
        results = [self._checked(state, p, lost) if isinstance(p, Applied) else p for p in waiting]
        for task_result in results:
            self._record(state, task_result)
        if lost is not None:
            raise HostLost(self._checked(state, done[-1], lost), lost, recorded=True)

    def _record(self, state: HostState, task_result: TaskResult) -> None:
        state.result.tasks.append(task_result)
        if self.log and not self.abandoned:
            self.log.task(state.host.name, task_result, check=self.options.check)

    def _not_started(self, state: HostState, tasks: list[Task], why: str) -> None:
        for task in tasks:
            self._record(state, TaskResult(task.name, NOT_STARTED, message=why))

    def report_or_apply(self, state: HostState, task: Task, plan: Plan) -> TaskResult | Applied:
        """The task's result where nothing is applied (skipped, failed, --check, nothing to change); else its
        changes applied, as the Applied that _settle checks after the re-read."""
        if plan.skipped:
            return TaskResult(task.name, SKIPPED, message=plan.skipped)
        if plan.failed or plan.problems:
            return TaskResult(task.name, FAILED, plan.unchanged + plan.refused, plan.failed or "; ".join(plan.problems))
        items = plan.unchanged + plan.refused
        if self.options.check:
            items += [Item(c.target, CHANGED, c.what, c.before, c.after, "would change", c.diff) for c in plan.changes]
            return TaskResult(task.name, task_status(items), items)
        if not plan.changes:
            return TaskResult(task.name, task_status(items), items)
        errors, printed, lost = apply_changes(state.conn, plan.changes, self.options.keep_backups)
        applied = Applied(task, items, list(zip(plan.changes, errors)), printed)
        if lost is not None:  # what ran is changed, unverified; the rest failed with why
            raise HostLost(self._checked(state, applied, lost), lost)
        return applied

    @staticmethod
    def _checked(state: HostState, applied: Applied, lost: str | None) -> TaskResult:
        """The task's result: each change checked on the facts read after it (its own check, the setter's words);
        the host lost before that read: what ran is changed and unverified, what failed says why."""
        items = list(applied.items)
        if lost is not None:
            items += [Item(c.target, FAILED if error else CHANGED, c.what, c.before, c.after, error or NOT_VERIFIED,
                           c.diff) for c, error in applied.applied]
            return TaskResult(applied.task.name, task_status(items), items)
        for (change, error), said in zip(applied.applied, applied.printed):
            words = error  # what the commands said: their error, or what they printed when they exited 0
            if error is None and change.verify is not None:
                wrong = change.verify(state.facts)
                error, words = wrong and f"the command succeeded but {wrong}", said
            if error and change.explain is not None:  # the setter's own words say why, and what to do
                error = change.explain(words) or error
            status = FAILED if error else CHANGED
            items.append(Item(change.target, status, change.what, change.before, change.after, error or "", change.diff))
        return TaskResult(applied.task.name, task_status(items), items)

    def release_lock(self, state: HostState, timeout: float = 30) -> None:
        """Give the host's lock back (best effort: a lost host's lock goes stale, for the next run to take)."""
        if state.locked and state.conn is not None:
            state.locked = False
            try:
                state.conn.run(hostlock.release_argv(self.owner), timeout=timeout)
            except ProvisionError:
                pass

    def release(self, state: HostState) -> None:
        if state.conn is None:
            return
        try:
            self.release_lock(state)
        finally:
            state.conn.close()
        if state.result:
            state.result.commands = state.conn.commands_run

    def held_locks(self) -> list[tuple[str, Connection]]:
        """The hosts whose lock this run holds now, for the heartbeat."""
        return [(s.host.name, s.conn) for s in self.states if s.locked and s.conn is not None]

    # -- stopping -----------------------------------------------------------------

    def _abandon(self, states: list[HostState]) -> None:
        """A second signal: give back the locks that can be given within seconds, then close every connection
        (the commands in flight on the hosts may finish or not; the next run reads what they did)."""
        self.abandoned = True
        releasing = [threading.Thread(target=self.release_lock, args=(s, 10), daemon=True) for s in states]
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
                             aborted=signal_name(self.stop.signum) if self.stop else "")
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
            state.plans = self.plan_all(state)

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
                    if not self.options.check:  # first: the re-reads after each task find what it keeps
                        self.extensions.prepare(state.conn, state.facts,
                                                lambda said: self.options.notice(f"{state.host.name}: {said}"))
                    self.apply_host(state)
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
                if state.result is not None:
                    state.result.status = FAILED
                    state.result.message = f"internal error: {type(exc).__name__}: {exc}"
            if label:
                status = state.result.status if state.result else ""
                # Reading says "read"; after phase 2 the host's own word: ok, changed (would change), failed, ...
                said = label if label == "read" and status not in (UNREACHABLE, NOT_STARTED, FAILED) else \
                    "would change" if status == CHANGED and self.options.check else status
                with self._lock:
                    self._done += 1
                    self.options.progress(Event(said, self._done, len(states), state.host.name))

        # Not `with`: its exit waits for every queued host, and an abandoned run must not.
        pool = ThreadPoolExecutor(max_workers=max(1, min(self.options.forks, len(states))))
        try:
            for future in [pool.submit(one, s) for s in states]:
                future.result()
        finally:
            pool.shutdown(wait=False, cancel_futures=True)
