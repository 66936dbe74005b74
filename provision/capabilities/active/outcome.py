"""What an active run tested and what it measured, for the verdict (commands/verify.py), pure.

Untested is never a pass: a node the load did not reach (no load program, GPU processes or Slurm jobs on it, the
run cut off, a stop before its end) and a port or all-reduce that did not run are each named, as "part: why", and
the verdict says "not tested" where nothing failed. A passing run reports its figures all the same: per GPU its
peak power, its SM clock under load and the TFLOP/s the load reported; per node the GPUs' highest instant draw
added up and its headroom under provision_active.power_budget_watts; per port the Mb/s iperf3 measured; per all-reduce its
bus bandwidth.
"""

from __future__ import annotations

from provision.capabilities.active import judge
from provision.capabilities.active.run import NOT_APPLICABLE, ActiveRun
from provision.core import pci

LOAD, FABRIC = "load", "ports and all-reduce"  # the parts of an active run a verdict names


def not_applicable(run: ActiveRun) -> str:
    """Why there was nothing to load, or "": provision's program exits NOT_APPLICABLE (no torch, no CUDA); dcgmi
    is not installed or reaches no host engine (its own exit codes are DCGM's, so 3 means nothing there)."""
    if run.dcgm is not None:
        return run.dcgm.not_applicable
    if run.load_rc == NOT_APPLICABLE:
        return run.load.get("error") or "the load found nothing to load"
    return ""


def untested(run: ActiveRun) -> list[str]:
    """"part: why" for each part of the run that did not run to its end on this node; [] when all did."""
    said = []
    if run.refused:
        said.append(f"{LOAD}: not loaded: {run.refused}")
    elif run.error:
        said.append(f"{LOAD}: {run.error}")
    elif why := not_applicable(run):
        said.append(f"{LOAD}: no load to run here: {why} (provision_active.load_command, provision_active.python or "
                    "provision_active.dcgm_diag names one)")
    elif run.stopped:
        said.append(f"{LOAD}: stopped by {run.stopped} after {run.seconds:g} s of sampling")
    elif run.lost:
        said.append(f"{LOAD}: cut short: the node was {run.lost}")
    said += [f"{FABRIC}: {words}" for words in run.fabric_notes]
    return said


def figures(run: ActiveRun) -> list[dict[str, str | float]]:
    """What was measured, each {"part", "figure", "value"} (the unit in the figure's name; part: a GPU's bus id,
    a port, an all-reduce, or "" for the node). No GPU or power figure where the load did not run: they idled."""
    found = [_figure(port, "port_mbps", mbps) for port, mbps in run.ports.items()]
    found += [_figure(what, "allreduce_busbw_gbs", gbs) for what, gbs in run.allreduce.items()]
    if run.refused or run.error or not_applicable(run):
        return found
    rates = {g.get("uuid"): g.get("tflops") for g in run.load.get("gpus") or [] if isinstance(g, dict)}
    for target in run.targets:
        rows = run.samples.get(target.uuid, [])
        loaded = [s for s in rows if s.util is not None and s.util >= judge.LOADED_UTIL] or rows
        peaks = [p for s in rows if (p := s.peak_power) is not None]
        clocks = [float(s.sm) for s in loaded if s.sm is not None]
        rate = rates.get(target.uuid)
        part = pci.address(target.bus_id) or target.bus_id
        found += [_figure(part, name, value) for name, value in (
            ("power_peak_watts", max(peaks) if peaks else None),
            ("sm_clock_median_mhz", judge.percentile(clocks, 50) if clocks else None),
            ("tflops", rate if isinstance(rate, (int, float)) else None)) if value is not None]
    peak = judge.peak_instant(run.samples)
    if peak is not None:
        total = peak[0]
        found.append(_figure("", "power_sum_peak_watts", total))
        if run.power_budget:
            found.append(_figure("", "power_headroom_watts", run.power_budget - total))
    return found


def _figure(part: str, name: str, value: float) -> dict[str, str | float]:
    return {"part": part, "figure": name, "value": round(float(value), 4)}

