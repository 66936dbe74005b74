"""What a verify check says: a node not as intended (fail: expected, found, what to do), or worth a note.
Each capability's checks.py uses them; verify's runner (provision/verify/) collects them per node.

One cause, one finding: a check that fails only because of something another check reports says so with
`because=` (that check's name, or "CHECK:SUBJECT" for one GPU or port of it; several leads, the likeliest
first). verify files it under the first lead's finding when that check failed on the node too, and on its own
when none did: a `because` is a lead, and only the other check's failure confirms it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NoReturn, Protocol

# What a finding means for the node: the next step differs, and monitoring pages on the first only.
CRITICAL = "critical"  # hardware or health: jobs fail or would; drain the node
ERROR = "error"  # not as the inventory intends (a setting or file drifted): apply converges it
WARNING = "warning"  # works, but slower than it should (a narrow link, a clock held down)
SEVERITIES = (CRITICAL, ERROR, WARNING)

# The smallest step that can clear a finding's cause (what `provision recover` does for it); each is larger than the
# one before, and a step that did not clear a cause leads to the next.
APPLY = "apply"  # a setting or file drifted: apply converges it
RESET = "reset"  # a GPU reset clears it (the driver asks for one; a reset-class Xid)
REBOOT = "reboot"  # only a reboot clears it (a GPU fallen off the bus; the driver asks for a node reboot)
SERVICE = "service"  # a person must act (reseat, replace, the vendor): neither reset nor reboot helps
REMEDIES = (APPLY, RESET, REBOOT, SERVICE)
# A finding that names no remedy: an unknown hardware or health fault is worth one reboot before a person looks;
# a drift is what apply is for; a slow node (a warning) is converged, and what apply does not mend stays a warning.
DEFAULT_REMEDY = {CRITICAL: REBOOT, ERROR: APPLY, WARNING: APPLY}


@dataclass(frozen=True)
class Finding:
    """One thing a check found wrong: what it expected, what it found, the next step, and what it hangs on."""

    expected: str
    found: str
    fix: str = ""
    because: tuple[str, ...] = ()  # "CHECK" or "CHECK:SUBJECT": other checks' failures that would explain it
    about: tuple[str, ...] = ()  # the subjects it is about (GPU bus ids, ports): `because` may name one
    severity: str = CRITICAL
    remedy: str = ""  # one of REMEDIES; "" is the default for its severity (see remedy_of)


def remedy_of(finding: Finding) -> str:
    """The smallest step that can clear the finding's cause: its own remedy, else the default for its severity."""
    return remedy_or_default(finding.remedy, finding.severity)


def remedy_or_default(remedy: str, severity: str) -> str:
    """A remedy as said, or where none was, its severity's default (an unknown severity counts as critical)."""
    return remedy or DEFAULT_REMEDY.get(severity, DEFAULT_REMEDY[CRITICAL])


class CheckFailed(AssertionError):
    """A node is not as intended: one finding, or several of different causes (each with its own next step)."""

    def __init__(self, expected: str = "", found: str = "", fix: str = "", because: str | tuple[str, ...] = (),
                 about: tuple[str, ...] = (), severity: str = CRITICAL, findings: list[Finding] | None = None,
                 remedy: str = ""):
        self.findings = findings or [Finding(expected, found, fix, leads(because), tuple(about), severity, remedy)]
        super().__init__("; ".join(f"expected {f.expected}, found {f.found}" + (f"; {f.fix}" if f.fix else "")
                                   for f in self.findings))
        first = self.findings[0]
        self.expected, self.found, self.fix = first.expected, first.found, first.fix


def leads(because: str | tuple[str, ...]) -> tuple[str, ...]:
    """One lead or several, as a tuple ("" is none)."""
    return (because,) if isinstance(because, str) and because else () if isinstance(because, str) else because


def fail(expected: str, found: str, fix: str = "", because: str | tuple[str, ...] = (), about: tuple[str, ...] = (),
         severity: str = CRITICAL, remedy: str = "") -> NoReturn:
    raise CheckFailed(expected, found, fix, because, about, severity, remedy=remedy)


def fail_each(findings: list[Finding]) -> None:
    """Fail with every finding at once (a check that found several causes); nothing when there are none."""
    if findings:
        raise CheckFailed(findings=findings)


class Noted(Protocol):
    """A node as far as note() needs it (verify's Node; the active check's LoadedNode)."""

    notes: list[str]


def note(node: Noted, text: str) -> None:
    """Something worth knowing that does not fail the node (an application's own Xid): shown under its line."""
    node.notes.append(text)
