"""gpusim load --seconds N: the lab's stand-in for provision's load program (the model: load_model.py), and
what goes wrong under it:
- the power supply: config "psu_watts" (provision_custom.lab.psu_watts), the budget of the node's GPUs, or a weaker supply
  fitted since (`gpusim psu WATTS`, the lab's psu-weak fault: the state's, until `gpusim psu clear`; a reboot
  keeps it, as it keeps the hardware), checked at each transient while the load runs: when the GPUs' instant draws add up past it three transients in a row, the
  GPU drawing most falls off the bus (Xid 79), as on the V100 box, and the load goes on with the others;
- a bad riser (fault bad-riser): its GPU's link logs a corrected AER error a second under load, none at rest.
Prints the load program's JSON line (a lost GPU's thread failed with a CUDA error), exit 1 when a GPU was lost."""

from __future__ import annotations

import json
import sys
import time

from .errors import SimError
from .faults import aer_corrected_error, fall_off_bus
from .load_model import PEAK_TFLOPS, SLOT_S, SPIKE_EVERY, cap_of, reading, running
from .models import MODELS
from .state import open_state, require_config

TRIP_AFTER = 3  # transients over the budget in a row before the supply drops a GPU (about a second)
RISER_EVERY_S = 1.0  # a bad riser's corrected error under load, one a second

def on_bus(state: dict) -> list:
    return [r for r in state["gpus"] if not r.get("gone") and not r.get("off_bus")]


def budget_of(state: dict, config: dict) -> float | None:
    """What the node's supplies give its GPUs now: a supply fitted since (gpusim psu), else the config's."""
    return state.get("psu_watts") or config.get("psu_watts")


def cmd_psu(args: list) -> int:
    """gpusim psu WATTS|clear: the node's supplies now give its GPUs WATTS (a weak or failing PSU fitted while the
    node runs); clear: the config's again."""
    if len(args) != 1 or not (args[0] == "clear" or args[0].isdigit() and 50 <= int(args[0]) <= 20000):
        raise SimError("usage: gpusim psu WATTS|clear (WATTS: 50..20000)")
    with open_state(require_config()) as state:
        state["psu_watts"] = None if args[0] == "clear" else int(args[0])
    return 0


def brownout(state: dict, config: dict, now: float) -> dict | None:
    """The GPU the power supply loses now, if any (and knocks it off the bus): the GPUs' instant draws past the
    budget in TRIP_AFTER transients in a row (a supply rides out one, not a run of them)."""
    budget = budget_of(state, config)
    load = running(state, now)
    slot = int(now / SLOT_S)
    if not budget or load is None or slot % SPIKE_EVERY or slot == load.get("last_slot"):
        return None
    load["last_slot"] = slot
    draws = [(reading(r, cap_of(r), load, now)["power_instant"], r) for r in on_bus(state)]
    if sum(watts for watts, _ in draws) <= float(budget):
        load["over"] = 0
        return None
    load["over"] = load.get("over", 0) + 1
    if load["over"] < TRIP_AFTER:
        return None
    load["over"] = 0
    _, victim = max(draws, key=lambda pair: (pair[0], pair[1]["slot"]))
    fall_off_bus(state, victim)
    load.setdefault("lost", []).append(victim["uuid"])
    return victim


def cmd_load(args: list) -> int:
    """gpusim load --seconds N: the lab's stand-in for provision's load program (the same JSON line)."""
    if len(args) != 2 or args[0] != "--seconds":
        raise SimError("usage: gpusim load --seconds N")
    try:
        seconds = float(args[1])
    except ValueError:
        raise SimError(f"--seconds {args[1]!r}: a number") from None
    config = require_config()
    started = time.time()
    with open_state(config) as state:
        state["load"] = {"started": started, "until": started + seconds, "lost": []}
        gpus = [(r["uuid"], r["slot"]) for r in on_bus(state)]
    clocks: dict = {uuid: [] for uuid, _ in gpus}
    while time.time() < started + seconds:
        with open_state(config) as state:
            now = time.time()
            brownout(state, config, now)
            load = running(state, now)
            if load is not None and now - load.get("riser_at", load["started"]) >= RISER_EVERY_S:
                load["riser_at"] = now
                for record in on_bus(state):
                    if record.get("bad_riser"):
                        aer_corrected_error(state, record)
            if load is not None:
                for record in on_bus(state):
                    if record["uuid"] in clocks:
                        clocks[record["uuid"]].append(reading(record, cap_of(record), load, now)["sm"])
        time.sleep(SLOT_S)
    with open_state(config) as state:
        lost = set((state.get("load") or {}).get("lost", []))
        records = {r["uuid"]: r for r in state["gpus"]}
    results = []
    for index, (uuid, _) in enumerate(gpus):
        model = MODELS[records[uuid]["model"]]
        rate = PEAK_TFLOPS.get(model.architecture, 100.0) * 0.7 * (
            sum(clocks[uuid]) / len(clocks[uuid]) / model.max_clocks.sm if clocks[uuid] else 0.0)
        results.append({"index": index, "uuid": uuid, "tflops": 0.0 if uuid in lost else round(rate, 1),
                        "error": "RuntimeError: CUDA error: unspecified launch failure" if uuid in lost else ""})
    sys.stdout.write(json.dumps({"seconds": seconds, "dtype": "bf16/fp16", "gpus": results}) + "\n")
    return 1 if lost else 0
