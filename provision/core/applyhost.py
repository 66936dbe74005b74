"""The changes of one host, in batches: tasks in a row where none plans from what another changes (batches.py
joins) are planned on one read, their changes applied in ONE command, and the host read again once after it,
each change checked on that read. A stop starts no new batch (the one in flight finishes); a host lost during a
batch is unreachable, with what the batch changed, and starts nothing more."""

from __future__ import annotations

from typing import Callable

from provision.core.apply import preparing
from provision.core.batches import Applied, Outcome, Planned, altered_by, apply_batch, checked, joins, planned
from provision.core.hostreader import HostReader
from provision.core.hoststate import HostLost, HostState
from provision.core.plan import Task
from provision.core.results import NOT_STARTED, UNREACHABLE, TaskResult
from provision.core.runoptions import RunOptions
from provision.core.stopping import Stop

Record = Callable[[HostState, TaskResult], None]  # a task's result: kept on the host's, and logged


class HostApplier:
    def __init__(self, tasks: list[Task], options: RunOptions, stop: Stop, reader: HostReader, record: Record,
                 started: Callable[[HostState, Task], None]):
        self.tasks, self.options, self.stop, self.reader = tasks, options, stop, reader
        self.record, self.started = record, started  # started: the host begins a task (for the progress display)

    def apply_host(self, state: HostState, tasks: list[Task] | None = None) -> None:
        """The tasks in order (tasks: a stage of them, core/stages.py; None: all), in batches."""
        tasks = self.tasks if tasks is None else tasks
        result = state.result
        batch: list[Outcome] = []
        first = 0  # where the batch begins in tasks
        try:
            for i, task in enumerate([*tasks, None]):
                if batch and (task is None or not joins(task, state.host, batch)):
                    if self.stop:
                        break
                    self._apply_batch(state, batch, i, last=task is None)
                    batch, first = [], i
                if task is not None:
                    self.started(state, task)
                    plan = task.plan(state.host, state.facts_now)
                    batch.append(planned(task, plan, self.options.check, frozenset(state.prepared)))
                    if self.options.check:  # shown once: as if run
                        state.prepared.update(preparing(plan.changes))
            else:
                return
            if first == 0 and not result.tasks:  # read again under the lock, nothing changed: the host was not started
                result.status, result.message = NOT_STARTED, self.stop.words()
            else:
                self.not_started(state, tasks[first:], self.stop.words())
        except HostLost as lost:
            result.status, result.message = UNREACHABLE, f"lost during {lost.tasks}: {lost.reason}"
            self.not_started(state, tasks[lost.after:], "not started: the host was lost")

    def _apply_batch(self, state: HostState, batch: list[Outcome], after: int, last: bool) -> None:
        """Apply the batch's changes in one command, read the host again once, and record each task in order, its
        changes checked on that read. A host lost on the way: what ran is changed and unverified, and HostLost is
        raised once all are recorded."""
        planned = [p for p in batch if isinstance(p, Planned)]
        applied = Applied([], None, None, [])
        if planned:
            applied = apply_batch(state.connection, planned, self.options.keep_backups, state.upkeep,
                                  frozenset(state.prepared))
            self.upkept(state, applied.upkeep_error)
            state.prepared.update(applied.prepared)  # a later batch's changes that need them find them done
        lost = applied.lost or (self.reader.read_after(state, altered_by(planned), last) if planned else None)
        outcomes = iter(applied.outcomes)
        for task in batch:
            self.record(state, checked(task, next(outcomes), state.facts, lost) if isinstance(task, Planned) else task)
        if lost is not None:
            raise HostLost(", ".join(p.task.name for p in planned), lost, after)

    def upkept(self, state: HostState, error: str | None) -> None:
        """The upkeep steps went to the host (with its first changes, or alone): none again; a failure said."""
        state.upkeep = []
        if error:
            self.options.notice(f"{state.host.name}: {error}")

    def not_started(self, state: HostState, tasks: list[Task], why: str) -> None:
        for task in tasks:
            self.record(state, TaskResult(task.name, NOT_STARTED, message=why))
