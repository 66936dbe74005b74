"""Carry out changes on one host as ONE remote command: each change's commands, its file written atomically
(a temporary file renamed over it, dated backups kept) and its after-write commands, in order; a change stops at
its own first failure and never stops another. What changes need run first (Change.prepare: apt-get update) runs
ahead of them once, however many declare it, and its failure fails those changes alone. The files' contents
travel on the command's stdin. Each change comes back with its error or None, and a host lost midway says so:
what ran before is known."""

from __future__ import annotations

import base64
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime, timezone

from provision.core import remote
from provision.core.connection import CommandResult, Connection, Lost, Unreachable
from provision.core.errors import ProvisionError
from provision.core.facts import Section, new_token, split_sections
from provision.core.plan import Change


@dataclass
class Step:
    """One command of a change, what its errors call it, and the bytes it reads on stdin (a file's)."""

    argv: list[str]
    label: str = ""  # "writing PATH": errors say "writing PATH failed: ..."; "": the command itself
    stdin: bytes | None = None

    def failed(self, rc: int, said: str) -> str:
        if self.label:
            return f"{self.label} failed: {said or f'exit {rc}'}"
        return f"`{' '.join(self.argv)}` exited {rc}: {said or 'no output'}"

    def words(self) -> str:
        return self.label or f"`{' '.join(self.argv)}`"


def steps(change: Change, stamp: str, keep_backups: int) -> list[Step]:
    """The change's commands, its write (the content on stdin), its after-write commands."""
    write = []
    if change.write:
        w = change.write
        data = base64.b64decode(w.content) if w.base64 else w.content.encode()
        write = [Step(remote.atomic_write_argv(w.path, w.mode, w.owner, w.group, stamp, keep_backups),
                      f"writing {w.path}", data)]
    return [*map(Step, change.commands), *write, *map(Step, change.after_write)]


@dataclass(frozen=True)
class BatchRun:
    """What one batch's command did on the host."""

    errors: list[str | None]  # each change's error text (None: it ran)
    printed: list[str]  # what each change's commands printed when they succeeded (a setter's warning, Change.explain)
    lost: str | None  # why the host was lost midway (None: it was not)
    upkeep_error: str | None  # the upkeep steps' (a cache the run keeps: no task's change)
    prepared: list[tuple[str, ...]]  # the preparing commands (Change.prepare) that ran and succeeded


def preparing(changes: list[Change], done: Collection[tuple[str, ...]] = ()) -> list[tuple[str, ...]]:
    """The preparing commands the changes declare (Change.prepare) and that are not done yet: each once, in the
    order first declared."""
    return list(dict.fromkeys(argv for change in changes for argv in map(tuple, change.prepare) if argv not in done))


def apply_changes(conn: Connection, changes: list[Change], keep_backups: int = 3, upkeep: list[Step] | None = None,
                  prepared: Collection[tuple[str, ...]] = ()) -> BatchRun:
    """Every change in one command, the upkeep steps first. Each preparing command the changes declare that
    `prepared` (those run earlier in this run) leaves out runs once, right before the first change that needs it
    (after what the changes before it did: a source they wrote is in the lists it fetches). A change whose
    preparing command fails runs nothing and has its error; the others run."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    lists = [upkeep] if upkeep else []
    at: dict[tuple[str, ...], int] = {}  # each preparing command's list in the batch
    own, needs = [], {}  # each change's list; the preparing lists it needs
    for change in changes:
        for argv in preparing([change], [*prepared, *at]):
            at[argv] = len(lists)
            lists.append([Step(list(argv))])
        if needed := [at[argv] for argv in map(tuple, change.prepare) if argv in at]:
            needs[len(lists)] = needed
        own.append(len(lists))
        lists.append(steps(change, stamp, keep_backups))
    ran, lost, said = run_batch(conn, lists, needs)
    prep_errors = {argv: ran[k] for argv, k in at.items()}
    errors, printed = [ran[k] for k in own], [said[k] for k in own]
    for i, change in enumerate(changes):  # what it needed first failed: it ran nothing, and that is its error
        errors[i] = next((e for argv in map(tuple, change.prepare) if (e := prep_errors.get(argv))), errors[i])
    index = {id(change): i for i, change in enumerate(changes)}
    for i, change in enumerate(changes):  # one call for several targets: its outcome is each one's
        carrier = index.get(id(change.runs_with))
        if change.runs_with is not None and carrier is not None:
            errors[i], printed[i] = errors[i] or errors[carrier], printed[carrier]
    return BatchRun(errors, printed, lost, ran[0] if upkeep else None,
                    [argv for argv, error in prep_errors.items() if error is None])


def run_batch(conn: Connection, lists: list[list[Step]], needs: dict[int, list[int]] | None = None
              ) -> tuple[list[str | None], str | None, list[str]]:
    """Each change's error text or None, why the host was lost (None: it was not), and what each change's
    commands printed; a list that needs others (remote.command_batch) runs only where they succeeded. Output that
    came back before a connection broke, or before the command's deadline, still tells which commands ran and how
    they ended: only the rest is unknown."""
    token = new_token()
    inputs = {(i, j): f"{i}.{j}" for i, steps in enumerate(lists) for j, s in enumerate(steps) if s.stdin is not None}
    stdin = remote.batch_stdin(token, {name: lists[i][j].stdin or b"" for (i, j), name in inputs.items()})
    timeout = 300 + 60 * len(lists)
    lost = None
    try:
        outcome = conn.run(["sh", "-c", remote.command_batch(token, [[s.argv for s in steps] for steps in lists],
                                                              inputs, needs)],
                           sudo=True, stdin=stdin or None, timeout=timeout)
    except Unreachable as exc:  # Lost: with what the batch printed until then
        outcome, lost = CommandResult([], -1, exc.stdout if isinstance(exc, Lost) else ""), str(exc)
    except ProvisionError as exc:  # a sudo that needs a password we do not have
        return [str(exc)] * len(lists), None, [""] * len(lists)
    cut_short = ("the host was lost" if lost is not None else f"the command was stopped at its deadline ({timeout} s)"
                 if outcome.timed_out else "the connection closed" if outcome.rc < 0 else None)
    said = outcome.stdout
    if cut_short and not said.endswith("\n"):  # a line cut in two ("@@TOKEN 0.1 rc=" of rc=0) says nothing
        said = said[:said.rfind("\n") + 1]
    sections = split_sections(token, said)
    begun = set(said.splitlines())  # the commands that had started
    printed = ["\n".join(s.output.strip() for j in range(len(steps)) if (s := sections.get(f"{i}.{j}")))
               for i, steps in enumerate(lists)]
    errors = [_error(steps, [sections.get(f"{i}.{j}") for j in range(len(steps))],
                     [f"@@{token} {i}.{j}" in begun for j in range(len(steps))], outcome, cut_short)
              for i, steps in enumerate(lists)]
    return errors, lost, printed


def _error(steps: list[Step], ran: list[Section | None], begun: list[bool], outcome: CommandResult,
           cut_short: str | None) -> str | None:
    """One change's error (None: every step ended 0), from what came back of its steps (ran: their sections). A
    step whose end never came back because the command was cut short (cut_short says how) may still have run, or
    still run: its output can be lost with the connection (a GPU at its new limit, its marker never seen). Never
    "not run" then, and never failed with the batch's own exit code."""
    for step, section, started in zip(steps, ran, begun):
        if section is None and cut_short is not None:
            return (f"unknown whether {step.words()} finished: {cut_short} while it ran" if started else
                    f"unknown whether {step.words()} ran: {cut_short} before its output came back")
        if section is None or section.rc != 0:
            said = section.output.strip() if section else outcome.output[-500:]
            return step.failed(section.rc if section else outcome.rc, said)
    return None
