"""`dcgmi diag -r N -j` as verify --active's load (provision_active.dcgm_diag): what dcgmi printed, read into one result
per test and GPU, and what gpus_hold_up_under_load makes of them (a failed test a finding, a warning a note).
The sampler judges the GPUs through dcgmi's run as through provision's load; dcgmi reports no TFLOP/s, so the
throughput comparisons (the node's median, the last good run) do not apply.

The JSON as dcgmi writes it (NVIDIA/DCGM dcgmi/Diag.cpp, HelperJsonBuildOutput; testing/python3/
dcgm_diag_schema.json), one tree in every version, its leaves renamed:
- 2.x and 3.x: {"DCGM GPU Diagnostic": {"test_categories": [{"category", "tests": [{"name", "results": [...]}]}]}}
  with results {"gpu_id": "0", "status": "Pass", "warnings": [{"warning": text, "error_id", "error_severity",
  ...}], "info": text}; a Deployment test has one result for the node (a GPU id only with an error).
- 4.x: the root "DCGM Diagnostic", results {"entity_group": "GPU", "entity_id": 0, ...} and "info": [texts],
  each test's "test_summary" beside them; "entity_groups" and "metadata" beside the root.
- a diagnostic that could not run: {ROOT: {"version", "runtime_error": text}}.
Statuses: Pass, Fail, Warn (before 3.3; since, a warning prints as Fail), Skip, Not Run; nvvs's own PASS, FAIL,
WARN, SKIP, and "gpu_ids" ("0,1" or 0) in place of gpu_id. Text before the JSON (a warning) is passed over.
Without dcgmi (the shell's 127), or without a host engine to reach (dcgmi's "Error: ... host engine" lines
instead of JSON), the check does not apply; anything else unreadable is said as such, never guessed at.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from provision.capabilities.active import judge
from provision.capabilities.active.judge import Judged, Target
from provision.core.checks import CRITICAL, ERROR, WARNING, Finding

ROOTS = ("DCGM Diagnostic", "DCGM GPU Diagnostic")  # 4.x, then 2.x and 3.x
# How long a level runs at most, for the run's timeout (DCGM's dcgmi diag reference: 1 seconds, 2 about two
# minutes, 3 about 15 minutes, 4 longer; older GPUs and releases take longer: generous, not tight).
LIMIT_S = {1: 300, 2: 1800, 3: 5400, 4: 4 * 3600}
STATUSES = {"pass": "pass", "passed": "pass", "fail": "fail", "failed": "fail", "warn": "warn", "warning": "warn",
            "skip": "skip", "skipped": "skip", "not run": "not run"}
# DCGM's error_severity (dcgmlib/dcgm_errors.h dcgmErrorSeverity_t): what the finding weighs and the next step.
MONITOR, ISOLATE, CONFIG, RESET = 1, 2, 5, 6
NEXT = {
    MONITOR: (WARNING, "DCGM says the GPU can run work but wants it watched: verify --active again soon"),
    ISOLATE: (CRITICAL, "DCGM says the GPU cannot run work: drain the node and have the GPU replaced"),
    CONFIG: (ERROR, "a setting, not the hardware: set what dcgmi names (provision apply where the inventory "
                    "has it), then verify --active again"),
    RESET: (CRITICAL, "drain the node and reset the GPU (nvidia-smi -r -i INDEX, or reboot), then verify "
                      "--active again"),
}


class Unreadable(ValueError):
    """dcgmi's output is not the JSON it writes."""


@dataclass(frozen=True)
class Result:
    """One test's result on one GPU (or the node), as dcgmi reported it."""

    test: str  # "Diagnostic", "PCIe" (3.x names tests in words), "software", "memory" (4.x by plugin)
    gpu: int | None  # dcgmi's GPU id (DCGM numbers GPUs in NVML's order: nvidia-smi's index); None: the node
    status: str  # pass, fail, warn, skip, not run
    warnings: tuple[str, ...] = ()
    info: tuple[str, ...] = ()
    severity: int | None = None  # DCGM's gravest error_severity among its warnings, where it gives one
    entity: str = "GPU"  # 4.x: another entity group (a CPU) is named, not mapped to a GPU


@dataclass
class Diag:
    """What one `dcgmi diag -r LEVEL -j` said."""

    level: int
    results: list[Result] = field(default_factory=list)
    version: str = ""
    error: str = ""  # dcgmi ran, but the diagnostic did not (its runtime_error), or its output could not be read
    not_applicable: str = ""  # no dcgmi on the node, or no host engine for it to reach


def argv(level: int) -> list[str]:
    return ["dcgmi", "diag", "-r", str(level), "-j"]


def read(level: int, text: str, rc: int | None, stderr: str = "") -> Diag:
    """The node's `dcgmi diag` output (stdout, exit, stderr) into a Diag; never raises."""
    diag = Diag(level)
    start = text.find("{")
    if start < 0:
        said = " ".join(line.strip() for line in (text.strip() or stderr.strip()).splitlines()[-2:])
        if rc == 127:  # the shell: command not found
            diag.not_applicable = f"dcgmi is not installed on the node ({said or 'not found'})"
        elif "host engine" in said.lower() or "unable to establish a connection" in said.lower():
            diag.not_applicable = (f"dcgmi could not reach nv-hostengine ({said}): start it "
                                   "(systemctl start nvidia-dcgm) to have dcgmi diag as the load")
        else:
            diag.error = f"could not read dcgmi's output: no JSON (exit {rc}: {said or 'no output'})"
        return diag
    try:
        document, _ = json.JSONDecoder().raw_decode(text[start:])
        diag.version, diag.error, diag.results = _tree(document)
    except Unreadable as exc:
        diag.error = f"could not read dcgmi's output: {exc}"
    except ValueError as exc:  # json's own error: cut short, or not JSON after all
        diag.error = f"could not read dcgmi's output: not JSON ({exc})"
    return diag


def _tree(document: object) -> tuple[str, str, list[Result]]:
    """(version, runtime_error, results) of dcgmi's JSON document."""
    if not isinstance(document, dict):
        raise Unreadable("not a JSON object")
    key = next((k for k in ROOTS if k in document), None)
    if key is None:
        raise Unreadable(f"none of {' or '.join(map(repr, ROOTS))} in it (keys: {', '.join(map(str, document))})")
    root = document[key]
    if not isinstance(root, dict):
        raise Unreadable(f"{key!r} is not an object")
    metadata = document.get("metadata")
    metadata = metadata if isinstance(metadata, dict) else {}  # 4.x's version is there, 3.x's beside the root
    version = str(metadata.get("version") or root.get("version") or document.get("version") or "")
    if root.get("runtime_error"):
        return version, f"dcgmi diag could not run: {str(root['runtime_error']).strip()}", []
    results = [result for category in _list(root.get("test_categories"), "test_categories")
               for test in _list(category.get("tests"), "tests")
               for result in _results(test)]
    if not results:
        raise Unreadable("no test result in it")
    return version, "", results


def _list(value: object, what: str) -> list[dict[str, Any]]:
    """A JSON array of objects; its nulls (nvvs leaves some) passed over."""
    items = [item for item in value if item is not None] if isinstance(value, list) else None
    if items is None or not all(isinstance(item, dict) for item in items):
        raise Unreadable(f"{what}: not an array of objects")
    return items


def _results(test: dict[str, Any]) -> list[Result]:
    """A test's results; where 4.x's test_summary fails the test and no result does (an error of no GPU), the
    summary as the node's result. A test without results (3.x's CPU EUD keeps them elsewhere) has none."""
    name = test.get("name")
    if not isinstance(name, str):
        raise Unreadable("a test without a name")
    results = [Result(name, _gpu(r), _status(r.get("status"), name), _warnings(r), _texts(r.get("info")),
                      _severity(r), str(r.get("entity_group", "GPU")))
               for r in (_list(test["results"], f"results of {name}") if "results" in test else [])]
    summary = test.get("test_summary")
    if isinstance(summary, dict) and _status(summary.get("status"), name) == "fail" \
            and not any(r.status == "fail" for r in results):
        results.append(Result(name, None, "fail", _warnings(summary), _texts(summary.get("info")),
                              _severity(summary)))
    return results


def _gpu(result: dict[str, Any]) -> int | None:
    for key in ("entity_id", "gpu_id", "gpu_ids"):  # 4.x; dcgmi 2.x and 3.x; nvvs ("0,1,2": all of them)
        value = result.get(key)
        if isinstance(value, bool) or value is None or value == "":
            continue
        ids = [part.strip() for part in str(value).split(",")]
        if not all(part.lstrip("-").isdigit() for part in ids):
            raise Unreadable(f"GPU id {value!r}")
        return int(ids[0]) if len(ids) == 1 and int(ids[0]) >= 0 else None  # several, or -1: the node
    return None


def _status(value: object, test: str) -> str:
    status = STATUSES.get(str(value).strip().lower()) if value is not None else None
    if status is None:  # a status this reader does not know is not taken for a pass
        raise Unreadable(f"status {value!r} of {test}")
    return status


def _warnings(result: dict[str, Any]) -> tuple[str, ...]:
    """The warnings' texts: objects with "warning" ("warnings" in 3.x's Deployment tests), or plain strings."""
    said = []
    for item in result.get("warnings") or []:
        if isinstance(item, dict):
            item = item.get("warning", item.get("warnings"))
        if isinstance(item, str) and item.strip():
            said.append(item.strip())
    return tuple(said)


def _texts(value: object) -> tuple[str, ...]:
    items = value if isinstance(value, list) else [value]
    return tuple(str(v).strip() for v in items if isinstance(v, str) and v.strip())


def _severity(result: dict[str, Any]) -> int | None:
    """The gravest error_severity of the warnings: RESET, ISOLATE, those DCGM does not place, CONFIG, MONITOR."""
    given = [w["error_severity"] for w in result.get("warnings") or []
             if isinstance(w, dict) and isinstance(w.get("error_severity"), int)]
    gravity = {RESET: 0, ISOLATE: 1, CONFIG: 3, MONITOR: 4, 0: 5}
    return min(given, key=lambda s: gravity.get(s, 2), default=None)


def judged(diag: Diag, targets: list[Target], lost: set[tuple[str, ...]]) -> Judged:
    """gpus_hold_up_under_load's findings and notes from dcgmi's report: one finding per failed test on one GPU
    (a GPU the sampler already found lost is that finding's, not dcgmi's), a note per warning and per skipped
    test; a diagnostic that did not run, or output that could not be read, one finding."""
    said = Judged()
    run = f"dcgmi diag -r {diag.level}"
    if diag.error:
        said.findings.append(Finding(
            f"{run} to run and report", diag.error,
            f"run `{run}` on the node to see why; nv-hostengine's log (/var/log/nv-hostengine.log) and nvvs.log "
            "beside it say more"))
        return said
    by_label = {t.label: t for t in targets}
    skipped: dict[str, list[str]] = {}
    for result in diag.results:
        target = by_label.get(f"GPU{result.gpu}") if result.entity == "GPU" else None
        who = (judge.name(target) if target else "the node" if result.gpu is None
               else f"dcgmi's {result.entity} {result.gpu}")
        about = judge.about(target) if target else ()
        words = "; ".join(result.warnings) or "; ".join(result.info)
        if result.status == "fail" and not (about and about in lost):
            severity, fix = NEXT.get(result.severity or 0, (
                CRITICAL, f"read `{run} -v` on the node (DCGM's diagnostic errors reference names the response to "
                          "each), then verify --active again"))
            fix = fix.replace("INDEX", str(result.gpu)) if result.gpu is not None else fix
            said.findings.append(Finding(f"{who} passing {run}'s {result.test} test",
                                         f"{who}: {result.test} failed: {words or 'dcgmi gave no reason'}",
                                         fix, about=about, severity=severity))
        elif result.status == "warn" or (result.status == "pass" and result.warnings):
            said.notes.append(f"{run}: {result.test} on {who} warned: {words or 'dcgmi gave no reason'}")
        elif result.status == "skip":
            skipped.setdefault(result.test, []).append(who + (f" ({words})" if words else ""))
    said.notes += [f"{run} skipped {test} on {', '.join(whos)}" for test, whos in skipped.items()]
    return said
