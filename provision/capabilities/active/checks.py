"""verify --active's check: the node held up under the load (judge.py on the samples, and the load's own report:
provision's load program's per-GPU TFLOP/s, or dcgmi diag's tests where it was the load, dcgm.py).
The passive checks then judge the node as the load left it (the engine reads it again after the run): a GPU
lost, an Xid, AER errors; a GPU the load took off the bus is this check's finding, theirs follow from it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import pytest

from provision.capabilities.active import dcgm, during, judge
from provision.capabilities.active.outcome import not_applicable
from provision.core.checks import CRITICAL, WARNING, Finding, fail_each, note

if TYPE_CHECKING:  # types only
    from provision.capabilities.active.run import ActiveRun

SLOW_GPU = 0.8  # a GPU below 80% of the node's median throughput
SLOWER_THAN_BEFORE = 0.85  # a GPU below 85% of its own last good run


class LoadedNode(Protocol):
    """What this check reads of a node: verify's Node, or a node lost mid-load that left only its load's run
    (commands/active.py lost_verdicts)."""

    active: ActiveRun | None
    notes: list[str]


def check_gpus_hold_up_under_load(node: LoadedNode) -> None:
    """Reads: provision_active; what `provision verify --active` recorded: nvidia-smi samples through the load, the
    load's per-GPU TFLOP/s (or dcgmi diag's tests) and the last good run's.
    Next step: as the finding says: the PSU's capacity and feed for a power brake, the clocks, power or PCIe
    findings for a slow GPU; then `provision verify --active` again"""
    run = getattr(node, "active", None)
    if run is None:
        pytest.skip("not asked: `provision verify --active` loads the node")
    # a part the run did not test is the verdict's "not tested" (active/outcome.py, commands/verify.py), never a pass
    if run.refused:
        pytest.skip(f"refused: {run.refused}")
    if run.error:
        fail_each([Finding("an active run on the node", run.error,
                           "run `provision facts` on the node: it says what nvidia-smi answers")])
    why = not_applicable(run)
    if why:
        fail_each(run.fabric)  # the ports were measured all the same
        pytest.skip(f"not applicable: {why}")
    judged = judge.judge(run.targets, run.samples, run.seconds, run.power_budget)
    for words in judged.notes:
        note(node, words)
    found = judged.findings
    if not run.samples:
        found.append(Finding("the GPUs sampled through the load", "nvidia-smi -lms recorded nothing",
                             "run `nvidia-smi --query-gpu=timestamp,power.draw --format=csv -lms 100` on the node: "
                             "it says why"))
    if run.dcgm is not None:  # dcgmi's tests; no TFLOP/s to hold to the node's median or the last good run
        said = dcgm.judged(run.dcgm, run.targets, judge.critical_subjects(found))
        for words in said.notes:
            note(node, words)
        found += said.findings
    else:
        found += _load_findings(run, judge.critical_subjects(found))
    lost = judge.critical_subjects(found)
    found += [f for f in during.findings(run.during) + run.grown if f.about not in lost]  # a lost GPU's Xid 79
    if run.lost:  # the gravest, unless the samples show the supply that took the node down: then under it
        gone = node_lost(run, judged.supply)
        found = [*found, gone] if judged.supply else [gone, *found]
    fail_each(found + run.fabric)


def node_lost(run: ActiveRun, supply: Finding | None) -> Finding:
    """A node lost mid-load (its connection closed or went silent): when, and its GPUs' highest summed draw
    until then; a consequence of the supply's finding where the samples have one."""
    peak = judge.peak_instant(run.samples)
    drew = f"; its GPUs' instant draws peaked at {peak[0]:.0f} W together at +{peak[1]:.1f} s" if peak else ""
    return Finding("the node answering through the load", f"{run.lost}{drew}",
                   "the node went down or off the network under load: read its BMC's event log (verify's BMC "
                   "checks: a PSU that tripped) and its kernel log once it answers (`provision facts`); then "
                   "`provision verify --active` again", because=(judge.lead(supply),) if supply else (),
                   severity=CRITICAL)


def _load_findings(run: ActiveRun, judged: set[tuple[str, ...]]) -> list[Finding]:
    """What the load itself says: a GPU whose thread failed (unless the judge already has it lost), a GPU well
    below the node's median or its own last good run (the median first: one GPU unlike its peers), a load that
    printed no report."""
    gpus = run.load.get("gpus")
    if not isinstance(gpus, list) and (run.stopped or run.lost):  # cut short: the samples are what there is
        return []
    if not isinstance(gpus, list):
        said = (run.load.get("error") or run.load_stderr.strip().splitlines()[-1:] or ["no output"])
        return [Finding("the load to run and report", f"the load exited {run.load_rc}: {' '.join(said)}",
                        "run it by hand on the node to see why (provision_active.python, provision_active.load_command)")]
    by_uuid = {t.uuid: t for t in run.targets}
    rates = {g.get("uuid", ""): g["tflops"] for g in gpus
             if not g.get("error") and isinstance(g.get("tflops"), (int, float))}
    median = judge.percentile(list(rates.values()), 50) if len(rates) >= 2 else None
    found = []
    for gpu in gpus:
        uuid = gpu.get("uuid", "")
        target = by_uuid.get(uuid)
        who, about = (judge.name(target), judge.about(target)) if target else (str(uuid), ())
        rate, before = rates.get(uuid), run.last_good.get(uuid)
        if gpu.get("error") and about not in judged:
            found.append(Finding(f"the load to run on {who}", f"it stopped: {gpu['error']}",
                                 "read the kernel log's Xid lines for this GPU (verify's no_xid_errors_since_boot)",
                                 about=about, severity=CRITICAL))
        elif rate is not None and median is not None and rate < median * SLOW_GPU:
            found.append(Finding(f"{who} near the node's median {median:g} TFLOP/s", f"{rate:g} TFLOP/s",
                                 "a GPU held back: its clocks, power or PCIe findings above say why; none: compare "
                                 "it with `nvidia-smi -q -d PERFORMANCE` during a load", about=about,
                                 because=judge.follows_on(about), severity=WARNING))
        elif rate is not None and before and rate < before * SLOWER_THAN_BEFORE:
            found.append(Finding(f"{who} near its last good run's {before:g} TFLOP/s",
                                 f"{rate:g} TFLOP/s ({rate / before:.0%} of it)",
                                 "what changed since: its clocks, power or PCIe findings above; a driver or firmware "
                                 "update; its cooling", about=about, because=judge.follows_on(about),
                                 severity=WARNING))
    return found
