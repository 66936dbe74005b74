"""provision verify --json: the verdicts in a documented, versioned shape (README, "verify --json").

Version 1:

    {"schema": "provision-verify/1",
     "hosts": [{"host", "status": "pass"|"fail"|"unreachable", "message",
                "findings": [one per cause: {"check", "severity", "expected", "found", "next_step", "about",
                                              "consequences": [{"check", "severity", "expected", "found",
                                                                "about"}]}],
                "failures": [every check's findings, flat: {"check", "severity", "expected", "found",
                                                           "next_step", "because": [lead], "about"}],
                "passed": [check], "skipped": ["check: why"], "notes": [text]}],
     "slurm": [{"host", "node", "action", "said"}]}

A new key may appear within a version; a key renamed or removed, or a meaning changed, is a new version.
"""

from __future__ import annotations

from provision.verify import Failure, Verdict

SCHEMA = "provision-verify/1"


def _failure(f, with_lead: bool) -> dict:
    said = {"check": f.check, "severity": f.severity, "expected": f.expected, "found": f.found, "about": f.about}
    if with_lead:
        said |= {"next_step": f.fix, "because": f.because}
    return said


def host_json(verdict) -> dict:
    return {
        "host": verdict.host, "status": verdict.status, "message": verdict.message,
        "findings": [{**_failure(cause.failure, False), "next_step": cause.failure.fix,
                      "consequences": [_failure(c, False) for c in cause.consequences]}
                     for cause in verdict.findings],
        "failures": [_failure(f, True) for f in verdict.failures],
        "passed": verdict.passed, "skipped": verdict.skipped, "notes": verdict.notes,
    }


def to_json(verdicts: list, slurm: list[dict]) -> dict:
    return {"schema": SCHEMA, "hosts": [host_json(v) for v in verdicts], "slurm": slurm}


def from_json(data: dict) -> tuple[list, list[dict]]:
    """to_json read back (what `provision verify --json` printed on a node: verify --via slurm): the verdicts,
    and what was told to Slurm."""
    verdicts = [Verdict(h["host"], h["status"], h.get("message", ""), h.get("passed", []),
                        [Failure(f["check"], f["expected"], f["found"], f.get("next_step", ""), f.get("because", []),
                                 f.get("about", []), f["severity"]) for f in h.get("failures", [])],
                        h.get("skipped", []), h.get("notes", []))
                for h in data["hosts"]]
    return verdicts, data.get("slurm", [])
