"""provision verify: is every node exactly as the inventory intends, and healthy? Read-only.

Each host is read once, with the facts batch `apply` uses (one command per
host, in parallel). Then a pytest session runs in-process over the shipped
checks, each capability's checks.py (provision/capabilities/*/, functions
check_*, in the order capabilities.CHECKS lists them) and then this package's
as_intended.py (every task's plan, which must change nothing), each
parametrized by node (and by task, for the desired-state checks), with the
facts, the inventory's host, and testinfra's `host` object over provision's
own connection (its modules for what the batch does not read). A check
that finds a difference says what it expected, what it found and what to do
(`fail(expected, found, fix)`). Nothing on a node is changed: the batch only
reads, and the desired-state checks are the tasks' own plans, never applied.

The parts: model.py (the verdicts, their failures grouped by cause), plugin.py (the pytest plugin that
parametrizes and records), runner.py (the session), switch.py (checks switched off for a group or a host:
`provision_verify: {skip: [...]}`, reported as skipped with the reason).
"""

from __future__ import annotations

from provision.verify.model import (FAIL, NOT_TESTED, PASS, UNREACHABLE, Cause, Failure, Node, Verdict, by_cause,
                                    failures)
from provision.verify.plugin import Collector
from provision.verify.runner import run_checks

__all__ = ["FAIL", "NOT_TESTED", "PASS", "UNREACHABLE", "Cause", "Collector", "Failure", "Node", "Verdict",
           "by_cause", "failures", "run_checks"]
