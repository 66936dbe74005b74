"""GPU health checks: memory errors that need a reset or a new card, and clocks held down by heat or power."""

from __future__ import annotations

import pytest

from provision.capabilities.gpu import clock_events
from provision.core import pci
from provision.core.checks import fail


def readable_gpus(node):
    gpus = node.facts.nvidia.gpus
    if not gpus:
        pytest.skip("no GPU read here" + (" (see nvidia_smi_reads_the_gpus)" if node.inventory.settings.gpu else ""))
    return gpus


# GpuFacts attribute -> what its value says, what to do about it.
MEMORY_TROUBLE = (
    ("ecc_uncorrected", lambda n: f"{n} uncorrectable ECC error(s) since the driver loaded",
     "drain it, then reset the GPU or reboot; if uncorrectable errors return, replace the GPU"),
    ("remap_pending", lambda _: "a row remap is pending",
     "reset the GPU (nvidia-smi -r -i N, nothing running on it) or reboot to activate the remap"),
    ("remap_failure", lambda _: "a row remapping failed (no spare rows left)",
     "the GPU is out of spare memory rows: replace it"),
    ("retired_pages_pending", lambda _: "a page is pending retirement",
     "reboot (or reload the driver) to retire the page"),
)


def check_gpu_memory_has_no_uncorrectable_errors(node):
    found, fixes, about = [], {}, {}
    for gpu in readable_gpus(node):
        for attr, says, fix in MEMORY_TROUBLE:
            value = getattr(gpu, attr)
            if value:  # None (not reported), 0 and False are all fine
                found.append(f"{gpu.label} {gpu.bus_id}: {says(value)}")
                fixes[fix] = None
                about[pci.slot(gpu.bus_id)] = None
    if found:
        fail("no uncorrectable ECC error, no pending row remap or page retirement", "; ".join(found),
             "; ".join(fixes), about=tuple(about))


def check_clocks_are_not_held_down_by_heat_or_power(node):
    held = []
    for gpu in readable_gpus(node):
        troubles = clock_events.troubles(gpu.clock_events_active or 0)
        if troubles:
            held.append(f"{gpu.label} {gpu.bus_id}: " + ", ".join(f"{e.label} ({e.trouble})" for e in troubles))
    if held:
        fail("no clock event reason but idle, application clocks, power cap, sync boost or display",
             "; ".join(held),
             "a power brake or a slowdown under load: check the PSU's capacity and cabling, and a lower power "
             "limit or application clocks (provision clocks); thermal: check fans, airflow and the room")
