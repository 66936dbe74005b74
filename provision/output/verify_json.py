"""provision verify --json: the verdicts in a documented, versioned shape (README, "verify --json").

Version 1:

    {"schema": "provision-verify/1",
     "hosts": [{"host", "status": "pass"|"fail"|"unreachable"|"not tested", "message",
                "findings": [one per cause: {"check", "severity", "expected", "found", "next_step", "about",
                                              "consequences": [{"check", "severity", "expected", "found",
                                                                "about"}]}],
                "failures": [every check's findings, flat: {"check", "severity", "expected", "found",
                                                           "next_step", "because": [lead], "about"}],
                "passed": [check], "skipped": ["check: why"], "notes": [text],
                "not_tested": ["part: why"] (--active: the load, ports or all-reduce that did not run),
                "figures": [{"part", "figure", "value"}] (--active: what was measured, the unit in the name)}],
     "slurm": [{"host", "node", "action", "said"}],
     "stopped_by": "SIGINT"|"SIGTERM" (only where a signal stopped the run)}

"not tested" (--active) is never a pass: nothing failed, but a part of the run did not test the node.

A new key may appear within a version; a key renamed or removed, or a meaning changed, is a new version.
"""

from __future__ import annotations

from typing import Any

from provision.core.results import signal_name
from provision.verify import Failure, Verdict

SCHEMA = "provision-verify/1"


def _failure(f, with_lead: bool) -> dict[str, Any]:
    said = {"check": f.check, "severity": f.severity, "expected": f.expected, "found": f.found, "about": f.about,
            "remedy": f.remedy}
    if with_lead:
        said |= {"next_step": f.fix, "because": f.because}
    return said


def host_json(verdict) -> dict[str, Any]:
    return {
        "host": verdict.host, "status": verdict.status, "message": verdict.message,
        "findings": [{**_failure(cause.failure, False), "next_step": cause.failure.fix,
                      "consequences": [_failure(c, False) for c in cause.consequences]}
                     for cause in verdict.findings],
        "failures": [_failure(f, True) for f in verdict.failures],
        "passed": verdict.passed, "skipped": verdict.skipped, "notes": verdict.notes,
        "not_tested": verdict.not_tested, "figures": verdict.figures,
    }


def to_json(verdicts: list[Verdict], slurm: list[dict[str, str]], stopped: int | None = None) -> dict[str, Any]:
    said = {"schema": SCHEMA, "hosts": [host_json(v) for v in verdicts], "slurm": slurm}
    return said | ({"stopped_by": signal_name(stopped)} if stopped else {})


def from_json(data: dict[str, Any]) -> tuple[list[Verdict], list[dict[str, str]]]:
    """to_json read back (what `provision verify --json` printed on a node: verify --via slurm): the verdicts,
    and what was told to Slurm."""
    verdicts = [Verdict(h["host"], h["status"], h.get("message", ""), h.get("passed", []),
                        [Failure(f["check"], f["expected"], f["found"], f.get("next_step", ""), f.get("because", []),
                                 f.get("about", []), f["severity"], f.get("remedy", "")) for f in h.get("failures", [])],
                        h.get("skipped", []), h.get("notes", []), h.get("not_tested", []), h.get("figures", []))
                for h in data["hosts"]]
    return verdicts, data.get("slurm", [])
