"""Each node's last good active run, kept on the machine that ran verify --active: the TFLOP/s each GPU (by UUID)
sustained the last time the whole node passed. The next run holds each GPU to it: a GPU that was fast and no
longer is (a riser, a fan, a new driver) is found even when its peers slowed with it.

One JSON file per host under $XDG_STATE_HOME/provision/active/ (default ~/.local/state), written atomically."""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from pathlib import Path

from provision.core.localfiles import write_atomically
from provision.core.runlog import state_home


def directory() -> Path:
    return state_home() / "active"


def _file(host: str) -> Path:
    return directory() / (re.sub(r"[^A-Za-z0-9_.-]", "_", host) + ".json")


def last_good(host: str) -> dict[str, float]:
    """UUID -> TFLOP/s of the host's last good run; empty when there is none (or it cannot be read)."""
    try:
        data = json.loads(_file(host).read_text())
    except (OSError, ValueError):
        return {}
    rates = data.get("gpus") if isinstance(data, dict) else None
    return {str(k): float(v) for k, v in rates.items() if isinstance(v, (int, float))} if isinstance(rates, dict) \
        else {}


def record(host: str, rates: dict[str, float]) -> None:
    """This run, which passed, as the host's last good one."""
    path = _file(host)
    path.parent.mkdir(parents=True, exist_ok=True)
    body = json.dumps({"host": host, "time": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                       "gpus": rates}, indent=2) + "\n"
    write_atomically(path, body.encode(), mode=0o600)


def rates(load: dict) -> dict[str, float]:
    """UUID -> TFLOP/s of the GPUs the load ran to the end on (its JSON line)."""
    gpus = load.get("gpus")
    if not isinstance(gpus, list):
        return {}
    return {g["uuid"]: float(g["tflops"]) for g in gpus
            if g.get("uuid") and not g.get("error") and isinstance(g.get("tflops"), (int, float)) and g["tflops"] > 0}
