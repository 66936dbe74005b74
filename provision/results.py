"""What a run found and did, per host, per task, per target; and the exit code it means."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from provision.tasks.base import CHANGED, FAILED, OK, SKIPPED, Item

UNREACHABLE = "unreachable"

# Exit codes are bit flags so a script can test each condition.
EXIT_OK = 0
EXIT_TASK_FAILED = 1  # some task failed on some host
EXIT_BAD_INPUT = 2  # inventory/playbook/options invalid: nothing was touched (also Click usage errors)
EXIT_UNREACHABLE = 4  # some host could not be reached (5 = both 1 and 4)
EXIT_WOULD_CHANGE = 8  # --check: some host is not as intended (a drift gate, like terraform's -detailed-exitcode)


@dataclass
class TaskResult:
    name: str
    status: str  # ok | changed | failed | skipped
    items: list[Item] = field(default_factory=list)
    message: str = ""


@dataclass
class HostResult:
    host: str
    status: str = OK  # ok | changed | failed | unreachable
    tasks: list[TaskResult] = field(default_factory=list)
    message: str = ""
    commands: int = 0  # remote commands run on this host
    seconds: float = 0.0
    reboot_pending: list[str] = field(default_factory=list)  # why its GPUs need a reboot (provision/driver.py)

    def counts(self) -> dict[str, int]:
        counts = {OK: 0, CHANGED: 0, FAILED: 0, SKIPPED: 0}
        for task in self.tasks:
            counts[task.status] += 1
        return counts

    def settle(self) -> None:
        """The host status from its tasks."""
        if self.status == UNREACHABLE:
            return
        statuses = {t.status for t in self.tasks}
        failed = FAILED in statuses or self.message or self.reboot_pending  # pending: not as intended until then
        self.status = FAILED if failed else CHANGED if CHANGED in statuses else OK


def task_status(items: list[Item]) -> str:
    statuses = {i.status for i in items}
    for status in (FAILED, CHANGED):
        if status in statuses:
            return status
    return OK


def exit_code(results: list[HostResult], check: bool = False) -> int:
    code = EXIT_OK
    if any(r.status == FAILED for r in results):
        code |= EXIT_TASK_FAILED
    if any(r.status == UNREACHABLE for r in results):
        code |= EXIT_UNREACHABLE
    if check and any(r.status == CHANGED for r in results):
        code |= EXIT_WOULD_CHANGE
    return code


def to_json(results: list[HostResult], check: bool) -> dict:
    return {
        "check": check,
        "hosts": [asdict(r) | {"counts": r.counts()} for r in results],
        "exit_code": exit_code(results, check),
    }
