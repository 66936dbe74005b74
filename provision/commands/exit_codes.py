"""Every exit status provision's commands return, in one table: the commands compute their status here, their
--help epilogs are written from it, and so is the docs' exit-codes reference.

Most codes are bit flags, added up (5: a task failed and a host was unreachable); a run stopped by a signal exits
128 + its number instead, as shells say it. A code's meaning may differ by command (1: a task failed for apply, a
check for verify): each meaning is its own record, naming the commands it holds for."""

from __future__ import annotations

import signal
import textwrap
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Sequence

from provision.core.results import (EXIT_BAD_INPUT, EXIT_NOT_TESTED, EXIT_NOT_WRITTEN, EXIT_OK, EXIT_REBOOT_PENDING,
                                    EXIT_STOPPED_BASE, EXIT_TASK_FAILED, EXIT_UNREACHABLE, EXIT_WOULD_CHANGE,
                                    HostResult, exit_code)

if TYPE_CHECKING:  # types only
    from provision.verify import Verdict

APPLYING = ("apply", "clocks", "power", "persistence", "ecc", "compute-mode", "mig")  # the commands that change hosts
CHANGING = (*APPLYING, "recover")  # the commands that change hosts: apply's run options (--check, --log, ...)
HOST_COMMANDS = (*CHANGING, "facts", "verify", "unlock")
EVERY_COMMAND = (*HOST_COMMANDS, "inventory", "advise", "demo")
STOPPABLE = (*APPLYING, "verify", "recover")  # the first Ctrl-C or SIGTERM finishes what is in flight and reports


@dataclass(frozen=True)
class ExitCode:
    code: int
    name: str
    meaning: str  # one sentence, as --help and the reference show it
    commands: tuple[str, ...]


EXIT_CODES: tuple[ExitCode, ...] = (
    ExitCode(EXIT_OK, "ok", "every host converged (with --check: every host is as intended)", APPLYING),
    ExitCode(EXIT_OK, "ok", "every host was read", ("facts",)),
    ExitCode(EXIT_OK, "ok", "every host passed", ("verify",)),
    ExitCode(EXIT_OK, "ok", "no lock is left on the selected hosts", ("unlock",)),
    ExitCode(EXIT_OK, "ok", "every node passes verify, after the steps it took", ("recover",)),
    ExitCode(EXIT_OK, "ok", "done", ("inventory", "advise")),
    ExitCode(EXIT_OK, "ok", "every step ran (otherwise the demo exits with the failed step's own code)", ("demo",)),
    ExitCode(EXIT_TASK_FAILED, "failed", "some task failed on some host", APPLYING),
    ExitCode(EXIT_TASK_FAILED, "failed", "with --list: some host has no GPU nvidia-smi can read", ("clocks",)),
    ExitCode(EXIT_TASK_FAILED, "failed", "some host's facts could not be read (the error is shown with the host)",
             ("facts",)),
    ExitCode(EXIT_TASK_FAILED, "failed", "some check failed on some host", ("verify",)),
    ExitCode(EXIT_TASK_FAILED, "left alone", "a lock was left alone: a live run holds it", ("unlock",)),
    ExitCode(EXIT_TASK_FAILED, "failed", "some node still fails: it needs a person (a card to replace), its step "
             "failed, its jobs still run, or it is out of service for a reason not provision's", ("recover",)),
    ExitCode(EXIT_BAD_INPUT, "bad input", "bad input (the inventory, a playbook, an option): no host was touched",
             EVERY_COMMAND),
    ExitCode(EXIT_UNREACHABLE, "unreachable", "some host was unreachable (5 = both 1 and 4)", HOST_COMMANDS),
    ExitCode(EXIT_WOULD_CHANGE, "would change", "--check only: some host would change (a drift gate for scripts)",
             APPLYING),
    ExitCode(EXIT_WOULD_CHANGE, "would change", "--check only: some node would take a step", ("recover",)),
    ExitCode(EXIT_REBOOT_PENDING, "reboot pending", "some host waits for a reboot: a driver installed loads at the "
             "next boot, an ECC mode set takes effect then (provision apply --reboot); not a failure", APPLYING),
    ExitCode(EXIT_NOT_WRITTEN, "not written", "the run log (--log) could not be written to the end; the results "
             "shown stand", CHANGING),
    ExitCode(EXIT_NOT_WRITTEN, "not written", "the --junitxml or --prometheus file could not be written to the "
             "end; the verdicts shown stand", ("verify",)),
    ExitCode(EXIT_NOT_TESTED, "not tested", "--active: some node, port or all-reduce was not tested", ("verify",)),
    ExitCode(EXIT_STOPPED_BASE + signal.SIGINT, "interrupted", "stopped by Ctrl-C (SIGINT): what was in flight "
             "finished, nothing new started; the report says which", STOPPABLE),
    ExitCode(EXIT_STOPPED_BASE + signal.SIGTERM, "terminated", "stopped by SIGTERM, as by Ctrl-C", STOPPABLE),
)

BIT_FLAGS = {EXIT_TASK_FAILED, EXIT_UNREACHABLE, EXIT_WOULD_CHANGE, EXIT_REBOOT_PENDING, EXIT_NOT_WRITTEN,
             EXIT_NOT_TESTED}
HELP_WIDTH = 76  # click indents an epilog by 2: the lines fit 78 columns, as the options' help does


def codes_of(command: str) -> list[ExitCode]:
    return [record for record in EXIT_CODES if command in record.commands]


def exit_help(command: str) -> str:
    """The --help epilog of `command`: its exit codes, each with its meaning, kept as written (click's \\b)."""
    records = codes_of(command)
    flags = any(record.code in BIT_FLAGS for record in records)
    lines = ["\b", "Exit codes (bit flags, added up):" if flags else "Exit codes:"]
    for record in records:
        lines += textwrap.wrap(record.meaning, HELP_WIDTH, initial_indent=f"  {record.code:<4}",
                               subsequent_indent=" " * 6, break_on_hyphens=False)
    return "\n".join(lines)


def exit_status(flags: int, stopped: int | None = None, unwritten: Sequence[str] = ()) -> int:
    """The status a command exits with: its bit flags, with EXIT_NOT_WRITTEN where a file was not written; a run
    stopped by a signal exits 128 + its number instead."""
    if stopped:
        return EXIT_STOPPED_BASE + stopped
    return flags | (EXIT_NOT_WRITTEN if any(unwritten) else 0)


def run_status(results: list[HostResult], check: bool = False, stopped: int | None = None,
               unwritten: Sequence[str] = ()) -> int:
    """apply, facts and the ad-hoc commands: from each host's result."""
    return exit_status(exit_code(results, check), stopped, unwritten)


def verify_status(verdicts: list[Verdict], stopped: int | None = None, unwritten: Sequence[str] = ()) -> int:
    from provision.verify import FAIL, UNREACHABLE  # here: provision.verify brings pytest, which --help never needs

    statuses = {v.status for v in verdicts}
    flags = ((EXIT_TASK_FAILED if FAIL in statuses else 0) | (EXIT_UNREACHABLE if UNREACHABLE in statuses else 0)
             | (EXIT_NOT_TESTED if any(v.not_tested for v in verdicts) else 0))
    return exit_status(flags, stopped, unwritten)


def recover_status(statuses: Iterable[str], unreachable: str, planned: str, fine: Iterable[str],
                   unwritten: Sequence[str] = (), stopped: int | None = None) -> int:
    """recover: from what became of each node (commands/recover.py): fine, planned (--check), unreachable, or
    still failing."""
    found, ok = set(statuses), set(fine)
    return exit_status((EXIT_UNREACHABLE if unreachable in found else 0)
                       | (EXIT_WOULD_CHANGE if planned in found else 0)
                       | (EXIT_TASK_FAILED if found - ok - {unreachable, planned} else 0), stopped, unwritten)


def unlock_status(statuses: Iterable[str]) -> int:
    """unlock: from what it found on each host (core/hostlock.py unlock_hosts)."""
    found = set(statuses)
    return (EXIT_TASK_FAILED if "left alone" in found else 0) | (EXIT_UNREACHABLE if "unreachable" in found else 0)


def clock_list_status(results: list[HostResult], without_gpus: bool) -> int:
    """clocks --list: the read's status, and 1 where some host has no GPU nvidia-smi can read."""
    return exit_code(results) | (EXIT_TASK_FAILED if without_gpus else 0)
