"""The load model: what the GPUs read while the lab's stand-in for provision's load program runs
(`gpusim load --seconds N`, load.py, given to verify --active as provision_active.load_command).

While a load runs (state["load"]: its start and end), every GPU on the bus works flat out:
- clocks: application clocks someone set where the cap lets them; locked clocks (`-lgc MIN,MAX`, "the range of
  desired locked GPU clock speed", nvidia-smi -h) bound boost: the GPU runs at the range's top (its boost clock
  where that is lower) and never below its bottom (users who lock 210,1900 or 180,2400 to undervolt see the
  load run at the top, power limits taking 5-10% off it: xor2k/gpu_undervolt#1, LACT#486); neither: boost. Each pulled down to what the power limit
  allows (SW Power Cap active);
- power: the average follows the SM clock (idle power plus the model's maximum rise times (clock / max)^1.5),
  never above the cap, which is enforced as an average. The instant reading is the average, except in one
  100 ms slot of three: a transient. Unpinned boost clocks spike to TRANSIENT x the average (the V100 box's
  brownouts); pinned clocks ripple by PINNED_RIPPLE. So the cap alone does not stop peaks; pinned clocks do;
- temperature rises toward idle + 20..35 C (more for more power) with a 15 s time constant;
- utilization 100%, memory at its maximum clock, no Idle reason.
"""

from __future__ import annotations

import math
import time

from .models import MODELS

TRANSIENT = 1.35  # a boost transient over the averaged draw
PINNED_RIPPLE = 1.02  # pinned clocks: the draw barely moves
SLOT_S = 0.1  # the model's time step: one transient slot in SPIKE_EVERY
SPIKE_EVERY = 3
EXPONENT = 1.5  # power rise with the SM clock
TEMP_TAU_S = 15.0
REASON_APP_CLOCKS, REASON_SW_POWER_CAP = 0x2, 0x4
PEAK_TFLOPS = {"Volta": 112.0, "Ampere": 142.0, "Ada Lovelace": 330.0, "Hopper": 989.0}  # dense fp16/bf16 tensor


def running(state: dict, now: float | None = None) -> dict | None:
    """The load running now, or None."""
    load = state.get("load")
    now = time.time() if now is None else now
    return load if load and load["started"] <= now < load["until"] else None


def pinned_sm(record: dict) -> int | None:
    """The SM clock a load runs at where someone set the clocks, before the power limit: within a locked range,
    as high as the GPU boosts (a range is a bound on boost, not a clock to sit at: its bottom is where an idle GPU
    may drop to); else application clocks that were set. None: neither (plain boost)."""
    model = MODELS[record["model"]]
    if record.get("locked_gpu"):
        low, high = sorted(int(b) for b in record["locked_gpu"])
        return max(low, min(high, model.boost_clock or model.max_clocks.sm))
    if record.get("app_clocks"):
        return int(record["app_clocks"][1])
    return None


def full_power(model, sm: int) -> float:
    """The draw at an SM clock with every unit busy."""
    rise = model.power_max - model.idle_power
    return model.idle_power + rise * (min(sm, model.max_clocks.sm) / model.max_clocks.sm) ** EXPONENT


def sm_under_cap(model, cap: float) -> int:
    """The highest SM clock whose full draw stays within the cap."""
    rise = model.power_max - model.idle_power
    share = max(0.0, min(1.0, (cap - model.idle_power) / rise)) if rise > 0 else 1.0
    return int(model.max_clocks.sm * share ** (1 / EXPONENT))


def reading(record: dict, cap: float, load: dict, now: float) -> dict:
    """One GPU under load at `now`: sm, mem (MHz), power (average), power_instant, temp, reasons, util."""
    model = MODELS[record["model"]]
    pinned = pinned_sm(record)
    wanted = pinned if pinned is not None else (model.boost_clock or model.max_clocks.sm)
    sm = min(wanted, sm_under_cap(model, cap))
    capped = sm < wanted
    average = min(full_power(model, sm), cap)
    spike = int(now / SLOT_S) % SPIKE_EVERY == 0
    instant = average * ((PINNED_RIPPLE if pinned is not None else TRANSIENT) if spike else 0.99)
    rise = 20 + 15 * average / model.power_max
    warm = 1 - math.exp(-max(0.0, now - load["started"]) / TEMP_TAU_S)
    reasons = (REASON_SW_POWER_CAP if capped else 0) | (REASON_APP_CLOCKS if pinned is not None and not capped else 0)
    return {"sm": sm, "mem": model.max_clocks.memory, "power": round(average, 2), "power_instant": round(instant, 2),
            "temp": int(model.idle_temp + rise * warm), "reasons": reasons, "util": 100}


def cap_of(record: dict) -> float:
    return record["power_limit"] if record["power_limit"] is not None else MODELS[record["model"]].power_default
