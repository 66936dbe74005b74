"""Kernel-log checks of this boot: Xid errors and GPUs fallen off the bus, PCIe errors on the GPUs' links."""

from __future__ import annotations

from typing import TYPE_CHECKING

from collections import Counter

import pytest

from provision.capabilities.health import kernlog
from provision.core import pci
from provision.core.checks import Finding, fail, fail_each, note

if TYPE_CHECKING:  # types only
    from provision.capabilities.gpu.model import GpuFacts, LostGpu
    from provision.verify.model import Node


def kernel_events(node: Node) -> list[kernlog.KernelEvent]:
    log = node.facts.kernel_log
    if log is None:
        pytest.skip("the kernel log was not read")
    if log.source is None:
        pytest.skip(f"cannot read the kernel log ({log.message}): run verify as root, with NOPASSWD sudo, "
                    "or as a member of group adm")
    return kernlog.parse(kernlog.last_boot("\n".join(log.lines)))


def gpu_names(node: Node) -> dict[str, str]:
    """bus key -> "GPU2", for the GPUs read now, lost, or recorded at the last good run."""
    nvidia, names = node.facts.nvidia, {}
    for recorded in node.facts.gpu_layout or []:
        names[pci.slot(recorded.bus_id)] = f"GPU{recorded.index}"
    seen: list[LostGpu | GpuFacts] = [*nvidia.lost, *nvidia.gpus]
    for gpu in seen:
        if gpu.bus_id and gpu.index is not None:
            names[pci.slot(gpu.bus_id)] = f"GPU{gpu.index}"
    return names


def where(event: kernlog.KernelEvent, names: dict[str, str]) -> str:
    key = pci.slot(event.bus_id or "")
    return f"{names[key]} {key}" if key in names else (key or "an unnamed GPU")


def check_no_xid_errors_since_boot(node: Node) -> None:
    """One finding per cause: the Xid lines of a GPU lost now, or of a GPU whose memory or NVLink check fails, are
    that check's evidence (filed under it); the rest are this check's own. An Xid the driver logged because of an
    earlier one ("Xid 45 ... caused by previous Xid 149") is judged, and filed, as its cause.

    Reads: the kernel log of this boot (dmesg, sudo dmesg or journalctl -k -b): its NVRM Xid lines.
    Next step: the action each Xid's meaning names (NVIDIA's Xid catalogue): a reset, a reboot, a reseat or a
    service call; an application's fault is a note, not a finding
    """
    events = kernel_events(node)
    names = gpu_names(node)
    with_xid_79 = {e.bus_id for e in events if e.kind == "xid" and e.xid == 79}
    serious: dict[tuple[str, ...], Counter[str]] = {}  # because -> line -> times
    actions: dict[tuple[str, ...], dict[str, None]] = {}
    said: Counter[str] = Counter()
    for event in events:
        if event.kind == "xid":
            info = kernlog.event_info(event)
            if info.cause:  # "GPU0 0000:dc:00 Xid 45 caused by Xid 149 (nvlink: <Xid 149's meaning>)"
                line = (f"{where(event, names)} Xid {event.xid} caused by Xid {info.cause.code} "
                        f"({info.severity}: {info.cause.meaning})")
            else:
                line = f"{where(event, names)} Xid {event.xid} ({info.severity}: {info.meaning})"
            if not kernlog.event_needs_attention(event):
                said[line] += 1
                continue
            action = info.action
        elif event.kind == "fallen-off-bus" and event.bus_id not in with_xid_79:  # the kernel's words, no Xid
            info = kernlog.xid_info(79)
            line = f"{where(event, names)} fallen off the bus (kernel log, no Xid): {event.detail}"
            action = "reboot; if it recurs, reseat the card and check its riser and power"
        else:
            continue
        kind = "off-bus" if (info.cause or info).code == 79 else info.severity  # an Xid 45 caused by 79 too
        because = tuple(f"{check}:{pci.slot(event.bus_id)}" for check in EXPLAINED_BY.get(kind, ())
                        if event.bus_id)
        serious.setdefault(because, Counter())[line] += 1
        actions.setdefault(because, {})[action] = None
    for line, n in said.items():
        note(node, f"{line}{f' x{n}' if n > 1 else ''}: an application's fault, not the node's")
    fail_each([Finding("no Xid error that needs attention since boot",
                       "; ".join(f"{line}{f' x{n}' if n > 1 else ''}" for line, n in lines.items()),
                       " ".join(actions[because]), because=because)
               for because, lines in serious.items()])


def check_no_gpu_failed_to_initialize(node: Node) -> None:
    """A GPU the driver could not bring up at boot never shows in nvidia-smi: only the kernel says it was there
    (RmInitAdapter failed, the probe failed). Named by its bus id; it counts against provision_gpu.count.

    Reads: the kernel log of this boot: RmInitAdapter and probe failures, by bus id; the GPUs nvidia-smi reads.
    Next step: reseat the card and check its power cables and riser, then reboot; "Cannot initialize GSP firmware":
    update the driver; if it stays, the card needs service
    """
    events = [e for e in kernel_events(node) if e.kind == "init-failed"]
    names = gpu_names(node)
    readable = {pci.slot(g.bus_id) for g in node.facts.nvidia.gpus}
    failed: dict[str, Counter[str]] = {}
    for event in events:
        key = pci.slot(event.bus_id or "")
        if key and key in readable:
            continue  # it came up after all (a retry, a reset): nothing missing now
        failed.setdefault(key, Counter())[event.detail] += 1
    findings = []
    for key, details in failed.items():
        said = "; ".join(f"{detail}{f' x{n}' if n > 1 else ''}" for detail, n in details.items())
        findings.append(Finding(
            "every GPU on the PCIe bus initialised by the driver",
            f"{names[key] + ' ' if key in names else ''}{key or 'a GPU'}: {said}",
            "reseat the card and check its power cables and riser, then reboot; \"Cannot initialize GSP firmware\" "
            "in dmesg: update the driver; if it stays, the card needs service",
            because=(f"no_gpu_is_lost:{key}",) if key else (), about=(key,) if key else ()))
    fail_each(findings)


# The checks whose failure, on the same GPU, an Xid of this kind is evidence of (by the Xid's severity, or its
# cause's): a GPU off the bus, its memory's uncorrectable errors, its NVLink links down or counting errors (the
# NVLink checks are `about` the GPU's PCI slot, as these leads are).
EXPLAINED_BY = {"off-bus": ("no_gpu_is_lost", "no_gpu_failed_to_initialize"),
                "memory": ("gpu_memory_has_no_uncorrectable_errors",),
                "nvlink": ("nvlink_links_are_up_at_speed", "nvlink_has_no_errors")}


def check_no_pcie_errors_on_the_gpu_links_since_boot(node: Node) -> None:
    """Reads: the kernel log's AER lines for the GPUs and the ports above them, and their AER counters
    (/sys/bus/pci/devices/*/aer_dev_*).
    Next step: reseat the card and its riser, try another slot, check the link width: a riser or slot going bad"""
    events = kernel_events(node)
    names = gpu_names(node)
    pcie = node.facts.pcie
    ports = {pci.slot(port): pci.slot(gpu) for gpu, port in (pcie.ports if pcie else {}).items()}
    found: Counter[str] = Counter()
    for event in events:
        if not event.kind.startswith("aer-"):
            continue
        key = pci.slot(event.bus_id or "")
        if key in names:
            found[f"{where(event, names)}: {event.detail}"] += 1
        elif key in ports:
            gpu = ports[key]
            found[f"the port {key} above {names.get(gpu, gpu)}: {event.detail}"] += 1
    for counters in pcie.aer if pcie else []:
        if counters.total:
            errors = ", ".join(f"{name} {n}" for name, n in counters.counts.items() if n)
            gpu = names.get(pci.slot(counters.gpu), counters.gpu)
            device = gpu if counters.device == counters.gpu else f"the port {counters.device} above {gpu}"
            found[f"{device}: {counters.total} {counters.kind} error(s) counted ({errors})"] += 1
    if found:
        fail("no PCIe error on a GPU's link since boot",
             "; ".join(f"{line}{f' x{n}' if n > 1 else ''}" for line, n in found.items()),
             "a riser or slot going bad: reseat the card and its riser, try another slot, check the link width; "
             "correctable errors cost replays and bandwidth, uncorrectable ones crash jobs")
