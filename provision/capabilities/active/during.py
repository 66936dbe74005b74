"""What went wrong during an active run, from the node read before the load and after it:
- the kernel log: the Xid, fallen-off-bus and PCIe AER events of the log read after that the one before did not
  hold (health/kernlog.py parses both). A riser that goes bad only under heavy traffic shows here, and only
  here: at rest its link is clean;
- the GPUs' counters: uncorrectable ECC errors (since the driver loaded) and NVLink error counters that grew.
The passive checks judge the same lines and counters since boot: where one failed, these are listed under it."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from provision.capabilities.health import kernlog
from provision.capabilities.health.facts import KernelLogFacts
from provision.core import pci
from provision.core.checks import CRITICAL, WARNING, Finding

if TYPE_CHECKING:  # types only
    from provision.capabilities.host import HostFacts

KINDS = ("xid", "fallen-off-bus", "aer-corrected", "aer-uncorrected")
# The passive checks judge the same lines since boot: where one failed, this finding is listed under it.
LEADS = ("no_pcie_errors_on_the_gpu_links_since_boot", "no_xid_errors_since_boot")


def events(log: KernelLogFacts | None) -> list[kernlog.KernelEvent]:
    if log is None or log.source is None:
        return []
    return [e for e in kernlog.parse(kernlog.last_boot("\n".join(log.lines))) if e.kind in KINDS]


def new_events(before: KernelLogFacts | None, after: KernelLogFacts | None) -> list[kernlog.KernelEvent]:
    """The events of `after` whose lines `before` did not hold (each line carries its own time stamp)."""
    seen = {e.line for e in events(before)}
    return [e for e in events(after) if e.line not in seen]


COUNTER_LEADS = ("gpu_memory_has_no_uncorrectable_errors", "nvlink_has_no_errors")


def counters(facts: HostFacts) -> dict[tuple[str, str], int]:
    """(GPU UUID, what) -> count: uncorrectable ECC errors, and each NVLink link's error counters."""
    found = {(g.uuid, "uncorrectable ECC errors"): g.ecc_uncorrected for g in facts.nvidia.gpus
             if g.ecc_uncorrected is not None}
    for gpu in facts.nvlink.gpus if facts.nvlink else []:
        for link, counted in gpu.errors.items():
            found |= {(gpu.uuid or "", f"NVLink {link} {name}"): n for name, n in counted.items()
                      if n is not None and name.lower().endswith("errors")}
    return found


def grown(before: HostFacts, after: HostFacts) -> list[Finding]:
    """One finding per GPU whose counters grew between the two reads."""
    was, now = counters(before), counters(after)
    slots = {g.uuid: pci.slot(g.bus_id) or g.bus_id for g in after.nvidia.gpus}
    by_gpu: dict[str, list[str]] = {}
    for (uuid, what), n in now.items():
        if n > was.get((uuid, what), 0):
            by_gpu.setdefault(uuid, []).append(f"{what} +{n - was.get((uuid, what), 0)}")
    return [Finding(f"no GPU error counted on {slots.get(uuid, uuid)} during the load",
                    f"{slots.get(uuid, uuid)} during the load: {', '.join(said)}",
                    "the checks these counters fail say what to do (memory: drain and reset the GPU; NVLink: the "
                    "bridge or baseboard)", because=COUNTER_LEADS, about=(slots.get(uuid, uuid),),
                    severity=CRITICAL if any("ECC" in s for s in said) else WARNING)
            for uuid, said in by_gpu.items()]


def findings(new: list[kernlog.KernelEvent]) -> list[Finding]:
    """One finding per device that logged during the load, its events counted by what they say."""
    by_device: dict[str, Counter[str]] = {}
    for event in new:
        what = f"Xid {event.xid}" if event.kind == "xid" else event.kind.replace("-", " ")
        detail = f" ({event.detail.split(',')[0].strip()})" if event.kind.startswith("aer") and event.detail else ""
        by_device.setdefault(event.bus_id or "", Counter())[what + detail] += 1
    found = []
    for device, counted in by_device.items():
        grave = any(not what.startswith("aer corrected") for what in counted)
        said = "; ".join(f"{what} x{n}" if n > 1 else what for what, n in counted.items())
        found.append(Finding(
            f"no kernel error on {device or 'the node'} during the load",
            f"{device or 'the node'} during the load: {said}",
            "errors that come only under load are a riser, cable or slot going bad: reseat the card and its riser, "
            "try another slot, then verify --active again; an Xid: its own finding names what to do",
            because=LEADS, about=(device,) if device else (), severity=CRITICAL if grave else WARNING))
    return found
