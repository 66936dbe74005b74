"""What a run found and did, per host, per task, per target; and the exit code it means."""

from __future__ import annotations

import signal
from dataclasses import asdict, dataclass, field
from typing import Any

from provision.core.plan import CHANGED, FAILED, OK, SKIPPED, Item

UNREACHABLE = "unreachable"
NOT_STARTED = "not started"  # a host or task the run never started: it was stopped (Ctrl-C, SIGTERM) or lost the host

# Exit codes are bit flags so a script can test each condition.
EXIT_OK = 0
EXIT_TASK_FAILED = 1  # some task failed on some host
EXIT_BAD_INPUT = 2  # inventory/playbook/options invalid: nothing was touched (also Click usage errors)
EXIT_UNREACHABLE = 4  # some host could not be reached (5 = both 1 and 4)
EXIT_WOULD_CHANGE = 8  # --check: some host is not as intended (a drift gate, like terraform's -detailed-exitcode)
EXIT_REBOOT_PENDING = 16  # some host waits for a reboot (a driver installed loads at the next boot): not a failure
EXIT_NOT_WRITTEN = 32  # a file the run writes (--log, --junitxml, --prometheus) was not: the results shown stand
EXIT_NOT_TESTED = 64  # verify --active: some node's load, ports or all-reduce did not run (why: in its verdict)
# Stopped by a signal: 128 + its number, as shells say it (130 Ctrl-C/SIGINT, 143 SIGTERM); what was in flight
# finished, nothing new started.
EXIT_STOPPED_BASE = 128


@dataclass
class TaskResult:
    name: str
    status: str  # ok | changed | failed | skipped | not started
    items: list[Item] = field(default_factory=list)
    message: str = ""


@dataclass
class HostResult:
    host: str
    status: str = OK  # ok | changed | failed | unreachable (also when lost mid-run) | not started
    tasks: list[TaskResult] = field(default_factory=list)
    message: str = ""
    commands: int = 0  # remote commands run on this host
    seconds: float = 0.0
    reboot_pending: list[str] = field(default_factory=list)  # why its GPUs need a reboot (provision/capabilities/driver/packages.py)

    def counts(self) -> dict[str, int]:
        """Tasks per status. A task that changed some targets before it failed (or lost its host) counts as
        changed too: a count never says changed=0 when something changed."""
        counts = {OK: 0, CHANGED: 0, FAILED: 0, SKIPPED: 0, NOT_STARTED: 0}
        for task in self.tasks:
            counts[task.status] += 1
            if task.status != CHANGED and any(item.status == CHANGED for item in task.items):
                counts[CHANGED] += 1
        return counts

    def settle(self) -> None:
        """The host status from its tasks."""
        if self.status in (UNREACHABLE, NOT_STARTED):
            return
        statuses = {t.status for t in self.tasks}
        failed = FAILED in statuses or self.message  # a reboot pending is a state of its own (exit_code)
        self.status = FAILED if failed else CHANGED if CHANGED in statuses else OK


def task_status(items: list[Item]) -> str:
    statuses = {i.status for i in items}
    for status in (FAILED, CHANGED):
        if status in statuses:
            return status
    return OK


def exit_code(results: list[HostResult], check: bool = False, stopped_by: int | None = None) -> int:
    """The bit flags below; a run stopped by a signal exits 128 + its number instead (130, 143)."""
    if stopped_by:
        return EXIT_STOPPED_BASE + stopped_by
    code = EXIT_OK
    if any(r.status == FAILED for r in results):
        code |= EXIT_TASK_FAILED
    if any(r.status == UNREACHABLE for r in results):
        code |= EXIT_UNREACHABLE
    if check and any(r.status == CHANGED for r in results):
        code |= EXIT_WOULD_CHANGE
    if any(r.reboot_pending and r.status != UNREACHABLE for r in results):
        code |= EXIT_REBOOT_PENDING
    return code


def to_json(results: list[HostResult], check: bool, stopped_by: int | None = None) -> dict[str, Any]:
    data = {
        "check": check,
        "hosts": [asdict(r) | {"counts": r.counts()} for r in results],
        "exit_code": exit_code(results, check, stopped_by),
    }
    return data | ({"stopped_by": signal_name(stopped_by)} if stopped_by else {})


def from_json(data: dict[str, Any]) -> list[HostResult]:
    """to_json's hosts read back (what `provision apply --json` printed on a node: apply --via slurm)."""
    return [HostResult(h["host"], h["status"],
                       [TaskResult(t["name"], t["status"], [Item(**i) for i in t["items"]], t.get("message", ""))
                        for t in h["tasks"]],
                       h.get("message", ""), h.get("commands", 0), h.get("seconds", 0.0), h.get("reboot_pending", []))
            for h in data["hosts"]]


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"
