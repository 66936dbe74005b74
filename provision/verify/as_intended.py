"""verify's own check, for every task of the playbook and every node: the task's plan, read against the facts
just read, changes nothing (what apply would do is what is not as intended). The capabilities' checks say why
a node is unhealthy; this one says where it differs from the inventory, task by task."""

from __future__ import annotations

import pytest

from provision.core.checks import fail


def check_as_intended(node, task):
    """The task's plan against the facts just read: no change, no problem, nothing held back."""
    plan = task.plan(node.inventory, node.facts)
    if plan.skipped:
        pytest.skip(plan.skipped)
    if plan.failed and plan.failed_check:  # one cause, one failure: the node's state, not the task's files
        pytest.skip(f"not judged while {plan.failed_check} fails")
    expected = [f"{c.target} {c.what} {c.after}" for c in plan.changes]
    found = [f"{c.target} {c.what} {c.before}" for c in plan.changes]
    # A refusal caused by another failing check (an override held for a missing card) is that check's finding:
    # here, only whether the cards present are as intended.
    found += [f"{i.target} {i.what}: {i.message}" for i in plan.refused if not i.cause] + plan.problems
    found += [plan.failed] if plan.failed else []
    if found:
        fail(", ".join(expected) or "the inventory's settings applied", "; ".join(found),
             f"provision apply {node.inventory_path} --limit {node.name}" + (" (after a reboot: is provision-gpu-tuning.service "
                                                                  "enabled?)" if task.changes_gpus else ""))
