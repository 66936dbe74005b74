"""verify's own check, for every task of the playbook and every node: the task's plan, read against the facts
just read, changes nothing (what apply would do is what is not as intended). The capabilities' checks say why
a node is unhealthy; this one says where it differs from the inventory, task by task. What the plan holds back
or would change only because of another check's finding (a lost GPU's line in the boot file, a task that
cannot read the GPUs) is filed under that finding (`because`), apart from the task's own differences."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from provision.capabilities.registry import units_setting_again
from provision.core.checks import ERROR, Finding, fail_each, leads

if TYPE_CHECKING:  # types only
    from provision.core.plan import Task
    from provision.verify.model import Node


def check_as_intended(node: Node, task: Task) -> None:
    """The task's plan against the facts just read: no change, no problem, nothing held back.

    Reads: the inventory's settings for the task and the facts the task plans from (the playbook's tasks).
    Next step: `provision apply INVENTORY --limit NODE`; after a reboot, is provision-gpu-tuning.service enabled?
    """
    plan = task.plan(node.inventory, node.facts)
    if plan.skipped:
        pytest.skip(plan.skipped)
    by_cause: dict[str, tuple[list[str], list[str]]] = {}  # because -> (expected, found)

    def said(cause: str) -> tuple[list[str], list[str]]:
        return by_cause.setdefault(cause, ([], []))

    for c in plan.changes:
        said(c.cause)[0].append(f"{c.target} {c.what} {c.after}")
        said(c.cause)[1].append(f"{c.target} {c.what} {c.before}")
    for i in plan.refused:
        said(i.cause)[1].append(f"{i.target} {i.what}: {i.message}")
    said("")[1].extend(plan.problems)
    if plan.failed:
        said(plan.failed_check)[1].append(plan.failed)
    units = units_setting_again(task.alters)
    fix = node.apply_command() + (
        f" (after a reboot: is {' or '.join(units)} enabled?)" if units else "")
    fail_each([Finding(", ".join(expected) or "the inventory's settings applied", "; ".join(found), fix,
                       because=leads(cause), severity=ERROR)
               for cause, (expected, found) in by_cause.items() if found])
