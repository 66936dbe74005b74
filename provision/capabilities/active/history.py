"""Each node's last good active run, kept on the machine that ran verify --active: the TFLOP/s each GPU (by UUID)
sustained the last time the whole node passed. The next run holds each GPU to it: a GPU that was fast and no
longer is (a riser, a fan, a new driver) is found even when its peers slowed with it.

One JSON file per machine under $XDG_STATE_HOME/provision/active/ (default ~/.local/state), written atomically,
named by the host's name and its /etc/machine-id (key): two clusters that reuse node names (two labs, a test
cluster beside production) never share a history, while one cluster reached through another inventory (a copy,
a subset) keeps its own. A reinstalled node (a new machine-id) starts a new one: its driver and settings are new
too. Where the machine-id was not read (a host without the file), the name alone."""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from provision.core.localfiles import write_atomically
from provision.core.runlog import state_home


def directory() -> Path:
    return state_home() / "active"


def key(host: str, machine_id: str = "") -> str:
    """The name a host's history is kept under: its name and its machine-id (32 hex digits), where it has one."""
    machine = re.sub(r"[^0-9a-f]", "", machine_id.lower())[:32]
    return f"{host}.{machine}" if machine else host


def _file(key: str) -> Path:
    return directory() / (re.sub(r"[^A-Za-z0-9_.-]", "_", key) + ".json")


def last_good(key: str) -> dict[str, float]:
    """UUID -> TFLOP/s of the last good run kept under key; empty when there is none (or it cannot be read)."""
    try:
        data = json.loads(_file(key).read_text())
    except (OSError, ValueError):
        return {}
    rates = data.get("gpus") if isinstance(data, dict) else None
    return {str(k): float(v) for k, v in rates.items() if isinstance(v, (int, float))} if isinstance(rates, dict) \
        else {}


def record(key: str, rates: dict[str, float]) -> None:
    """This run, which passed, as the last good one kept under key."""
    path = _file(key)
    path.parent.mkdir(parents=True, exist_ok=True)
    body = json.dumps({"key": key, "time": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                       "gpus": rates}, indent=2) + "\n"
    write_atomically(path, body.encode(), mode=0o600)


def rates(load: dict[str, Any]) -> dict[str, float]:
    """UUID -> TFLOP/s of the GPUs the load ran to the end on (its JSON line)."""
    gpus = load.get("gpus")
    if not isinstance(gpus, list):
        return {}
    return {g["uuid"]: float(g["tflops"]) for g in gpus
            if g.get("uuid") and not g.get("error") and isinstance(g.get("tflops"), (int, float)) and g["tflops"] > 0}
