"""The run log: one JSON object per line, appended locally, of what changed where (for audit).

Never holds secrets: file contents are not logged, only which file changed.
"""

from __future__ import annotations

import getpass
import json
import os
import threading
import uuid
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path

from provision.core.errors import InputError, Problem
from provision.core.results import HostResult, TaskResult


def state_home() -> Path:
    """provision's state on this machine: $XDG_STATE_HOME/provision (default ~/.local/state/provision)."""
    return Path(os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state")) / "provision"


def default_path() -> Path:
    return state_home() / "runs.jsonl"


class RunLog:
    """The log of one run. Its first line is written before any host is touched: a log that cannot be written
    then is bad input (InputError, as `option`). A line that cannot be written later (the disk filled) stops the
    log, never the run: `unwritten` says why, and the command prints it and exits with that bit."""

    def __init__(self, path: Path, command: str, inventory: str, option: str = "run log"):
        self.path = path
        self.option = option
        self.unwritten = ""  # why the log stopped short ("" while every line is in it)
        self.run_id = uuid.uuid4().hex[:12]
        self._lock = threading.Lock()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._append({"event": "start", "command": command, "inventory": inventory, "user": getpass.getuser()})
        except OSError as exc:
            raise InputError([Problem("command line", "", option, f"{str(path)!r} cannot be written: "
                                      f"{exc.strerror or exc}", "apply --log FILE names another; the default is "
                                      "under $XDG_STATE_HOME (~/.local/state)")]) from None

    def _write(self, record: dict[str, object]) -> None:
        if self.unwritten:  # a log with a hole in it would read as a run that did less
            return
        try:
            self._append(record)
        except OSError as exc:
            self.unwritten = (f"{self.option} {self.path}: not written from its {record['event']} line on: "
                              f"{exc.strerror or exc}")

    def _append(self, record: dict[str, object]) -> None:
        record = {"time": datetime.now(timezone.utc).isoformat(timespec="seconds"), "run": self.run_id} | record
        line = json.dumps(record, default=str) + "\n"
        with self._lock, open(self.path, "a") as fh:
            fh.write(line)  # one write per line: concurrent runs interleave whole lines

    def task(self, host: str, result: TaskResult, check: bool) -> None:
        items = [{k: v for k, v in asdict(i).items() if k != "diff"} for i in result.items]
        self._write({"event": "task", "host": host, "task": result.name, "status": result.status,
                     "check": check, "message": result.message, "items": items})

    def step(self, host: str, step: str, why: str, said: str, ok: bool) -> None:
        """One step of `provision recover` on a host: what it was, why it was chosen, what came of it."""
        self._write({"event": "step", "host": host, "step": step, "why": why, "said": said, "ok": ok})

    def summary(self, results: list[HostResult], check: bool, aborted: str = "") -> None:
        """The end of a run; aborted: the signal that stopped it (the hosts not started say so)."""
        self._write({"event": "end", "check": check} | ({"aborted": aborted} if aborted else {})
                    | {"hosts": {r.host: {"status": r.status, "message": r.message} | r.counts() for r in results}})

    def abort(self, why: str, detail: str = "") -> None:
        """The end of a run that stopped before its summary (Ctrl-C, bad input found on the hosts)."""
        self._write({"event": "end", "aborted": why, "detail": detail})
