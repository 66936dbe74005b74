"""NVIDIA GPU trouble in kernel-log text: Xid errors, GPUs fallen off the bus, PCIe AER reports, the driver refusing
work until a reset (NV_ERR_RESET_REQUIRED), and NVSwitch errors (SXid).

Pure functions over text, tested against real published log lines (tests/fixtures/kernlog).
`parse` reads the output of dmesg (raw, -T/--ctime, --time-format iso, -x, -H/--reltime),
journalctl -k (short, short-precise, short-iso, short-full, short-monotonic, short-unix),
syslog/kern.log (with or without the kernel's own [uptime]) and bare messages, and returns one
KernelEvent per relevant message; everything else is ignored. `last_boot` cuts a multi-boot
syslog down to the last boot. `XID_TABLE`/`xid_info` say what an Xid means, `event_info` what one
logged Xid means (its cause's meaning when the line names one: "caused by previous Xid 149"),
`needs_attention` and `event_needs_attention` whether the node needs draining, a reset or repair.

The bus ids in these lines come in several spellings ("PCI:0000:01:00", "0000:01:00.0", and
nvidia-smi's "00000000:01:00.0"); `pci.slot` reduces all of them to "0000:01:00" so that events
and nvidia-smi's GPUs can be matched; `gpu_uuids` maps them to the UUIDs the driver printed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from provision.capabilities.health import recovery
from provision.core import pci
from provision.core.checks import REBOOT, RESET, SERVICE

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
    cause: XidInfo | None = None  # event_info: the Xid the driver named as this one's cause, whose severity it takes


# Sources: H = NVIDIA/open-gpu-kernel-modules src/common/sdk/nvidia/inc/nverror.h (the name);
# C = NVIDIA "Analyzing Xid Errors with the Xid Catalog" (name for codes the public header lacks,
# description, immediate/investigatory resolution; cross-checked against leptonai/gpud's generated copy
# components/accelerator/nvidia/xid/catalog_generated.go); R = gpu-node-reference.md §3
# (S10-S14, the project's shared reference notes); M = stas00/ml-engineering
# compute/accelerator/nvidia/debug.md; G = leptonai/gpud xid.go notes. Meanings and actions are in our words.
_SOURCES = {
    "H": "nverror.h", "C": "NVIDIA Xid catalog", "R": "gpu-node-reference §3",
    "M": "ml-engineering debug.md", "G": "gpud xid.go",
}
_ROWS = [
    (8, "ROBUST_CHANNEL_FIFO_ERROR_IDLE_TIMEOUT", "application", "CG",
     "GPU stopped processing: a channel hit the driver's watchdog timeout, usually a hung or overlong kernel.",
     "Restart the application; if it repeats on one GPU with a known-good app, reset the GPU."),
    (11, "ROBUST_CHANNEL_GR_ERROR_MISSING_HW", "application", "C",
     "The GPU was handed an invalid or corrupted command (push buffer) stream, usually by the application or CUDA.",
     "Restart the application; if it repeats, check the application and its CUDA version."),
    (13, "ROBUST_CHANNEL_GR_EXCEPTION", "application", "HCR",
     "Graphics engine exception, usually an application fault (out-of-range access, illegal instruction).",
     "Restart the application; debug with compute-sanitizer or cuda-gdb; rarely hardware, so watch for repeats."),
    (25, "ROBUST_CHANNEL_GR_ILLEGAL_NOTIFY", "application", "C",
     "The graphics engine was handed an invalid or illegal command stream, usually the application's or CUDA's doing.",
     "Restart the application; if it repeats, check the application and its CUDA version."),
    (31, "ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT", "application", "HCRG",
     "GPU memory page fault (MMU fault), usually an application bug, sometimes the driver or hardware.",
     "Restart the application; repeated faults on the same GPU across applications: run dcgmi diag."),
    (32, "ROBUST_CHANNEL_PBDMA_ERROR", "hardware", "HCG",
     "Invalid or corrupted push buffer stream between driver and GPU, most often PCIe link quality.",
     "Check the PCIe AER lines for this GPU; reboot; reseat or replace the GPU or riser if it repeats."),
    (37, "ROBUST_CHANNEL_FECS_ERR_UNIMP_FIRMWARE_METHOD", "info", "C",
     "The graphics engine's context-switch firmware (FECS) was sent a command it does not implement.",
     "Nothing now; if it repeats, check the application and its CUDA version against the driver."),
    (38, "ROBUST_CHANNEL_FECS_ERR_WATCHDOG_TIMEOUT", "info", "C",
     "The graphics engine's context-switch firmware (FECS) hit its watchdog timeout.",
     "Nothing now; contact NVIDIA support if it repeats."),
    (43, "ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR", "application", "HCRG",
     "GPU stopped processing after a software fault in a user application; the GPU stays healthy.",
     "Restart the application; nothing to do on the node."),
    (44, "ROBUST_CHANNEL_GR_FAULT_DURING_CTXSW", "driver", "HCG",
     "Graphics engine fault during a context switch; uncorrectable.",
     "Drain, then reset the GPU or reboot; contact support if it repeats."),
    (45, "ROBUST_CHANNEL_PREEMPTIVE_REMOVAL", "info", "HCRG",
     "Preemptive cleanup of a channel after an earlier error, a killed process or a GPU reset.",
     "Follow the Xid it names as its cause (or the one before it); logged alone with NVSwitches: restart "
     "Fabric Manager."),
    (46, "ROBUST_CHANNEL_GPU_TIMEOUT_ERROR", "driver", "C",
     "GPU stopped processing: a timeout the driver could not clear by stopping the channel.",
     "Drain, then reset the GPU or reboot; contact NVIDIA support if it repeats."),
    (48, "ROBUST_CHANNEL_GPU_ECC_DBE", "memory", "HCRMG",
     "Uncorrectable double-bit ECC error in GPU memory; the application sees it too.",
     "Drain, then reset the GPU or reboot; check row remapping (nvidia-smi -q -d ROW_REMAPPER)."),
    (54, "SILENT_RUNNING_PWR_REDUCED_CLOCKING", "hardware", "C",
     "The board's auxiliary power is not connected, so the GPU holds its clocks down.",
     "Power the node off and check the GPU's auxiliary power cables; contact support if they are seated."),
    (60, "ROBUST_CHANNEL_SEC2_ERROR", "application", "HC",
     "The SEC2 engine (security and video work) raised an exception, usually in an application's work.",
     "Restart the application; if it repeats, look at the application and the driver version."),
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
    (66, "ROBUST_CHANNEL_FECS_ERR_REG_ACCESS_VIOLATION", "info", "C",
     "The graphics engine's firmware reported an illegal register access by the driver.",
     "Nothing now; if it repeats, update the driver or report it to NVIDIA."),
    (67, "ROBUST_CHANNEL_FECS_ERR_VERIF_VIOLATION", "info", "C",
     "The graphics engine's firmware reported a driver access that failed its verification.",
     "Nothing now; contact NVIDIA support if it repeats."),
    (69, "ROBUST_CHANNEL_GR_CLASS_ERROR", "application", "HC",
     "The graphics engine was asked for an object class it does not support, usually an application/CUDA mismatch.",
     "Restart the application; if it repeats, check that its CUDA version suits the driver."),
    (74, "NVLINK_ERROR", "nvlink", "HCRG",
     "NVLink error on a link to a peer GPU or NVSwitch (the fault may be at the other end).",
     "Drain, then reset the GPU or reboot; check nvidia-smi nvlink -e and the peer's log."),
    (78, "VGPU_START_ERROR", "driver", "HC",
     "A vGPU could not be started: the host's vGPU manager and the guest driver do not match, or it is misconfigured.",
     "Update the vGPU software and firmware so that host and guest versions match, then start the VM again."),
    (79, "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "hardware", "HCRG",
     "The driver can no longer reach the GPU over PCIe (link, power, thermal or hardware fault).",
     "Drain and reboot the node; read the PCIe AER lines before it; if it repeats, reseat or replace the GPU."),
    (80, "PBDMA_PUSHBUFFER_CRC_MISMATCH", "application", "HC",
     "A command buffer the GPU fetched failed its CRC check: it was corrupted on the way to the GPU.",
     "Restart the application; if it repeats, check the application, then this GPU's PCIe AER lines."),
    (92, "EXCESSIVE_SBE_INTERRUPTS", "info", "HCRG",
     "High rate of corrected single-bit ECC errors; data is still correct.",
     "Monitor; act only together with other memory Xids."),
    (93, "INFOROM_ERASE_LIMIT_EXCEEDED", "info", "HC",
     "The InfoROM (the board's store for its settings and error records) passed its provisioned wear limit; not fatal.",
     "Nothing now; contact NVIDIA support about the board if it repeats."),
    (94, "ROBUST_CHANNEL_CONTAINED_ERROR", "memory", "HCRMG",
     "Contained uncorrectable memory error (A100 and later): only the affected application was stopped.",
     "Restart the affected application; reset the GPU when convenient so the row remap takes effect."),
    (95, "ROBUST_CHANNEL_UNCONTAINED_ERROR", "memory", "HCRG",
     "Uncontained uncorrectable memory error: several applications may be affected.",
     "Drain, then reset the GPU (without MIG: reboot the node)."),
    (106, "SMBPBI_TEST_MESSAGE", "info", "C",
     "A test message sent through the GPU's out-of-band management interface (SMBPBI), e.g. from the BMC.",
     "Nothing: it is a test."),
    (107, "SMBPBI_TEST_MESSAGE_SILENT", "info", "C",
     "A silent test message sent through the GPU's out-of-band management interface (SMBPBI).",
     "Nothing: it is a test."),
    (109, "ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR", "driver", "C",
     "Context switch timeout: the GPU did not switch contexts in time, often after a firmware (GSP) hang.",
     "Drain, then reset the GPU or reboot; contact support if it repeats."),
    (110, "SEC_FAULT_ERROR", "driver", "HC",
     "The GPU's security engine reported a fault: a firmware or driver security check failed.",
     "Drain, then reset the GPU or reboot; if it repeats, update the driver and the GPU firmware."),
    (119, "GSP_RPC_TIMEOUT", "driver", "HCG",
     "The GPU System Processor (GSP firmware) did not answer the driver in time.",
     "Drain, then reset the GPU or reboot; update the driver if it comes back."),
    (120, "GSP_ERROR", "driver", "HCG",
     "The GPU System Processor (GSP firmware) reported an error.",
     "Drain, then reset the GPU or reboot; update the driver if it comes back."),
    (121, "C2C_ERROR", "info", "HC",
     "An error on the chip-to-chip (C2C) link between a Grace CPU and its GPU; the catalog asks for no action now.",
     "Nothing now; contact NVIDIA support if it repeats."),
    (136, "ALI_TRAINING_FAIL", "nvlink", "C",
     "An NVLink link failed to train (autonomous link initialization) and stays down.",
     "Drain, then reset the GPU; if the link stays down, check its signal path (NVLink bridge, cables, baseboard)."),
    (137, "NVLINK_PRIV_ERR", "application", "CG",
     "NVLink privilege error: usually an application reaching peer GPU memory (fabric addresses) it may not.",
     "Restart the application; if it repeats, check its peer-memory use and the driver version."),
    (140, "UNRECOVERABLE_ECC_ERROR_ESCAPE", "memory", "CG",
     "An uncorrectable ECC error escaped containment: the driver could not retire or remap the memory.",
     "Drain, then reset the GPU or reboot; contact support if it repeats."),
    (141, "ROBUST_CHANNEL_FAST_PATH_ERROR", "info", "C",
     "An error on CUDA's fast work-submission path; NVIDIA's catalog asks for no action now.",
     "Nothing now; contact NVIDIA support if it repeats."),
    (142, "ROBUST_CHANNEL_NVENC3_ERROR", "application", "C",
     "Video encoder engine NVENC3 raised an error in the work it was given.",
     "Restart the application that uses the encoder; NVIDIA's catalog says to contact support, so report repeats."),
    (143, "GPU_INIT_ERROR", "hardware", "CG",
     "GPU initialization failed.",
     "Reset the GPU or reboot; if it persists, inspect or replace the GPU."),
    (154, "GPU_RECOVERY_ACTION_CHANGED", "info", "C",
     "The driver changed the recovery it recommends for this GPU; the line says which (e.g. GPU Reset Required).",
     "Do what the line says; the Xid just before it is the cause."),
    (151, "ROBUST_CHANNEL_KEY_ROTATION_ERROR", "driver", "C",
     "Rotating the confidential-computing encryption keys failed: the VM's secure channel to the GPU is broken.",
     "Restart the VM; contact NVIDIA support if it repeats."),
    (152, "ROBUST_CHANNEL_DLA_SMMU_ERROR", "info", "C",
     "The deep-learning accelerator (DLA, on Jetson/DRIVE) hit an IOMMU (SMMU) fault.",
     "Nothing now; contact NVIDIA support if it repeats."),
    (153, "ROBUST_CHANNEL_DLA_TIMEOUT", "info", "C",
     "The deep-learning accelerator (DLA, on Jetson/DRIVE) timed out.",
     "Nothing now; contact NVIDIA support if it repeats."),
    (155, "NVLINK_SW_DEFINED_ERROR", "nvlink", "CG",
     "The driver itself declared an NVLink error (software-defined), e.g. on a link it had to take down.",
     "Drain, then reset the GPU; if it repeats, look at the fabric software (Fabric Manager) and the job."),
    (156, "RESOURCE_RETIREMENT_EVENT", "memory", "CG",
     "The GPU retired a faulty internal resource; the retirement takes effect after a GPU reset.",
     "Reset the GPU or reboot when convenient so that the retirement takes effect."),
    (157, "RESOURCE_RETIREMENT_FAILURE", "info", "C",
     "Retiring a faulty internal resource failed; NVIDIA's catalog asks for no immediate action.",
     "Nothing now; contact NVIDIA support if it repeats."),
    (158, "GPU_FATAL_TIMEOUT", "driver", "CG",
     "The GPU hit a fatal timeout and stopped processing.",
     "Drain, then reset the GPU or reboot; contact NVIDIA support if it repeats."),
    (159, "ROBUST_CHANNEL_CHI_NON_DATA_ERROR", "driver", "C",
     "A non-data error on the coherent CPU-GPU interconnect (CHI, Grace systems), often reported after another fault.",
     "Look for the fault it follows and at the nvidia-uvm lines around it; logged alone, report it to NVIDIA."),
    (160, "CHANNEL_RETIREMENT_EVENT", "info", "C",
     "The driver retired a GPU channel after an error; the GPU keeps working.",
     "Nothing now; if it repeats, look at the application and the driver."),
    (161, "CHANNEL_RETIREMENT_FAILURE", "info", "C",
     "Retiring a GPU channel after an error failed; NVIDIA's catalog asks for no immediate action.",
     "Nothing now; if it repeats, look at the application and the driver."),
    # 162-172: the catalog names and describes them but gives no resolution yet: severity and action are ours
    # (G where gpud's xid.go suggests the same).
    (162, "PSHC_REENGAGED", "info", "CG",
     "The GPU's power-smoothing circuitry works again.",
     "Nothing."),
    (163, "PSHC_DISENGAGED", "hardware", "CG",
     "The GPU's power-smoothing circuitry stopped working: swings in its power draw are no longer smoothed.",
     "Reset the GPU or reboot; if it does not come back (Xid 162), have the board serviced."),
    (164, "PSHC_LOW_LIFETIME", "info", "CG",
     "The GPU's power-smoothing circuitry is near the end of its life.",
     "Nothing now; plan a service of the board."),
    (165, "PSHC_ZERO_LIFETIME", "hardware", "C",
     "The GPU's power-smoothing circuitry has used up its lifetime.",
     "Have the board serviced; until then its power draw is not smoothed."),
    (166, "NVLINK_SECURE_CRYPTO_ERR", "nvlink", "CG",
     "Confidential-computing traffic crossed NVLink before the link was set up for encryption.",
     "Drain, then reset the GPU; check the confidential-computing setup of the NVLink fabric."),
    (167, "PCIE_FATAL_TIMEOUT", "hardware", "CG",
     "A fatal timeout on the GPU's PCIe interface.",
     "Drain and reboot; read the PCIe AER lines for this GPU; reseat or replace it if it repeats."),
    (168, "REDUCED_GPU_MEMORY_CAPACITY", "memory", "C",
     "Errors in the GPU's write-protected memory region (WPR): the GPU runs with less usable memory.",
     "Drain, then reset the GPU; if the capacity stays reduced, have the GPU serviced."),
    (169, "SEC2_HALT_ERROR", "driver", "CG",
     "The SEC2 internal micro-controller halted.",
     "Drain, then reset the GPU or reboot; contact NVIDIA support if it repeats."),
    (170, "NVLINK_SECURE_OTHER", "nvlink", "CG",
     "An unexpected NVLink interrupt while the GPU is in confidential-computing mode.",
     "Check the application and the GPU; drain and reset the GPU if it repeats."),
    (171, "UNCORRECTABLE_DRAM_ERROR", "memory", "C",
     "Detail of an Xid 48: the uncorrectable ECC error is in the GPU's DRAM (HBM).",
     "As for Xid 48: drain, then reset the GPU; check row remapping (nvidia-smi -q -d ROW_REMAPPER)."),
    (172, "UNCORRECTABLE_SRAM_ERROR", "memory", "CG",
     "Detail of an Xid 48: the uncorrectable ECC error is in on-chip SRAM (caches, register files).",
     "Drain, then reset the GPU; repeated SRAM errors mean the GPU needs replacing."),
]
# The copy, video decode, JPEG, optical-flow engines: an exception in the work an application gave the engine;
# the catalog says restart the application (and contact support if it repeats). (code, engine, in nverror.h)
_ENGINES = [
    *((code, f"CE{n}", code < 100)
      for n, code in enumerate((39, 40, 41, 70, 71, 72, 75, 76, 77, 85, *range(126, 136)))),
    *((code, f"NVDEC{n}", code < 90) for n, code in enumerate((68, 83, 84, 88, 89, 96, 97, 98))),
    *((code, f"NVJPG{n}", code == 82) for n, code in enumerate((82, *range(99, 106)))),
    (86, "OFA0", True), (139, "OFA1", False),
]
_ENGINE_KIND = {"CE": "Copy engine {} (DMA between host and GPU memory)", "NVDEC": "Video decoder engine {}",
                "NVJPG": "JPEG engine {}", "OFA": "Optical-flow engine {}"}
for _code, _engine, _in_header in _ENGINES:
    _kind = _ENGINE_KIND[_engine.rstrip("0123456789")].format(_engine)
    _ROWS.append((_code, f"ROBUST_CHANNEL_{_engine}_ERROR", "application", "HC" if _in_header else "C",
                  f"{_kind} raised an exception, usually in the work an application gave it.",
                  "Restart the application; contact NVIDIA support if it repeats with known-good software."))
# NVLink5 (Blackwell) errors 144-150 share one meaning; the Xid's own line says Fatal or Nonfatal.
_NVLINK5_UNIT = {"NETIR": " (link events: a link down, a high bit-error rate)", "MSE": " (a firmware watchdog)"}
for _code, _unit in zip(range(144, 151), ("SAW", "RLW", "TLW", "TREX", "NVLPW_CTRL", "NETIR", "MSE")):
    _ROWS.append((_code, f"NVLINK_{_unit}_ERROR", "nvlink", "C",
                  f"NVLink5 error in the link's {_unit} unit{_NVLINK5_UNIT.get(_unit, '')}; the Xid {_code} line "
                  "says whether it is Fatal or Nonfatal.",
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


# The smallest step that clears an Xid that needs attention (core/checks.py), by its kind: the catalog's immediate
# action is a GPU reset for memory, driver and NVLink faults, and a reboot for a GPU that left the bus; a few need a
# person whatever is reset (the board's power).
_REMEDY = {"memory": RESET, "driver": RESET, "nvlink": RESET, "hardware": REBOOT}
_REMEDY_OF_CODE = {54: SERVICE, 143: RESET, 163: RESET, 165: SERVICE}


def remedy(info: XidInfo) -> str:
    """The smallest step that can clear this Xid's cause (judged by its cause where it names one, as event_info)."""
    code = (info.cause or info).code
    return _REMEDY_OF_CODE.get(code) or _REMEDY.get(info.severity, REBOOT)


def needs_attention(info: XidInfo) -> bool:
    """True for memory, hardware, driver and NVLink faults (drain, reset or repair the node); False for
    application faults (restart the application) and informational Xids."""
    return info.severity in _ATTENTION


# --- events --------------------------------------------------------------------------------------

KINDS = ("xid", "fallen-off-bus", "init-failed", "aer-corrected", "aer-uncorrected", "gpu-uuid", "reset-required",
         "sxid")


@dataclass(frozen=True)
class KernelEvent:
    kind: str  # one of KINDS
    # pci.slot() of the device: "0000:01:00"; None when the line names none. An SXid's is its NVSwitch's; a
    # reset-required line names no GPU, so it takes the GPU of the Xid logged before it.
    bus_id: str | None
    time: str  # wall-clock or relative stamp as printed ("Mar 21 20:18:56", "+0.000844"); "" when none
    uptime: float | None  # seconds since boot, from the kernel's "[   65.315783]"
    xid: int | None  # sxid: the SXid code
    process: str | None  # name=... of an Xid line (None for <unknown> or absent)
    pid: int | None  # pid=... of an Xid line (None for '<unknown>' or absent; 0 is the kernel)
    # xid: the text after code/pid/name; AER: the report and its error names; gpu-uuid: the UUID; sxid: "Fatal, Link 48
    # LTSSM Fault Up" (its Severity and Data lines are in `line`); reset-required: the driver's assertion
    detail: str
    line: str  # the source text, verbatim; the lines of a multi-line message joined with "\n"
    serial: str | None = None  # gpu-uuid: the "GPU Board Serial Number" printed right after it


# The driver appends " caused by previous Xid N" to an Xid it logged because of an earlier one (today the
# channel cleanup of Xid 45; NVIDIA/open-gpu-kernel-modules src/nvidia/src/kernel/gpu/rc/kernel_rc.c).
_CAUSED_BY = re.compile(r"\bcaused by previous Xid (\d+)\b")


def caused_by(event: KernelEvent) -> int | None:
    """The Xid an Xid line names as its cause ("... Ch 00000001 caused by previous Xid 149"), or None."""
    m = _CAUSED_BY.search(event.detail) if event.kind == "xid" else None
    return int(m[1]) if m and int(m[1]) != event.xid else None


def event_info(event: KernelEvent) -> XidInfo:
    """What this Xid means. One the driver logged because of an earlier Xid (an Xid 45 "caused by previous Xid
    149") means what its cause means: the cause's severity and action, the meaning "Xid 45 caused by Xid 149:
    <Xid 149's meaning>", and `cause` set to the cause's XidInfo. Otherwise xid_info(event.xid)."""
    info = xid_info(event.xid or 0)
    code = caused_by(event)
    if code is None:
        return info
    cause = xid_info(code)
    return XidInfo(info.code, info.name, f"Xid {info.code} caused by Xid {code}: {cause.meaning}", cause.severity,
                   cause.action, cause.source, cause)


def event_needs_attention(event: KernelEvent) -> bool:
    """Whether the node needs attention because of this event. An Xid does when it is a memory, hardware, driver
    or NVLink fault, judged by the Xid it names as its cause where it names one (event_info); an Xid 154 unless the
    action it changed to is none; an SXid when it is fatal (non-fatal ones are "for informational purposes only",
    says the Fabric Manager guide). Corrected PCIe errors are recovered by the hardware."""
    if event.kind == "xid":
        if event.xid == 154:
            return recovery.of_xid_154(event.detail) not in (recovery.NONE, None)
        return needs_attention(event_info(event))
    if event.kind == "sxid":
        return sxid_is_fatal(event)
    return event.kind in ("fallen-off-bus", "init-failed", "aer-uncorrected", "reset-required")


def sxid_is_fatal(event: KernelEvent) -> bool:
    return event.kind == "sxid" and event.detail.startswith("Fatal")


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


def _match_whole(pattern: re.Pattern[str], line: str) -> re.Match[str]:
    """The match of a pattern that matches every line (_HEAD, _PID_NAME: each part optional)."""
    found = pattern.match(line)
    assert found is not None, pattern.pattern
    return found


def _from_program(head: re.Match[str], rest: str) -> bool:
    """A syslog/journal line logged by a program, not by the kernel."""
    return bool(_PROGRAM.match(rest) or (head["wall"] and "kernel:" not in head[0] and _HOST_TAG.match(rest)))


def _stamps(head: re.Match[str]) -> tuple[str, float | None]:
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

# The driver refusing work on a GPU until it is reset (0x62 in nvstatuscodes.h), by an assertion or a check that names
# no bus (scitix/sichek#51, NVIDIA/open-gpu-kernel-modules#1045):
#   NVRM: nvAssertOkFailedNoLog: Assertion failed: Reset required [NV_ERR_RESET_REQUIRED] (0x00000062) returned from ...
#   NVRM: GPU0 nvAssertOkFailedNoLog: Assertion failed: Reset required [NV_ERR_RESET_REQUIRED] (0x00000062) ...
_RESET_REQUIRED = re.compile(r"NVRM: (?:GPU\d+ )?(?P<detail>.*\[NV_ERR_RESET_REQUIRED\].*)$")
# NVSwitch errors: the nvswitch driver's "nvidia-%s: SXid (PCI:%04x:%02x:%02x.%x): %05d, " then "Fatal, Link 48 ..." or
# "Non-fatal, ...", and the same prefix again for the error's "Severity ..." and "Data {...}" lines (Fabric Manager
# user guide, "Runtime NVSwitch and GPU Errors"; leptonai/gpud's SXid README; NVIDIA/nvtrust#124).
_SXID = re.compile(r"nvidia-nvswitch\d*: SXid \((?:PCI:)?(?P<bus>[^)]*)\): (?P<code>\d+), (?P<rest>.*)$")
_SXID_ERROR = ("Fatal", "Non-fatal")

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
    """Every Xid, fallen-off-the-bus, PCIe AER, reset-required, SXid and GPU-UUID message in `text`, in order; other
    lines are ignored, and so are syslog lines from programs (a "name[pid]:" tag) that merely quote them."""
    drafts: list[_Draft] = []
    aer_open: dict[str, _Draft] = {}  # device -> its AER report still being printed
    aer_received: _Draft | None = None  # the last "... error received" still waiting for its report
    uuid: _Draft | None = None  # the gpu-uuid line just before, for the serial number line
    last_xid: _Draft | None = None  # the GPU a reset-required line (which names none) is about
    sxid_open: dict[tuple[str | None, int], _Draft] = {}  # (NVSwitch, code) -> the SXid whose lines follow
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        head = _match_whole(_HEAD, line)
        rest = line[head.end():]
        if _from_program(head, rest):
            continue
        time, uptime = _stamps(head)
        previous_uuid, uuid = uuid, None

        if m := _XID.search(rest):
            extra = _match_whole(_PID_NAME, m["rest"] or "")
            pid, name = extra["pid"], extra["name"]
            last_xid = _Draft("xid", _bus(m["bus"]), time, uptime, [line], extra["detail"].strip(), int(m["code"]),
                              None if name in (None, "", "<unknown>") else name, int(pid) if pid and pid.isdigit() else None)
            drafts.append(last_xid)
        elif m := _RESET_REQUIRED.search(rest):
            drafts.append(_Draft("reset-required", last_xid.bus_id if last_xid else None, time, uptime, [line],
                                 m["detail"].strip()))
        elif m := _SXID.search(rest):
            key = (_bus(m["bus"]), int(m["code"]))
            if m["rest"].startswith(_SXID_ERROR):
                sxid_open[key] = _Draft("sxid", key[0], time, uptime, [line], m["rest"].strip(), key[1])
                drafts.append(sxid_open[key])
            elif key in sxid_open:  # its "Severity ..." and "Data {...}" lines
                sxid_open[key].lines.append(line)
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
                    draft = aer_received
                    aer_received = None
                    draft.lines.append(line)
                    draft.kind, draft.bus_id, draft.detail = _aer_kind(r["severity"]), device, r["report"]
                else:  # "Multiple ... error received": one report per device
                    draft = _Draft(_aer_kind(r["severity"]), device, time, uptime, [line], r["report"])
                    drafts.append(draft)
                aer_open[device or ""] = draft
            elif (printing := aer_open.get(device or "")) and (_AER_BIT.match(msg) or _AER_MORE.match(msg)):
                printing.lines.append(line)
                if bit := _AER_BIT.match(msg):
                    printing.errors.append(bit["name"])
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
        uptime = _stamps(_match_whole(_HEAD, line))[1]
        if uptime is None:
            if _LINUX_VERSION.search(line):
                start, previous = i, None
            continue
        if (uptime < previous) if previous is not None else (uptime == 0.0):
            start = i
        previous = uptime
    return "".join(lines[start:])
