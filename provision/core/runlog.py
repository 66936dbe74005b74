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


def state_home() -> Path:
    """provision's state on this machine: $XDG_STATE_HOME/provision (default ~/.local/state/provision)."""
    return Path(os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state")) / "provision"


def default_path() -> Path:
    return state_home() / "runs.jsonl"


class RunLog:
    def __init__(self, path: Path, command: str, inventory: str):
        self.path = path
        self.run_id = uuid.uuid4().hex[:12]
        self._lock = threading.Lock()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._write({"event": "start", "command": command, "inventory": inventory, "user": getpass.getuser()})

    def _write(self, record: dict) -> None:
        record = {"time": datetime.now(timezone.utc).isoformat(timespec="seconds"), "run": self.run_id} | record
        line = json.dumps(record, default=str) + "\n"
        with self._lock, open(self.path, "a") as fh:
            fh.write(line)  # one write per line: concurrent runs interleave whole lines

    def task(self, host: str, result, check: bool) -> None:
        items = [{k: v for k, v in asdict(i).items() if k != "diff"} for i in result.items]
        self._write({"event": "task", "host": host, "task": result.name, "status": result.status,
                     "check": check, "message": result.message, "items": items})

    def summary(self, results, check: bool, aborted: str = "") -> None:
        """The end of a run; aborted: the signal that stopped it (the hosts not started say so)."""
        self._write({"event": "end", "check": check} | ({"aborted": aborted} if aborted else {})
                    | {"hosts": {r.host: {"status": r.status, "message": r.message} | r.counts() for r in results}})

    def abort(self, why: str, detail: str = "") -> None:
        """The end of a run that stopped before its summary (Ctrl-C, bad input found on the hosts)."""
        self._write({"event": "end", "aborted": why, "detail": detail})
