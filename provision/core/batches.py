"""The batches of a host's changes: tasks in a row where none plans from what another changes go to the host in
ONE command (joins), and each change comes back as an outcome, checked on the read after the batch.

All pure but `apply_batch`, which sends the one command: a task's plan becomes its result or its changes
(`planned`), the changes' outcomes (`ChangeOutcome`, one record each) become the task's result (`checked`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from provision.core.apply import Step, apply_changes, preparing
from provision.core.connection import Connection
from provision.core.facts import overlaps
from provision.core.plan import CHANGED, FAILED, SKIPPED, Change, Item, Plan, Task
from provision.core.results import TaskResult, task_status

if TYPE_CHECKING:  # the types a run is given (the capabilities' facts, the inventory's hosts): never imported
    from provision.capabilities.host import HostFacts
    from provision.inventory.model import Host

NOT_VERIFIED = "not verified: the host was lost before it was read again"


@dataclass(frozen=True)
class Planned:
    """A task's changes, planned with the others of its batch and applied with them in one command."""

    task: Task
    items: list[Item]  # its unchanged and refused items
    changes: list[Change]


@dataclass(frozen=True)
class ChangeOutcome:
    """What one change's commands did: their error (None: they ran) and what they printed."""

    change: Change
    error: str | None
    printed: str


Outcome = Planned | TaskResult  # a task of a batch: its changes to apply, or its result already


def joins(task: Task, host: Host, batch: list[Outcome]) -> bool:
    """Whether task may be planned on the facts the batch was planned on, and applied with it: it plans from
    nothing the batch's changes change (Task.plans_from against Task.alters), and reads none of the files they
    write. Tasks with nothing to change change nothing; after one that may change anything ("*"), nothing joins."""
    planned = [p for p in batch if isinstance(p, Planned)]
    blocks = task.blocks()
    if not planned or (blocks and all(getattr(host.settings, block, None) is None for block in blocks)):
        return True  # nothing changed yet, or the task is for settings blocks this host has none of: skipped
    altered = altered_by(planned)
    written = {c.write.path for p in planned for c in p.changes if c.write}
    return "*" not in altered and not overlaps(task.planned_from(), altered) and not written & set(task.reads(host).paths)


def planned(task: Task, plan: Plan, check: bool, prepared: frozenset[tuple[str, ...]] = frozenset()) -> Outcome:
    """The task's result where nothing is applied (skipped, failed, --check, nothing to change); else its
    changes, for the batch to apply. --check shows each preparing command once per host: where a change of this
    task declares one that is not in `prepared` (those an earlier task showed)."""
    if plan.skipped:
        return TaskResult(task.name, SKIPPED, message=plan.skipped)
    if plan.failed or plan.problems:
        return TaskResult(task.name, FAILED, plan.unchanged + plan.refused, plan.failed or "; ".join(plan.problems))
    items = plan.unchanged + plan.refused
    if check:
        items += [Item("host", CHANGED, "preparing command", "not run", " ".join(argv),
                       "would run once, before the changes that need it") for argv in preparing(plan.changes, prepared)]
        items += [Item(c.target, CHANGED, c.what, c.before, c.after, "would change", c.diff) for c in plan.changes]
        return TaskResult(task.name, task_status(items), items)
    if not plan.changes:
        return TaskResult(task.name, task_status(items), items)
    return Planned(task, items, plan.changes)


def altered_by(batch: list[Planned]) -> frozenset[str]:
    """The fact keys the batch's changes alter (Task.alters): the read after it leaves out a section costly to
    read whose fields none of them alters (FactSection.refresh_on)."""
    return frozenset().union(*(p.task.alters for p in batch))


@dataclass(frozen=True)
class Applied:
    """A batch sent to a host: each task's change outcomes (in the batch's order), why the host was lost midway
    (None: it was not), the error of the upkeep steps that went with it, and the preparing commands that ran and
    succeeded (Change.prepare: not run again for a later batch of the host)."""

    outcomes: list[list[ChangeOutcome]]
    lost: str | None
    upkeep_error: str | None
    prepared: list[tuple[str, ...]]


def apply_batch(conn: Connection, batch: list[Planned], keep_backups: int, upkeep: list[Step],
                prepared: frozenset[tuple[str, ...]] = frozenset()) -> Applied:
    """Every change of the batch in one command (core/apply.py): the upkeep steps first, then the preparing
    commands its changes need that `prepared` (those run for an earlier batch) leaves out."""
    changes = [c for p in batch for c in p.changes]
    ran = apply_changes(conn, changes, keep_backups, upkeep, prepared)
    outcomes = iter([ChangeOutcome(c, e, s) for c, e, s in zip(changes, ran.errors, ran.printed)])
    return Applied([[next(outcomes) for _ in p.changes] for p in batch], ran.lost, ran.upkeep_error, ran.prepared)


def checked(planned: Planned, outcomes: list[ChangeOutcome], facts: HostFacts | None, lost: str | None
            ) -> TaskResult:
    """The task's result: each change checked on the facts read after it (its own check, the setter's words);
    the host lost before that read: what ran is changed and unverified, what failed says why."""
    items = list(planned.items)
    for outcome in outcomes:
        change, error = outcome.change, outcome.error
        if lost is not None or facts is None:  # facts is None only where the host was lost
            items.append(Item(change.target, FAILED if error else CHANGED, change.what, change.before,
                              change.after, error or NOT_VERIFIED, change.diff))
            continue
        words = error or ""  # what the commands said: their error, or what they printed when they exited 0
        if error is None and change.verify is not None:
            wrong = change.verify(facts)
            error, words = wrong and f"the command succeeded but {wrong}", outcome.printed
        if error and change.explain is not None:  # the setter's own words say why, and what to do
            error = change.explain(words) or error
        items.append(Item(change.target, FAILED if error else CHANGED, change.what, change.before, change.after,
                          error or "", change.diff))
    return TaskResult(planned.task.name, task_status(items), items)
