"""The recovery ladder: for a node verify failed, the smallest step that can clear every cause it found, and one
step up for a cause the step it asked for did not clear. Pure: a verdict and what was tried in, a Step out.

The steps, smallest first (core/checks.py REMEDIES): apply (converge a drifted setting), reset (the GPUs a cause
names, or all of them on an NVSwitch board), reboot, service (a person: reseat or replace; the node stays
drained). A node's step is the largest its causes ask for: a reboot clears what a reset would, never the other
way round. A cause still there after the step it asked for climbs one rung; after a reboot that is service: the
card is to be replaced. A warning (the node works, slower) gets apply and no more.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

from provision.core import pci
from provision.core.checks import REBOOT, REMEDIES, RESET, SERVICE, WARNING
from provision.verify import Verdict

DONE = "done"  # nothing left to do: verify passes
# verify --active's check (capabilities/active/checks.py), as the health and GPU checks name it in because=: a cause
# it found, or one that follows from it, showed under load, and only a verify under load proves it gone
UNDER_LOAD = "gpus_hold_up_under_load"
# Only warnings apply did not mend are left: the node works (slower); a drain, a reset or a reboot for that is a
# person's call, never recover's.
LEFT = "left"


@dataclass(frozen=True)
class Reason:
    """One cause verify found, and the step it asks for."""

    check: str
    found: str
    about: tuple[str, ...]
    step: str
    climbed: str = ""  # the step tried before that left this cause: why it asks for more than its remedy

    @property
    def key(self) -> tuple[str, tuple[str, ...]]:
        """The same cause in another verify (its words may differ: a count went up)."""
        return self.check, self.about

    def words(self) -> str:
        why = f"still there after the {self.climbed}" if self.climbed else f"remedy {self.step}"
        return f"{self.check}: {self.found} ({why})"


@dataclass(frozen=True)
class Step:
    """What to do next on one node, and the causes that ask for it."""

    action: str  # DONE, or one of REMEDIES
    reasons: tuple[Reason, ...] = ()

    @property
    def drains(self) -> bool:
        """A reset, a reboot or a person takes the node out of service first; apply converges under its jobs."""
        return self.action in (RESET, REBOOT, SERVICE)

    def why(self) -> str:
        return "; ".join(r.words() for r in self.reasons if r.step == self.action)

    @property
    def replace(self) -> tuple[Reason, ...]:
        """The causes a reboot did not clear: the cards they name are to be replaced."""
        return tuple(r for r in self.reasons if r.step == SERVICE and r.climbed == REBOOT)


@dataclass(frozen=True)
class Tried:
    """A step done on a node, and the causes it was done for."""

    action: str
    causes: frozenset[tuple[str, tuple[str, ...]]]


def reasons(verdict: Verdict, tried: Sequence[Tried] = ()) -> list[Reason]:
    """Each cause of the verdict with the step it asks for: its remedy, or one rung above the largest step tried
    while it was there (a cause a reset left asks for a reboot; one a reboot left, for service)."""
    found = []
    for cause in verdict.findings:
        failure = cause.failure
        reason = Reason(failure.check, failure.found, tuple(failure.about), failure.remedy)
        step, climbed = climb(reason.step, (t.action for t in tried if reason.key in t.causes))
        if climbed and failure.severity == WARNING:
            step = LEFT
        found.append(Reason(reason.check, reason.found, reason.about, step, climbed))
    return found


def climb(remedy: str, tried: Iterable[str]) -> tuple[str, str]:
    """The step a cause asks for after `tried` left it, and the largest of those steps ("" when none reached its
    remedy): one rung above it, service at most."""
    rung = REMEDIES.index(remedy)
    reached = [REMEDIES.index(step) for step in tried if REMEDIES.index(step) >= rung]
    if not reached:
        return remedy, ""
    top = max(reached)
    return REMEDIES[min(top + 1, len(REMEDIES) - 1)], REMEDIES[top]


def next_step(verdict: Verdict, tried: Sequence[Tried] = ()) -> Step:
    """The one step for the node: the largest its causes ask for (DONE when verify found none)."""
    found = reasons(verdict, tried)
    if not found:
        return Step(DONE)
    asked = [r.step for r in found if r.step != LEFT]
    return Step(max(asked, key=REMEDIES.index) if asked else LEFT, tuple(found))


def showed_under_load(verdict: Verdict) -> bool:
    """Whether a cause the verdict found showed under load: verify --active's own check, or one that follows from
    it (a GPU the load took off the bus)."""
    return any(f.check == UNDER_LOAD or any(lead.partition(":")[0] == UNDER_LOAD for lead in f.because)
               for f in verdict.failures)


def after(step: Step) -> Tried:
    """The record of a step done, for the next verify's ladder."""
    return Tried(step.action, frozenset(r.key for r in step.reasons))


def gpus_to_reset(step: Step, nvswitch: bool) -> tuple[str, ...]:
    """The PCI addresses ("0000:3b:00.0", as nvidia-smi -i takes them) of the GPUs the reset-class causes name, or
    () for every GPU: on an NVSwitch board (NVIDIA's fabric manager guide resets all GPUs together there) or when a
    cause names no GPU."""
    if nvswitch:
        return ()
    named: list[str] = []
    for reason in step.reasons:
        if reason.step != RESET:
            continue
        gpus = [pci.address(about) for about in reason.about if pci.address(about)]
        if not gpus:
            return ()
        named += [gpu for gpu in gpus if gpu not in named]
    return tuple(named)
