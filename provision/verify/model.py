"""What verify finds, as values: the node a check sees, each check's failures, a host's verdict, and its
failures grouped by cause (a failure that only follows from another is filed under it)."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from provision.core.checks import CRITICAL, Finding, remedy_or_default

if TYPE_CHECKING:  # types only: the checks' view of a host is built by commands/verify.py
    from provision.capabilities.active.run import ActiveRun
    from provision.capabilities.host import HostFacts
    from provision.core.plan import Task
    from provision.inventory.model import Host

PASS, FAIL, UNREACHABLE = "pass", "fail", "unreachable"
# verify --active: nothing failed, but the load (or a part of it) did not run on the node: never a pass
NOT_TESTED = "not tested"


@dataclass
class Node:
    """One host as the checks see it."""

    name: str
    inventory: Host
    facts: HostFacts
    tasks: list[Task]
    host: object  # testinfra.host.Host over provision's connection (verify/backend.py)
    inventory_path: str = "INVENTORY"  # for the "what to do" lines
    notes: list[str] = field(default_factory=list)  # note(): said, never failed
    active: ActiveRun | None = None  # verify --active: the load's run on this node (capabilities/active/run.py)

    def __repr__(self) -> str:  # pytest shows it in ids and failures
        return self.name

    def apply_command(self, *options: str) -> str:
        """The apply that converges this node, as a finding's next step: `provision apply INVENTORY --limit
        NAME [OPTIONS]`, each word quoted once for a shell."""
        return shlex.join(["provision", "apply", self.inventory_path, "--limit", self.name, *options])


@dataclass
class Failure:
    """One finding of one check (a check that found several causes has several)."""

    check: str
    expected: str
    found: str
    fix: str = ""
    because: list[str] = field(default_factory=list)  # the leads it named ("CHECK" or "CHECK:SUBJECT"), likeliest first
    about: list[str] = field(default_factory=list)
    severity: str = CRITICAL
    remedy: str = ""  # the smallest step that can clear it (core/checks.py REMEDIES); unsaid: its severity's default

    def __post_init__(self) -> None:
        self.remedy = remedy_or_default(self.remedy, self.severity)


@dataclass
class Verdict:
    host: str
    status: str = PASS  # pass | fail | unreachable | not tested
    message: str = ""  # why unreachable
    passed: list[str] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)  # every check's findings, as the checks said them
    skipped: list[str] = field(default_factory=list)  # "check: why"
    notes: list[str] = field(default_factory=list)
    not_tested: list[str] = field(default_factory=list)  # --active: "part: why" for each part the load left untested
    figures: list[dict[str, Any]] = field(default_factory=list)  # --active: what was measured (capabilities/active/outcome.py)

    @property
    def findings(self) -> list[Cause]:
        """The failures grouped by cause: one entry per cause, with the failures that follow from it inside."""
        return by_cause(self.failures)


def failures(check: str, findings: list[Finding]) -> list[Failure]:
    """A check's findings as a verdict records them."""
    return [Failure(check, f.expected, f.found, f.fix, list(f.because), list(f.about), f.severity, f.remedy)
            for f in findings]


@dataclass
class Cause:
    """One finding as verify reports it: the failure that is the cause, and the failures that follow from it."""

    failure: Failure
    consequences: list[Failure] = field(default_factory=list)


def by_cause(failures: list[Failure]) -> list[Cause]:
    """Group a node's failures by cause. A failure whose `because` names another failure of the node (that
    check, or that check and one of the subjects it is `about`; the first lead that did) goes under that
    failure's cause, followed to the root; one whose leads name nothing that failed here is a cause of its own.
    In the checks' order."""
    def explains(ref: str, other: Failure) -> bool:
        return ref == other.check or any(ref == f"{other.check}:{subject}" for subject in other.about)

    position = {id(failure): i for i, failure in enumerate(failures)}

    def root(failure: Failure) -> Failure:
        chain = [failure]
        while chain[-1].because:
            parent = next((o for lead in chain[-1].because for o in failures
                           if o is not chain[-1] and explains(lead, o)), None)
            if parent is None:
                break
            if any(parent is f for f in chain):  # leads in a circle: the first of it in the checks' order
                start = next(i for i, f in enumerate(chain) if f is parent)
                return min(chain[start:], key=lambda f: position[id(f)])
            chain.append(parent)
        return chain[-1]

    causes: dict[int, Cause] = {}
    for failure in failures:
        top = root(failure)
        cause = causes.setdefault(id(top), Cause(top))
        if top is not failure:
            cause.consequences.append(failure)
    return sorted(causes.values(), key=lambda c: position[id(c.failure)])
