"""Kernel-log checks of this boot: Xid errors and GPUs fallen off the bus, PCIe errors on the GPUs' links."""

from __future__ import annotations

from typing import TYPE_CHECKING

from collections import Counter

import pytest

from provision.capabilities.health import checks_recovery, kernlog, recovery
from provision.core import pci
from provision.core.checks import REBOOT, REMEDIES, RESET, Finding, fail, fail_each, note

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
    earlier one ("Xid 45 ... caused by previous Xid 149") is judged, and filed, as its cause; so are the driver's
    Xid 154 (the recovery it now asks) and NV_ERR_RESET_REQUIRED lines, with the Xid before them on that GPU, or
    under the GPU's recovery action when none came before. A GPU whose driver asked a recovery (Xid 154) and now
    asks none has had it: what the log says of it up to then is a note.

    Reads: the kernel log of this boot (dmesg, sudo dmesg or journalctl -k -b): its NVRM Xid lines; each GPU's
    recovery action now (nvidia-smi gpu_recovery_action).
    Next step: the action each Xid's meaning names (NVIDIA's Xid catalogue): a reset, a reboot, a reseat or a
    service call; an application's fault is a note, not a finding
    """
    events = kernel_events(node)
    names = gpu_names(node)
    with_xid_79 = {e.bus_id for e in events if e.kind == "xid" and e.xid == 79}
    recovered = _recovered_until(events, node)
    readable = {pci.slot(gpu.bus_id) for gpu in node.facts.nvidia.gpus}
    groups: dict[tuple[str | None, tuple[str, ...]], _Group] = {}  # one per GPU and cause: (GPU, leads) -> lines
    cause_of: dict[str | None, _Group] = {}  # GPU -> the group of its last serious event
    said: Counter[tuple[str, str]] = Counter()  # (line, why it is only a note) -> times
    for i, event in enumerate(events):
        judged = _judge(event, names, with_xid_79)
        if judged is None:
            continue
        line, fix, remedy, kind = judged
        if kind == "off-bus" and event.bus_id in readable:  # it answers again, but NVIDIA's step is still a reboot
            line += ", back on the bus now"
        if kind is None:
            said[line, "an application's fault, not the node's"] += 1
        elif i <= recovered.get(event.bus_id, -1):
            said[line, "recovered since (the driver asks no recovery for it now)"] += 1
        else:
            group = (cause_of[event.bus_id] if kind == "recovery" and event.bus_id in cause_of
                     else groups.setdefault((event.bus_id, _leads(kind, event.bus_id)), _Group()))
            cause_of[event.bus_id] = group
            group.add(line, fix, remedy, event.bus_id)
            if kind == "recovery" and event.bus_id:  # the GPU's recovery action, read now, speaks for this cause
                group.asked = f"{checks_recovery.CHECK}:{pci.slot(event.bus_id)}"
    for (line, why), n in said.items():
        note(node, f"{line}{f' x{n}' if n > 1 else ''}: {why}")
    fail_each([Finding("no Xid error that needs attention since boot", group.found(), " ".join(group.fixes),
                       because=tuple(dict.fromkeys((group.asked, *leads) if group.asked else leads)),
                       about=tuple(group.about), remedy=group.remedy)
               for (_, leads), group in groups.items()])


class _Group:
    """The kernel lines of one cause: each line once with its count, each fix once, the largest step."""

    def __init__(self) -> None:
        self.lines: Counter[str] = Counter()
        self.fixes: dict[str, None] = {}
        self.remedy = REMEDIES[0]
        self.asked = ""  # the recovery check's lead for its GPU, once the driver's recovery lines joined it
        self.about: dict[str, None] = {}  # the GPUs (a reset takes exactly these)

    def add(self, line: str, fix: str, remedy: str, bus_id: str | None) -> None:
        self.lines[line] += 1
        self.fixes[fix] = None
        self.remedy = max(self.remedy, remedy, key=REMEDIES.index)
        if bus_id:
            self.about[pci.slot(bus_id)] = None

    def found(self) -> str:
        return "; ".join(f"{line}{f' x{n}' if n > 1 else ''}" for line, n in self.lines.items())


def _judge(event: kernlog.KernelEvent, names: dict[str, str],
           with_xid_79: set[str | None]) -> tuple[str, str, str, str | None] | None:
    """(line, fix, remedy, kind) of an event this check reads; kind None: an application's fault (a note), "recovery":
    the driver's recovery lines; None: not this check's."""
    place = where(event, names)
    if event.kind == "reset-required" or (event.kind == "xid" and event.xid == 154):
        if not kernlog.event_needs_attention(event):
            return None  # an Xid 154 back to None: the recovery is done
        word = "reset" if event.kind == "reset-required" else recovery.of_xid_154(event.detail)
        asked = recovery.action(word) or recovery.ACTIONS["reset"]
        said = ("NV_ERR_RESET_REQUIRED (the driver refuses work until the GPU is reset)"
                if event.kind == "reset-required" else f"Xid 154 ({asked.says})")
        return f"{place} {said}", asked.fix, asked.remedy, "recovery"
    if event.kind == "xid":
        info = kernlog.event_info(event)
        if info.cause:  # "GPU0 0000:dc:00 Xid 45 caused by Xid 149 (nvlink: <Xid 149's meaning>)"
            line = f"{place} Xid {event.xid} caused by Xid {info.cause.code} ({info.severity}: {info.cause.meaning})"
        else:
            line = f"{place} Xid {event.xid} ({info.severity}: {info.meaning})"
        if not kernlog.event_needs_attention(event):
            return line, "", "", None
        kind = "off-bus" if (info.cause or info).code == 79 else info.severity  # an Xid 45 caused by 79 too
        return line, info.action, kernlog.remedy(info), kind
    if event.kind == "fallen-off-bus" and event.bus_id not in with_xid_79:  # the kernel's words, no Xid
        return (f"{place} fallen off the bus (kernel log, no Xid): {event.detail}",
                "reboot; if it recurs, reseat the card and check its riser and power", REBOOT, "off-bus")
    return None


def _leads(kind: str, bus_id: str | None) -> tuple[str, ...]:
    """The checks whose failure on this GPU an event of this kind is evidence of, as verify's leads (an NVLink fault:
    a fatal NVSwitch error first, which stalls the GPUs' links behind it)."""
    if kind == "recovery":
        return (f"{checks_recovery.CHECK}:{pci.slot(bus_id)}",) if bus_id else (checks_recovery.CHECK,)
    switch = (NVSWITCH_CHECK,) if kind == "nvlink" else ()
    return switch + tuple(f"{check}:{pci.slot(bus_id)}" for check in EXPLAINED_BY.get(kind, ()) if bus_id)


def _recovered_until(events: list[kernlog.KernelEvent], node: Node) -> dict[str | None, int]:
    """GPU -> the index of its last recovery line (an Xid 154 that asked one, the NV_ERR_RESET_REQUIRED after it),
    for each GPU whose driver asked a recovery and asks none now: it was reset since (a reboot would have emptied
    the log), so its events up to there are over."""
    now = {pci.slot(gpu.bus_id): gpu.recovery_action for gpu in node.facts.nvidia.gpus}
    asked = {e.bus_id for e in events if e.kind == "xid" and e.xid == 154 and kernlog.event_needs_attention(e)}
    return {event.bus_id: i for i, event in enumerate(events)
            if event.bus_id in asked and now.get(event.bus_id or "") == recovery.NONE
            and (event.kind == "reset-required" or (event.kind == "xid" and event.xid == 154))}


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


NVSWITCH_CHECK = "no_fatal_nvswitch_error_since_boot"
# Fatal SXids that a reset of the GPUs and switches does not clear: the Fabric Manager guide's "always fatal" ones,
# which need the host restarted (or a secondary bus reset of every GPU and NVSwitch, which is what a reboot does).
ALWAYS_FATAL_SXIDS = frozenset({12020, 22003, 22011, *range(23001, 23018)})


def check_no_fatal_nvswitch_error_since_boot(node: Node) -> None:
    """NVSwitch errors (SXid) of this boot. A non-fatal one is for information (a note); a fatal one stalls the
    NVLink traffic through that switch and the GPUs behind it (their Xid 74 and 45 are filed under this finding).

    Reads: the kernel log of this boot: its nvidia-nvswitch SXid lines.
    Next step: stop the GPU applications and Fabric Manager, reset all GPUs together (nvidia-smi -r, without -i),
    start Fabric Manager again; an "always fatal" SXid (12020, 22003, 22011, 23001-23017): reboot the node
    """
    fatal: Counter[str] = Counter()
    informational: Counter[str] = Counter()
    restart = False
    for event in kernel_events(node):
        if event.kind != "sxid":
            continue
        line = f"NVSwitch {event.bus_id} SXid {event.xid}: {event.detail}"
        if kernlog.sxid_is_fatal(event):
            fatal[line] += 1
            restart = restart or event.xid in ALWAYS_FATAL_SXIDS
        else:
            informational[line] += 1
    for line, n in informational.items():
        note(node, f"{line}{f' x{n}' if n > 1 else ''}: non-fatal, for information")
    if fatal:
        fail("no fatal NVSwitch error (SXid) since boot",
             "; ".join(f"{line}{f' x{n}' if n > 1 else ''}" for line, n in fatal.items()),
             "reboot the node (an always-fatal SXid)" if restart else
             "stop the GPU applications and Fabric Manager, reset all GPUs together (nvidia-smi -r, without -i), "
             "start Fabric Manager again; if it returns, check the NVLink cables or baseboard",
             remedy=REBOOT if restart else RESET)


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
