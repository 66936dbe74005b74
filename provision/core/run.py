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

A task whose plan reads other hosts' facts and waits for its peers (Task.waits_for_peers: slurm.conf) begins a
stage (stages.py): every host applies the stage before it first, and the cluster's facts are brought up to date
then, so each host's copy is planned from the same, current view of the others.

A run never strands a host: its lock is given back as soon as the host is
done, a lease keeps it only while this process lives (hostlock.py), and the
first Ctrl-C or SIGTERM (stopping.py) lets the changes in flight finish and
starts nothing new; a second abandons them. A host lost in the middle of its
changes is unreachable, with what it changed before, not verified.
"""

from __future__ import annotations

import functools
import time
from typing import TYPE_CHECKING, Callable

from provision.core import hostlock, lockrelease
from provision.core.apply import run_batch
from provision.core.applyhost import HostApplier
from provision.core.cluster import Cluster
from provision.core.connection import Connection, Privilege, Unreachable
from provision.core.errors import InputError, Problem
from provision.core.facts import EVERYTHING, Reads, Section
from provision.core.hostpool import HostPool
from provision.core.hostreader import HostReader
from provision.core.hoststate import HostState
from provision.core.plan import Plan, Task
from provision.core.results import NOT_STARTED, UNREACHABLE, HostResult, TaskResult, signal_name
from provision.core.runlog import RunLog
from provision.core.runoptions import Event, Extensions, RunOptions
from provision.core.stages import brought_up_to_date, stages
from provision.core.stopping import Stop

if TYPE_CHECKING:  # the types a run is given (the capabilities' facts, the inventory's hosts): never imported
    from provision.capabilities.host import HostFacts
    from provision.inventory.model import Host

__all__ = ["Engine", "Event", "Extensions", "HostState", "RunOptions"]  # what the commands use of a run


class Engine:
    def __init__(self, tasks: list[Task], options: RunOptions, connect: Callable[[Host], Connection],
                 extensions: Extensions, log: RunLog | None = None, inventory_path: str = "",
                 everyone: list[Host] | None = None, stop: Stop | None = None):
        self.extensions = extensions
        self.inventory_path = inventory_path
        self.everyone = everyone  # the whole inventory (a run may be limited to some of it); None: the run's hosts
        self.tasks = tasks
        self.options = options
        self.connect = connect
        self.log = log
        self.states: list[HostState] = []  # the last run's hosts, with the facts read last
        self.cluster: Cluster | None = None  # what the tasks see of the whole inventory (see_cluster)
        self.owner = hostlock.Owner.this_run(options.command)  # the lock owner line of this run, on every host
        # set by the first SIGINT/SIGTERM while in stop.catching(); shared where one command runs several engines
        self.stop = stop if stop is not None else Stop(options.notice)  # a Stop is falsy until signalled
        self.abandoned = False  # a second signal: the run log's last word is said; workers that wake log nothing
        self.pool = HostPool(options)
        self.reader = HostReader(options, extensions.facts, self.owner, self.stop, inventory_path)
        self.applier = HostApplier(tasks, options, self.stop, self.reader, self._record, self._started)

    # -- phase 1: read and plan -------------------------------------------------

    def gather(self, state: HostState) -> None:
        """Connect and read facts. No lock: reading changes nothing (a run takes the lock only to change)."""
        self.reader.gather(state, self.connect, lambda host: Reads.union(task.reads(host) for task in self.tasks))

    def read_into(self, state: HostState, lock: bool) -> bool:
        """Read the host's facts into state, with lock under the host lock (HostReader.read_into)."""
        return self.reader.read_into(state, lock)

    def privilege(self, host: Host, facts: HostFacts) -> Privilege:
        return self.reader.privilege(host, facts)

    def read(self, conn: Connection, reads: Reads, lock: list[str] | None = None,
             altered: frozenset[str] = EVERYTHING, unlock: list[str] | None = None, generation: bool = False,
             facts: bool = True) -> dict[str, Section]:
        return self.reader.read(conn, reads, lock, altered, unlock, generation, facts)

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
                self.pool.each(self.gather, peers, "read")
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
        self.cluster = cluster

    def plan_all(self, host: Host, facts: HostFacts) -> list[tuple[Task, Plan]]:
        return [(task, task.plan(host, facts)) for task in self.tasks]

    # -- phase 2: apply -----------------------------------------------------------

    def _started(self, state: HostState, task: Task) -> None:
        self.options.progress(Event("applied", self.pool.done, self.pool.total, state.host.name, task.name))

    def _record(self, state: HostState, task_result: TaskResult) -> None:
        state.result.tasks.append(task_result)
        if self.log and not self.abandoned:
            self.log.task(state.host.name, task_result, check=self.options.check)

    def release_lock(self, state: HostState, timeout: float = 30, maybe: bool = False) -> None:
        """Give the host's lock back (lockrelease.release_lock)."""
        lockrelease.release_lock(state, self.owner, timeout, maybe)

    def release(self, state: HostState) -> None:
        lockrelease.release(state, self.owner)

    def held_locks(self) -> list[tuple[str, Connection]]:
        """The hosts whose lock this run holds now, for the heartbeat."""
        return [(s.host.name, s.conn) for s in self.states if s.locked and s.conn is not None]

    # -- the run ------------------------------------------------------------------

    def run(self, hosts: list[Host]) -> list[HostResult]:
        """Read and plan every host, then apply. Stopped (self.stop), the hosts not started say so; a
        KeyboardInterrupt (a second signal) abandons the work in flight and is raised again."""
        states = self.states = [HostState(h) for h in hosts]  # kept: the caller may reboot some (reboot.py)
        try:
            self.pool.each(self.gather, states, "read")
            if not self.stop:
                self.see_cluster(states)
                self.pool.each(self._plan, states, None)
                problems = self._input_problems(states)
                if problems:
                    raise InputError(problems)
            with hostlock.Heartbeat(self.owner, self.held_locks, self.options.notice):
                self._apply_in_stages(states)
        except KeyboardInterrupt:  # a second signal
            self.abandoned = True
            lockrelease.abandon(states, self.owner)
            if self.log:
                self.log.abort("abandoned", "a second interrupt: the changes in flight were abandoned")
            raise
        except InputError as exc:  # the log says how the run ended
            if self.log:
                self.log.abort("bad input", str(exc))
            raise
        finally:
            self.pool.each(self.release, states, None)
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
            self.pool.each(self.gather, states, "read")
            self.see_cluster(states)
        finally:
            if not keep_open:
                self.close(states)
        return states

    def close(self, states: list[HostState]) -> None:
        self.pool.each(self.release, states, None)

    def _plan(self, state: HostState) -> None:
        if state.facts is not None:
            if self.options.adjust_host:
                try:
                    state.host = self.options.adjust_host(state.host, state.facts)
                except InputError as exc:  # e.g. an ad-hoc --gpu that matches no GPU of this host
                    state.problems += exc.problems
                    return
            state.plans = self.plan_all(state.host, state.facts)

    def _apply_in_stages(self, states: list[HostState]) -> None:
        """Phase 2 in stages (core/stages.py): every host applies a stage's tasks before any starts the next,
        which plans on the cluster's facts as the stage left them."""
        split = stages(self.tasks, [s.host for s in states])
        for i, tasks in enumerate(split):
            last = i == len(split) - 1
            if i and self.cluster is not None:
                brought_up_to_date(self.cluster, {s.host.name: s.facts for s in states if s.facts is not None
                                                  and s.result.status != UNREACHABLE},
                                   {s.host.name: s.result.message for s in states if s.result.status == UNREACHABLE})
            self.pool.each(functools.partial(self._phase2, tasks=tasks, first=i == 0, last=last), states,
                           "done" if last else None)

    def _phase2(self, state: HostState, tasks: list[Task] | None = None, first: bool = True,
                last: bool = True) -> None:
        """One stage of the host's changes (tasks; None: all of them)."""
        tasks = self.tasks if tasks is None else tasks
        if first or self._goes_on(state, tasks):
            self._stage(state, tasks, first, last)
        state.result.settle()
        state.result.seconds = round(time.monotonic() - state.started, 3)

    def _stage(self, state: HostState, tasks: list[Task], first: bool, last: bool) -> None:
        result = state.result
        if first and self.stop and result.status not in (UNREACHABLE, NOT_STARTED):  # later: _goes_on said it
            result.status, result.message = NOT_STARTED, self.stop.words()
        elif state.facts is not None:
            try:
                # Something to change: read again under the host lock (another run may have changed the host
                # since the first read), then apply. A no-op and --check never lock: one command per host. A later
                # stage plans again: the cluster's facts it plans from are newer than the first plans'.
                plans = (state.plans if first else [(t, t.plan(state.host, state.facts)) for t in tasks])
                changes = not self.options.check and any(plan.changes for task, plan in plans if task in tasks)
                if not changes or self.read_into(state, lock=True):
                    if first and not self.options.check:
                        state.upkeep = self.extensions.upkeep(state.facts)
                    self.applier.apply_host(state, tasks)
                    if state.upkeep and last and not self.stop:  # no change went to the host to take it along
                        errors, _, _ = run_batch(state.connection, [state.upkeep])
                        self.applier.upkept(state, errors[0])
                    result.reboot_pending = self.extensions.reboot_pending(state.host, state.facts)
                elif not first:  # its lock refused or the host lost between stages: the report lists them all
                    self.applier.not_started(state, tasks, f"not started: {result.message}")
            except Unreachable as exc:
                result.status, result.message = UNREACHABLE, str(exc)
            finally:
                self.release_lock(state)  # done with this host: another run may have it now

    def _goes_on(self, state: HostState, tasks: list[Task]) -> bool:
        """Whether the host applies a later stage: it applied the ones before, and was neither lost nor stopped
        (then its tasks of this stage are said not started)."""
        result = state.result
        if not result.tasks or result.status == NOT_STARTED:  # not started at all: unreachable, stopped, lock refused
            return False
        if result.status == UNREACHABLE or self.stop:
            self.applier.not_started(state, tasks, "not started: the host was lost" if result.status == UNREACHABLE
                                     else self.stop.words())
            return False
        return True

    def _input_problems(self, states: list[HostState]) -> list[Problem]:
        return [problem for state in states for problem in state.problems] + [
            Problem(self.inventory_path, f"host {state.host.name}", "", f"{task.name}: {problem}")
            for state in states for task, plan in state.plans for problem in plan.problems
        ]
