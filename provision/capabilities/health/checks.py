"""GPU health checks: memory errors that need a reset or a new card, and clocks held down by heat or power."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

import pytest

from provision.capabilities.gpu import clock_events
from provision.core import pci
from provision.core.checks import CRITICAL, REBOOT, REMEDIES, RESET, SERVICE, WARNING, fail

if TYPE_CHECKING:  # types only
    from provision.capabilities.gpu.model import GpuFacts
    from provision.verify.model import Node


def readable_gpus(node: Node) -> list[GpuFacts]:
    gpus = node.facts.nvidia.gpus
    if not gpus:
        pytest.skip("no GPU read here" + (" (see nvidia_smi_reads_the_gpus)" if node.inventory.settings.gpu else ""))
    return gpus


# GpuFacts attribute -> what its value says, what to do about it, the smallest step that clears it.
MEMORY_TROUBLE: tuple[tuple[str, Callable[[Any], str], str, str], ...] = (
    ("ecc_uncorrected", lambda n: f"{n} uncorrectable ECC error(s) since the driver loaded",
     "drain it, then reset the GPU or reboot; if uncorrectable errors return, replace the GPU", RESET),
    ("remap_pending", lambda _: "a row remap is pending",
     "reset the GPU (nvidia-smi -r -i N, nothing running on it) or reboot to activate the remap", RESET),
    ("remap_failure", lambda _: "a row remapping failed (no spare rows left)",
     "the GPU is out of spare memory rows: replace it", SERVICE),
    ("retired_pages_pending", lambda _: "a page is pending retirement",
     "reboot (or reload the driver) to retire the page", REBOOT),
)


def check_gpu_memory_has_no_uncorrectable_errors(node: Node) -> None:
    """Reads: each GPU's uncorrectable ECC count, pending and failed row remaps and pages pending retirement (nvidia-
    smi --query-gpu).
    Next step: drain the node, then reset the GPU (nvidia-smi -r) or reboot; errors that return, or no spare rows
    left: replace the GPU"""
    found: list[str] = []
    fixes: dict[str, None] = {}  # ordered sets: each fix and GPU once, in the order found
    about: dict[str, None] = {}
    remedy = RESET
    for gpu in readable_gpus(node):
        for attr, says, fix, step in MEMORY_TROUBLE:
            value = getattr(gpu, attr)
            if value:  # None (not reported), 0 and False are all fine
                found.append(f"{gpu.label} {gpu.bus_id}: {says(value)}")
                fixes[fix] = None
                about[pci.slot(gpu.bus_id)] = None
                remedy = max(remedy, step, key=REMEDIES.index)
    if found:
        fail("no uncorrectable ECC error, no pending row remap or page retirement", "; ".join(found),
             "; ".join(fixes), about=tuple(about), remedy=remedy)


def check_gpus_have_thermal_headroom(node: Node) -> None:
    """Degrees until slowdown, not only the slowdown once it happened: a GPU at its threshold at rest has no room
    left for a job (fans, airflow, a clogged heatsink, a hot room).

    Reads: provision_gpu.thermal_margin; each GPU's temperature and its slowdown and shutdown thresholds (nvidia-smi
    -q -d TEMPERATURE).
    Next step: check the fans (nvidia-smi -q -d PERFORMANCE, the BMC's fan sensors), the airflow, the room and the
    heatsink; then `provision verify` again, under load
    """
    gpus = readable_gpus(node)
    read = node.facts.thermal
    if read is None:
        pytest.skip("the GPUs' temperatures were not read")
    margin = node.inventory.settings.gpu.thermal_margin if node.inventory.settings.gpu else 5
    hot, about, severity = [], [], WARNING  # slower; near shutdown: a crash waiting for the next job
    for gpu in gpus:
        t = read.get(gpu.bus_id)
        if t is None or t.to_slowdown is None or t.to_slowdown >= margin:
            continue
        now = f" at {t.current:g} C" if t.current is not None else ""
        slowdown = (f"{t.to_slowdown:g} C below its slowdown temperature" if t.to_slowdown > 0
                    else f"{-t.to_slowdown:g} C past its slowdown temperature" if t.to_slowdown < 0
                    else "at its slowdown temperature")
        shutdown = f", {t.to_shutdown:g} C below shutdown" if t.to_shutdown is not None else ""
        hot.append(f"{gpu.label} {gpu.bus_id}{now}: {slowdown}{shutdown}")
        about.append(pci.slot(gpu.bus_id))
        severity = CRITICAL if t.to_shutdown is not None and t.to_shutdown < margin else severity
    if not any(t.to_slowdown is not None for t in read.values()):
        pytest.skip("nvidia-smi reports no slowdown temperature for these GPUs")
    if hot:
        fail(f"every GPU at least {margin} C below its slowdown temperature (provision_gpu.thermal_margin)", "; ".join(hot),
             "check its fans (nvidia-smi -q -d PERFORMANCE, the BMC's fan sensors), the airflow and the room; a "
             "blocked or clogged heatsink; then watch it under load (provision verify again)",
             about=tuple(about), severity=severity, remedy=SERVICE)  # fans and air: a person, not a reset


def check_clocks_are_not_held_down_by_heat_or_power(node: Node) -> None:
    """Reads: each GPU's active clock event reasons (nvidia-smi --query-gpu clocks_event_reasons.active).
    Next step: power: check the PSU's capacity and cabling, or set a lower power limit or application clocks; heat:
    check the fans, the airflow and the room"""
    held, thermal_only, slots = [], [], []
    for gpu in readable_gpus(node):
        troubles = clock_events.troubles(gpu.clock_events_active or 0)
        if troubles:
            held.append(f"{gpu.label} {gpu.bus_id}: " + ", ".join(f"{e.label} ({e.trouble})" for e in troubles))
            thermal_only.append(clock_events.heat_only(gpu.clock_events_active or 0) and pci.slot(gpu.bus_id))
            slots.append(pci.slot(gpu.bus_id))
    if held:
        # Only heat on one GPU: the headroom check says so (with the temperatures), this is its evidence.
        because = (f"gpus_have_thermal_headroom:{thermal_only[0]}",) if len(held) == 1 and thermal_only[0] else ()
        fail("no clock event reason but idle, application clocks, power cap, sync boost or display",
             "; ".join(held),
             "a power brake or a slowdown under load: check the PSU's capacity and cabling, and a lower power "
             "limit or application clocks (provision clocks); thermal: check fans, airflow and the room",
             # under verify --active's load, its finding of the same GPU (the brake, the heat) says it under load
             because=because + tuple(f"gpus_hold_up_under_load:{slot}" for slot in slots if slot),
             about=tuple(s for s in slots if s))
