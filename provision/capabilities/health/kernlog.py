"""NVIDIA GPU trouble in kernel-log text: Xid errors, GPUs fallen off the bus, PCIe AER reports.

Pure functions over text, tested against real published log lines (tests/fixtures/kernlog).
`parse` reads the output of dmesg (raw, -T/--ctime, --time-format iso, -x, -H/--reltime),
journalctl -k (short, short-precise, short-iso, short-full, short-monotonic, short-unix),
syslog/kern.log (with or without the kernel's own [uptime]) and bare messages, and returns one
KernelEvent per relevant message; everything else is ignored. `last_boot` cuts a multi-boot
syslog down to the last boot. `XID_TABLE`/`xid_info` say what an Xid means, `needs_attention`
and `event_needs_attention` whether the node needs draining, a reset or repair.

The bus ids in these lines come in several spellings ("PCI:0000:01:00", "0000:01:00.0", and
nvidia-smi's "00000000:01:00.0"); `pci.slot` reduces all of them to "0000:01:00" so that events
and nvidia-smi's GPUs can be matched; `gpu_uuids` maps them to the UUIDs the driver printed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from provision.core import pci

# --- what an Xid means -------------------------------------------------------------------------

# Severity is the kind of fault; needs_attention() says which kinds mean "drain/reset/repair this node".
SEVERITIES = ("application", "memory", "hardware", "driver", "nvlink", "info")
_ATTENTION = frozenset({"memory", "hardware", "driver", "nvlink"})
CATALOG_URL = "https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html"


@dataclass(frozen=True)
class XidInfo:
    code: int
    name: str  # nverror.h / Xid catalog mnemonic, "" if unknown
    meaning: str  # one short sentence a cluster operator understands
    severity: str  # one of SEVERITIES
    action: str  # what to do, short
    source: str  # where name, meaning and action come from


# Sources: H = NVIDIA/open-gpu-kernel-modules src/common/sdk/nvidia/inc/nverror.h (the name);
# C = NVIDIA "Analyzing Xid Errors with the Xid Catalog" (name for codes the public header lacks,
# description, immediate/investigatory resolution; cross-checked against leptonai/gpud's generated copy
# components/accelerator/nvidia/xid/catalog_generated.go); R = gpu-node-reference.md §3
# (S10-S14, the project's shared reference notes); M = stas00/ml-engineering
# compute/accelerator/nvidia/debug.md; G = leptonai/gpud xid.go notes.
_SOURCES = {
    "H": "nverror.h", "C": "NVIDIA Xid catalog", "R": "gpu-node-reference §3",
    "M": "ml-engineering debug.md", "G": "gpud xid.go",
}
_ROWS = [
    (8, "ROBUST_CHANNEL_FIFO_ERROR_IDLE_TIMEOUT", "application", "CG",
     "GPU stopped processing: a channel hit the driver's watchdog timeout, usually a hung or overlong kernel.",
     "Restart the application; if it repeats on one GPU with a known-good app, reset the GPU."),
    (13, "ROBUST_CHANNEL_GR_EXCEPTION", "application", "HCR",
     "Graphics engine exception, usually an application fault (out-of-range access, illegal instruction).",
     "Restart the application; debug with compute-sanitizer or cuda-gdb; rarely hardware, so watch for repeats."),
    (31, "ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT", "application", "HCRG",
     "GPU memory page fault (MMU fault), usually an application bug, sometimes the driver or hardware.",
     "Restart the application; repeated faults on the same GPU across applications: run dcgmi diag."),
    (32, "ROBUST_CHANNEL_PBDMA_ERROR", "hardware", "HCG",
     "Invalid or corrupted push buffer stream between driver and GPU, most often PCIe link quality.",
     "Check the PCIe AER lines for this GPU; reboot; reseat or replace the GPU or riser if it repeats."),
    (43, "ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR", "application", "HCRG",
     "GPU stopped processing after a software fault in a user application; the GPU stays healthy.",
     "Restart the application; nothing to do on the node."),
    (44, "ROBUST_CHANNEL_GR_FAULT_DURING_CTXSW", "driver", "HCG",
     "Graphics engine fault during a context switch; uncorrectable.",
     "Drain, then reset the GPU or reboot; contact support if it repeats."),
    (45, "ROBUST_CHANNEL_PREEMPTIVE_REMOVAL", "info", "HCRG",
     "Preemptive cleanup of a channel after an earlier error, a killed process or a GPU reset.",
     "Look at the Xid logged before it; on its own it needs no action."),
    (48, "ROBUST_CHANNEL_GPU_ECC_DBE", "memory", "HCRMG",
     "Uncorrectable double-bit ECC error in GPU memory; the application sees it too.",
     "Drain, then reset the GPU or reboot; check row remapping (nvidia-smi -q -d ROW_REMAPPER)."),
    (61, "PMU_BREAKPOINT", "driver", "HG",
     "Internal micro-controller (PMU) breakpoint or warning.",
     "Drain, then reset the GPU or reboot; contact support if it repeats."),
    (62, "PMU_HALT_ERROR", "driver", "HCG",
     "Internal micro-controller (PMU) halted: GPU firmware stopped.",
     "Drain, then reset the GPU or reboot; contact support if it repeats."),
    (63, "INFOROM_PAGE_RETIREMENT_EVENT", "memory", "HCRMG",
     "A page retirement (before Ampere) or row remap (A100 and later) was recorded; it takes effect after a reset.",
     "Reset the GPU or reboot when convenient; nvidia-smi -q -d ROW_REMAPPER shows pending remaps."),
    (64, "INFOROM_PAGE_RETIREMENT_FAILURE", "memory", "HCRMG",
     "Recording a page retirement or row remap failed.",
     "Drain, then reset the GPU or reboot now; if it comes back after the reset, RMA the GPU."),
    (74, "NVLINK_ERROR", "nvlink", "HCRG",
     "NVLink error on a link to a peer GPU or NVSwitch (the fault may be at the other end).",
     "Drain, then reset the GPU or reboot; check nvidia-smi nvlink -e and the peer's log."),
    (79, "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "hardware", "HCRG",
     "The driver can no longer reach the GPU over PCIe (link, power, thermal or hardware fault).",
     "Drain and reboot the node; read the PCIe AER lines before it; if it repeats, reseat or replace the GPU."),
    (92, "EXCESSIVE_SBE_INTERRUPTS", "info", "HCRG",
     "High rate of corrected single-bit ECC errors; data is still correct.",
     "Monitor; act only together with other memory Xids."),
    (94, "ROBUST_CHANNEL_CONTAINED_ERROR", "memory", "HCRMG",
     "Contained uncorrectable memory error (A100 and later): only the affected application was stopped.",
     "Restart the affected application; reset the GPU when convenient so the row remap takes effect."),
    (95, "ROBUST_CHANNEL_UNCONTAINED_ERROR", "memory", "HCRG",
     "Uncontained uncorrectable memory error: several applications may be affected.",
     "Drain, then reset the GPU (without MIG: reboot the node)."),
    (109, "ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR", "driver", "C",
     "Context switch timeout: the GPU did not switch contexts in time, often after a firmware (GSP) hang.",
     "Drain, then reset the GPU or reboot; contact support if it repeats."),
    (119, "GSP_RPC_TIMEOUT", "driver", "HCG",
     "The GPU System Processor (GSP firmware) did not answer the driver in time.",
     "Drain, then reset the GPU or reboot; update the driver if it comes back."),
    (120, "GSP_ERROR", "driver", "HCG",
     "The GPU System Processor (GSP firmware) reported an error.",
     "Drain, then reset the GPU or reboot; update the driver if it comes back."),
    (140, "UNRECOVERABLE_ECC_ERROR_ESCAPE", "memory", "CG",
     "An uncorrectable ECC error escaped containment: the driver could not retire or remap the memory.",
     "Drain, then reset the GPU or reboot; contact support if it repeats."),
    (143, "GPU_INIT_ERROR", "hardware", "CG",
     "GPU initialization failed.",
     "Reset the GPU or reboot; if it persists, inspect or replace the GPU."),
    (154, "GPU_RECOVERY_ACTION_CHANGED", "info", "C",
     "The driver changed the recovery it recommends for this GPU; the line says which (e.g. GPU Reset Required).",
     "Do what the line says; the Xid just before it is the cause."),
]
# NVLink5 (Blackwell) errors 144-150 share one meaning; the line itself says Fatal or Nonfatal.
for _code, _unit in zip(range(144, 151), ("SAW", "RLW", "TLW", "TREX", "NVLPW_CTRL", "NETIR", "MSE")):
    _ROWS.append((_code, f"NVLINK_{_unit}_ERROR", "nvlink", "C",
                  f"NVLink5 {_unit} unit error; the line says whether it is Fatal or Nonfatal.",
                  "Fatal: drain and reset the GPU; Nonfatal: monitor; follow the catalog's NVLink5 workflow."))

XID_TABLE: dict[int, XidInfo] = {
    code: XidInfo(code, name, meaning, severity, action, "; ".join(_SOURCES[s] for s in sources))
    for code, name, severity, sources, meaning, action in _ROWS
}


def xid_info(code: int) -> XidInfo:
    """What Xid `code` means; an unknown code is treated as a hardware fault until someone looks it up."""
    return XID_TABLE.get(code) or XidInfo(
        code, "", f"unknown Xid {code}: look it up in NVIDIA's Xid catalog", "hardware",
        f"Treat the GPU as suspect until looked up: {CATALOG_URL}", "")


def needs_attention(info: XidInfo) -> bool:
    """True for memory, hardware, driver and NVLink faults (drain, reset or repair the node); False for
    application faults (restart the application) and informational Xids."""
    return info.severity in _ATTENTION


# --- events --------------------------------------------------------------------------------------

KINDS = ("xid", "fallen-off-bus", "init-failed", "aer-corrected", "aer-uncorrected", "gpu-uuid")


@dataclass(frozen=True)
class KernelEvent:
    kind: str  # one of KINDS
    bus_id: str | None  # pci.slot() of the device: "0000:01:00"; None when the line names none
    time: str  # wall-clock or relative stamp as printed ("Mar 21 20:18:56", "+0.000844"); "" when none
    uptime: float | None  # seconds since boot, from the kernel's "[   65.315783]"
    xid: int | None
    process: str | None  # name=... of an Xid line (None for <unknown> or absent)
    pid: int | None  # pid=... of an Xid line (None for '<unknown>' or absent; 0 is the kernel)
    detail: str  # xid: the text after code/pid/name; AER: the report and its error names; gpu-uuid: the UUID
    line: str  # the source text, verbatim; the lines of a multi-line message joined with "\n"
    serial: str | None = None  # gpu-uuid: the "GPU Board Serial Number" printed right after it


def event_needs_attention(event: KernelEvent) -> bool:
    """Whether the node needs attention because of this event. An Xid 154 does unless it says the
    recommended action is now "(None)"; corrected PCIe errors are recovered by the hardware."""
    if event.kind == "xid":
        if event.xid == 154:
            return not event.detail.rstrip(". ").endswith("(None)")
        return needs_attention(xid_info(event.xid or 0))
    return event.kind in ("fallen-off-bus", "init-failed", "aer-uncorrected")


def gpu_uuids(events: list[KernelEvent]) -> dict[str, str]:
    """bus key -> GPU UUID, from the driver's "NVRM: GPU at PCI:...: GPU-..." lines."""
    return {e.bus_id: e.detail for e in events if e.kind == "gpu-uuid" and e.bus_id}


# --- line prefixes ---------------------------------------------------------------------------------
# Formats per util-linux dmesg(1) (raw "[   65.315783]", -T/--ctime "[Mon Mar 21 20:18:56 2022]",
# --time-format iso "2022-03-21T20:18:56,315783+01:00", -x "kern  :warn  : ", -H/--reltime "[  +0.000844]"),
# journalctl(1) -o short / short-precise / short-iso / short-full / short-monotonic / short-unix,
# syslog/rsyslog (BSD or RFC 3339 stamp, "host kernel: " tag), and the kernel's CONFIG_PRINTK_CALLER "[  T291]".
# Only the prefix is parsed here; the messages below are searched for anywhere after it.

_ISO = r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d(?::?\d\d)?)?"
_MONTH_DAY = r"\S+\s+\d{1,2}\s+\d\d:\d\d:\d\d(?:\.\d+)?"  # "Mar 21 20:18:56", "фев 12 ...": any locale
_FULL = r"\w+ \d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \S+"  # journalctl -o short-full: "Mon 2022-03-21 20:18:56 CET"
_UNIX = r"\d{9,}\.\d+"  # journalctl -o short-unix
_KERNEL_TAG = r"(?:(?:\S+\s+)?kernel:\s*)?"  # "host kernel: "; some reporters cut the host or the stamp
_HEAD = re.compile(
    r"^\s*(?:[a-z0-9]+\s*:\s*[a-z]+\s*:\s*)?"  # dmesg -x facility:level
    rf"(?:(?P<wall>{_ISO}|{_FULL}|{_MONTH_DAY}|{_UNIX})\s+)?{_KERNEL_TAG}"
    r"(?:\[(?P<stamp>\s*[+-]?\d+\.\d+\s*|[^\]]*\d:\d\d[^\]]*)\]\s*)?"  # uptime, ctime or reltime; not "[drm]"
    rf"(?:\[\s*[TC]\d+\]\s*)?{_KERNEL_TAG}")
# A syslog line from a program that may quote the kernel ("host gpud[123]: ... NVRM: Xid ..."): skipped.
_PROGRAM = re.compile(r"(?:\S+\s+)?[^\s\[\]:]+\[\d+\]:\s")  # "host name[pid]: "
_HOST_TAG = re.compile(r"\S+\s+[^\s\[\]:]+:\s")  # "host sudo: " after a stamp that no "kernel:" followed
_UPTIME = re.compile(r"\s*\d+\.\d+\s*")


def _from_program(head: re.Match, rest: str) -> bool:
    """A syslog/journal line logged by a program, not by the kernel."""
    return bool(_PROGRAM.match(rest) or (head["wall"] and "kernel:" not in head[0] and _HOST_TAG.match(rest)))


def _stamps(head: re.Match) -> tuple[str, float | None]:
    """(time, uptime) from a _HEAD match."""
    wall, stamp = head["wall"] or "", (head["stamp"] or "").strip()
    if _UPTIME.fullmatch(stamp):
        return wall, float(stamp)
    return wall or stamp, None  # dmesg -T/-H print their time in the brackets


# --- messages -------------------------------------------------------------------------------------

_XID = re.compile(r"NVRM: Xid \((?:PCI:)?(?P<bus>[^)]*)\): (?P<code>\d+)(?:,\s*(?P<rest>.*))?$")
_PID_NAME = re.compile(r"(?:pid=(?P<pid>'?<unknown>'?|\d+)(?:, |$))?(?:name=(?P<name>.*?)(?:, |$))?(?P<detail>.*)$")
_UUID = re.compile(r"NVRM: GPU at (?:PCI:)?(?P<bus>[0-9a-fA-F:.]+): (?P<uuid>GPU-\S+)")
_SERIAL = re.compile(r"NVRM: GPU Board Serial Number:\s*(?P<serial>\S*)")
_FELL = re.compile(r"NVRM: GPU (?P<bus>[0-9a-fA-F:.]+): (?P<detail>GPU has fallen off the bus.*)$")
# "The NVIDIA GPU 0000:b3:00.0 (PCI ID: 10de:26b5) installed in this system has fallen off the bus and is
# not responding to commands." - one line, or (newer drivers) three, each starting "NVRM: ".
_FELL_LONG = re.compile(r"NVRM: The NVIDIA GPU (?P<bus>[0-9a-fA-F:.]+)\s*(?P<detail>.*)$")
_NVRM_TEXT = re.compile(r"NVRM: (?P<text>.*)$")
_FALLEN = "fallen off the bus"
# A GPU the driver could not bring up (it never appears in nvidia-smi). Real lines (NVIDIA/cuda-samples#104,
# NVIDIA/gpu-operator#649 and #1146, NVIDIA/open-gpu-kernel-modules#789, Bumblebee-Project/Bumblebee#722,
# pop-os/cosmic-epoch#2146, h8d13/archinstoo#244):
#   NVRM: GPU 0000:13:00.0: RmInitAdapter failed! (0x26:0x56:1463)       (old drivers: no "GPU <bus>: ")
#   NVRM: GPU 0000:04:01.0: rm_init_adapter failed, device minor number 0 (old: "... for device bearing minor ...")
#   nvidia 0000:01:00.0: probe with driver nvidia failed with error -1     (older kernels: "nvidia: probe of
#                                                                           0000:01:00.0 failed with error -1")
#   NVRM: The NVIDIA probe routine failed for 1 device(s).                 (no bus: the BAR line before names it)
#   NVRM: BAR0 is 0M @ 0x0 (PCI:0000:01:00.0)
_INIT_FAILED = re.compile(
    r"NVRM: (?:GPU (?P<bus>[0-9a-fA-F:.]+): )?(?P<detail>RmInitAdapter failed!.*|rm_init_adapter failed.*)$"
    r"|nvidia (?P<bus2>[0-9a-fA-F:.]+): (?P<detail2>probe with driver nvidia failed.*)$"
    r"|nvidia: probe of (?P<bus3>[0-9a-fA-F:.]+) (?P<detail3>failed with error.*)$"
    r"|NVRM: (?P<detail4>The NVIDIA probe routine failed for .*)$")
# The lines a bus-less "probe routine failed" follows: a bad BAR, or the GPU fallen off the bus before the probe.
_NAMED_BEFORE = re.compile(r"NVRM: (?:BAR\d is .*\(PCI:|The NVIDIA GPU )(?P<bus>[0-9a-fA-F]{4}:[0-9a-fA-F:.]+)")

# AER: "<driver> <device>: [AER: ]<message>"; a report is "... error received" from the root port, then per
# device "PCIe Bus Error: severity=..., type=..., (agent)", "device [vvvv:dddd] error status/mask=..."
# and one "[bit] Name" line per error (linux drivers/pci/pcie/aer.c; older kernels print "id=00e5").
_AER_DEVICE = re.compile(
    r"(?P<dev>(?:[0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]): (?:AER: ?)?(?P<msg>.*)$")
_AER_RECEIVED = re.compile(
    r"(?:Multiple )?(?P<severity>Correct\w+|Uncorrect\w+ \((?:Non-)?Fatal\)) error (?:message )?received"
    r"(?: from)?:? (?P<source>\S+)")
_AER_REPORT = re.compile(r"PCIe Bus Error: (?P<report>severity=(?P<severity>[^,]+), type=.*)$")
_AER_BIT = re.compile(r"\s*\[\s*\d+\]\s+(?P<name>.*?)\s*(?:\(First\))?\s*$")
_AER_MORE = re.compile(r"\s*(?:device \[[0-9a-fA-F]{4}:[0-9a-fA-F]{4}\] error status|TLP Header:|Error of this Agent)")


@dataclass
class _Draft:
    """An event being assembled: AER reports and multi-line messages span several lines."""
    kind: str
    bus_id: str | None
    time: str
    uptime: float | None
    lines: list[str]
    detail: str = ""
    xid: int | None = None
    process: str | None = None
    pid: int | None = None
    serial: str | None = None
    errors: list[str] = field(default_factory=list)  # AER error names ("RxErr", "BadTLP", ...)

    def event(self) -> KernelEvent:
        detail = f"{self.detail}: {', '.join(self.errors)}" if self.errors else self.detail
        return KernelEvent(self.kind, self.bus_id, self.time, self.uptime, self.xid, self.process, self.pid,
                           detail, "\n".join(self.lines), self.serial)


def _bus(text: str) -> str | None:
    return pci.slot(text) or None


def _aer_kind(severity: str) -> str:
    return "aer-corrected" if severity.startswith("Correct") else "aer-uncorrected"


def parse(text: str) -> list[KernelEvent]:
    """Every Xid, fallen-off-the-bus, PCIe AER and GPU-UUID message in `text`, in order; other lines are
    ignored, and so are syslog lines from programs (a "name[pid]:" tag) that merely quote them."""
    drafts: list[_Draft] = []
    aer_open: dict[str, _Draft] = {}  # device -> its AER report still being printed
    aer_received: _Draft | None = None  # the last "... error received" still waiting for its report
    uuid: _Draft | None = None  # the gpu-uuid line just before, for the serial number line
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        head = _HEAD.match(line)
        rest = line[head.end():]
        if _from_program(head, rest):
            continue
        time, uptime = _stamps(head)
        previous_uuid, uuid = uuid, None

        if m := _XID.search(rest):
            extra = _PID_NAME.match(m["rest"] or "")
            pid, name = extra["pid"], extra["name"]
            drafts.append(_Draft("xid", _bus(m["bus"]), time, uptime, [line], extra["detail"].strip(),
                                 int(m["code"]), None if name in (None, "", "<unknown>") else name,
                                 int(pid) if pid and pid.isdigit() else None))
        elif m := _UUID.search(rest):
            uuid = _Draft("gpu-uuid", _bus(m["bus"]), time, uptime, [line], m["uuid"])
            drafts.append(uuid)
        elif (m := _SERIAL.search(rest)) and previous_uuid:
            previous_uuid.lines.append(line)
            previous_uuid.serial = m["serial"] or None
        elif m := _FELL.search(rest):
            drafts.append(_Draft("fallen-off-bus", _bus(m["bus"]), time, uptime, [line], m["detail"]))
        elif m := _INIT_FAILED.search(rest):
            bus = m["bus"] or m["bus2"] or m["bus3"]
            if bus is None and (named := next((b for b in map(_NAMED_BEFORE.search, lines[max(0, i - 4):i]) if b),
                                              None)):
                bus = named["bus"]  # "The NVIDIA probe routine failed": the line just before names the GPU
            drafts.append(_Draft("init-failed", _bus(bus), time, uptime, [line],
                                 (m["detail"] or m["detail2"] or m["detail3"] or m["detail4"]).strip()))
        elif m := _FELL_LONG.search(rest):
            # Gather the continuation lines ("NVRM: (PCI ID: ...) installed in this system has", ...).
            detail, end = m["detail"], i
            while _FALLEN not in detail and end < min(i + 2, len(lines)):
                more = _NVRM_TEXT.search(lines[end])
                if not more or more["text"].startswith(("Xid ", "GPU ", "The NVIDIA GPU ")):
                    break
                detail, end = f"{detail} {more['text']}", end + 1
            if _FALLEN in detail:  # not "... installed in this system is not supported by ..."
                drafts.append(_Draft("fallen-off-bus", _bus(m["bus"]), time, uptime, lines[i - 1:end],
                                     " ".join(detail.split())))
                i = end
        elif "NVRM: " not in rest and (m := _AER_DEVICE.search(rest)):
            device, msg = _bus(m["dev"]), m["msg"]
            if r := _AER_RECEIVED.match(msg):
                # A new report: a "received" line with no report after it is an event of its own.
                aer_open.clear()
                aer_received = _Draft(_aer_kind(r["severity"]), _bus(r["source"]), time, uptime, [line],
                                      msg.strip())
                drafts.append(aer_received)
            elif r := _AER_REPORT.search(msg):
                if aer_received:  # the first report after "error received" completes that event
                    draft, aer_received = aer_received, None
                    draft.lines.append(line)
                    draft.kind, draft.bus_id, draft.detail = _aer_kind(r["severity"]), device, r["report"]
                else:  # "Multiple ... error received": one report per device
                    draft = _Draft(_aer_kind(r["severity"]), device, time, uptime, [line], r["report"])
                    drafts.append(draft)
                aer_open[device or ""] = draft
            elif (draft := aer_open.get(device or "")) and (_AER_BIT.match(msg) or _AER_MORE.match(msg)):
                draft.lines.append(line)
                if bit := _AER_BIT.match(msg):
                    draft.errors.append(bit["name"])
    return [draft.event() for draft in drafts]


# --- since boot ------------------------------------------------------------------------------------

_JOURNAL_BOOT = re.compile(r"^-- (?:Boot [0-9a-f]+|Reboot) --\s*$")  # journalctl's separator between boots
_LINUX_VERSION = re.compile(r"(?:^|kernel: |\] )Linux version \d")  # the kernel's first message


def last_boot(text: str) -> str:
    """The part of a log that belongs to the last boot, as text: `parse(last_boot(text))` are the events
    since boot. Takes text rather than events because the boundary is usually in lines that are not
    events: a boot starts where the kernel's uptime goes backwards (or is 0.000000 after lines without
    one), at journalctl's "-- Boot ... --" separator, or at "Linux version" in logs without uptimes.
    dmesg and journalctl -b hold one boot already and come back whole."""
    lines = text.splitlines(keepends=True)
    start, previous = 0, None
    for i, line in enumerate(lines):
        if _JOURNAL_BOOT.match(line):
            start, previous = i + 1, None
            continue
        uptime = _stamps(_HEAD.match(line))[1]
        if uptime is None:
            if _LINUX_VERSION.search(line):
                start, previous = i, None
            continue
        if (uptime < previous) if previous is not None else (uptime == 0.0):
            start = i
        previous = uptime
    return "".join(lines[start:])
