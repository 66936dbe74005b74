"""Carry out a task's changes on one host: command-only changes batched into one remote command, a file
written atomically (stdin, a temporary file renamed over it) with dated backups kept. Each change comes back
with its error or None, and a host lost midway says so: what ran before is known, nothing more is tried."""

from __future__ import annotations

from datetime import datetime, timezone

from provision.core import remote
from provision.core.connection import Connection, Unreachable
from provision.core.errors import ProvisionError
from provision.core.facts import new_token, split_sections
from provision.core.plan import Change


def apply_changes(conn: Connection, changes: list[Change], keep_backups: int = 3
                  ) -> tuple[list[str | None], list[str], str | None]:
    """Each change's error text (None: it ran), what its commands printed when they succeeded (a setter's
    warning, for Change.explain), and why the host was lost midway (None: it was not).
    A task's changes that only run commands (one per GPU, mostly) go to the host as ONE command; a change
    that writes a file sends it on stdin, on its own. Once the host is lost, nothing more is tried."""
    batched = [i for i, change in enumerate(changes) if not change.write]
    errors: dict[int, str | None] = {}
    printed: dict[int, str] = {}
    lost = None
    if batched:
        batch_errors, lost, batch_printed = run_batch(conn, [changes[i].commands for i in batched])
        errors, printed = dict(zip(batched, batch_errors)), dict(zip(batched, batch_printed))
    for i, change in enumerate(changes):
        if i in errors:
            continue
        if lost is not None:
            errors[i] = "not run: the host was lost before it"
            continue
        try:
            errors[i] = apply_change(conn, change, keep_backups)
        except Unreachable as exc:
            lost, errors[i] = str(exc), f"unknown whether it ran: the host was lost during it ({exc})"
    index = {id(change): i for i, change in enumerate(changes)}
    for i, change in enumerate(changes):  # one call for several targets: its outcome is each one's
        carrier = index.get(id(change.runs_with))
        if change.runs_with is not None and carrier is not None:
            errors[i], printed[i] = errors[i] or errors[carrier], printed.get(carrier, "")
    return [errors[i] for i in range(len(changes))], [printed.get(i, "") for i in range(len(changes))], lost


def run_batch(conn: Connection, command_lists: list[list[list[str]]]
              ) -> tuple[list[str | None], str | None, list[str]]:
    """Each change's error text or None, why the host was lost (None: it was not), and what each change's
    commands printed. Output that came back before a connection broke still tells which commands ran."""
    token = new_token()
    try:
        outcome = conn.run(["sh", "-c", remote.command_batch(token, command_lists)], sudo=True,
                           timeout=300 + 60 * len(command_lists))
    except Unreachable as exc:
        return ([f"unknown whether it ran: the host was lost during it ({exc})"] * len(command_lists), str(exc),
                [""] * len(command_lists))
    except ProvisionError as exc:  # a sudo that needs a password we do not have
        return [str(exc)] * len(command_lists), None, [""] * len(command_lists)
    sections = split_sections(token, outcome.stdout)
    begun = set(outcome.stdout.splitlines()) if outcome.rc < 0 else set()  # which commands had started
    errors: list[str | None] = []
    printed = ["\n".join(s.output.strip() for j in range(len(commands)) if (s := sections.get(f"{i}.{j}")))
               for i, commands in enumerate(command_lists)]
    for i, commands in enumerate(command_lists):
        error = None
        for j, argv in enumerate(commands):
            ran = sections.get(f"{i}.{j}")
            if ran is None and outcome.rc < 0:  # the channel closed with no exit status: the host went
                # A command whose start never came back may still have run: its output can be lost with the
                # connection (a GPU at its new limit, its marker never seen). Never say "not run" then.
                error = (f"unknown whether `{' '.join(argv)}` finished: the connection closed while it ran"
                         if f"@@{token} {i}.{j}" in begun else
                         f"unknown whether `{' '.join(argv)}` ran: the connection closed before its output came back")
                break
            if ran is None or ran.rc != 0:
                said = ran.output.strip() if ran else outcome.output[-500:]
                error = f"`{' '.join(argv)}` exited {ran.rc if ran else outcome.rc}: {said or 'no output'}"
                break
        errors.append(error)
    return errors, None, printed


def apply_change(conn: Connection, change: Change, keep_backups: int = 3) -> str | None:
    """A change that writes a file: its commands, the write (stdin), its after-write commands; the error or None.
    Raises Unreachable when the host is lost."""
    def run_all(commands: list[list[str]]) -> str | None:
        for argv in commands:
            outcome = conn.run(argv, sudo=True, timeout=300)
            if not outcome.ok:
                return f"`{' '.join(argv)}` exited {outcome.rc}: {outcome.output or 'no output'}"
        return None

    try:
        error = run_all(change.commands)
        if error:
            return error
        if change.write:
            w = change.write
            stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
            outcome = conn.run(remote.atomic_write_argv(w.path, w.mode, w.owner, w.group, stamp, keep_backups,
                                                       "base64" if w.base64 else ""),
                               sudo=True, stdin=w.content, timeout=120)
            if not outcome.ok:
                return f"writing {w.path} failed: {outcome.output or f'exit {outcome.rc}'}"
        return run_all(change.after_write)
    except Unreachable:
        raise
    except Exception as exc:  # a sudo that needs a password we do not have, ...
        return str(exc)
