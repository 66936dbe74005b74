"""`gpusim fault`: what a hardware fault does to a GPU, and what the kernel logs of it."""

from __future__ import annotations

import hashlib
import time

from .apps import start_app, stop_apps
from .errors import SimError
from .gpu import REASON_HW_POWER_BRAKE, REASON_HW_SLOWDOWN, REASON_HW_THERMAL, normal_bus_id
from .kernel import init_failed, kmsg, pci_short
from .models import MODELS
from .modes import ecc_on, mig_on
from .recovery import FAULTS as RECOVERY_FAULTS, inject as inject_recovery, log_off_bus
from .state import healthy, open_state, require_config

FAULTS = ("off-bus", "gone", "init-failed", "pcie-degraded", "pcie-degraded-under-load", "ecc", "power-brake", "thermal", "pcie-errors", "nvlink-down",
          "nvlink-errors", "bad-riser", "process", "mig-instances-gone", *RECOVERY_FAULTS, "clear")
FAULT_USAGE = ("usage: gpusim fault GPU off-bus|gone|init-failed|pcie-degraded|pcie-degraded-under-load|ecc|power-brake|thermal|pcie-errors|nvlink-down|"
               "nvlink-errors|bad-riser|process|mig-instances-gone|reset-required|needs-reboot|failing-card|clear [--width N] [--gen N] [--remap-failure] [--link L] "
               "[--drain]")
FAULT_OPTIONS = {"pcie-degraded": {"--width": True, "--gen": True},
                 "pcie-degraded-under-load": {"--width": True, "--gen": True}, "ecc": {"--remap-failure": False},
                 "nvlink-down": {"--link": True}, "nvlink-errors": {"--link": True},
                 "reset-required": {"--drain": False}}
# What one nvlink-errors fault adds to a link's Replay, Recovery and CRC Errors (inferred, gpu_models.md): each
# CRC error is a flit the receiver asks again for (a replay), and the burst ends in one retraining (a recovery).
NVLINK_ERROR_BURST = (5, 1, 5)
# The clock event reasons a hardware fault holds active: HW Slowdown with its cause [NVML bits, nvml.h].
FORCED_REASONS = {"power-brake": REASON_HW_SLOWDOWN | REASON_HW_POWER_BRAKE,
                  "thermal": REASON_HW_SLOWDOWN | REASON_HW_THERMAL}


def find_record(state: dict, spec: str) -> dict:
    for record in state["gpus"]:
        if spec == str(record["slot"]) or spec.lower() == record["uuid"].lower() \
                or normal_bus_id(spec) == record["bus_id"].upper():
            return record
    raise SimError(f"no GPU {spec!r}; slots 0..{len(state['gpus']) - 1}")


def parse_fault_options(kind: str, args: list) -> dict:
    """--width N / --gen N (pcie-degraded), --remap-failure (ecc); anything else is refused."""
    allowed, options, rest = FAULT_OPTIONS.get(kind, {}), {}, list(args)
    while rest:
        name = rest.pop(0)
        if name not in allowed or (allowed[name] and not rest):
            raise SimError(f"unknown fault {' '.join([kind, *args])!r}: off-bus, gone, init-failed, pcie-degraded "
                           "[--width N] [--gen N], pcie-degraded-under-load [--width N] [--gen N], ecc [--remap-failure], power-brake, thermal, pcie-errors, "
                           "nvlink-down [--link L], nvlink-errors [--link L], bad-riser, process, mig-instances-gone, "
                           "reset-required [--drain], needs-reboot, failing-card, clear")
        options[name] = rest.pop(0) if allowed[name] else True
    return options


def cmd_fault(args: list) -> int:
    if len(args) < 2:
        raise SimError(FAULT_USAGE)
    spec, kind = args[0], args[1]
    if kind not in FAULTS:
        parse_fault_options("", args[1:])  # refuses, naming the kinds
    extra = parse_fault_options(kind, args[2:])
    with open_state(require_config()) as state:
        record = find_record(state, spec)
        model = MODELS[record["model"]]
        if kind == "off-bus":
            fall_off_bus(state, record)
        elif kind == "gone":
            record.update(gone=True, off_bus=False)
            device = model.device_id  # "0x268410DE": device 2684 of vendor 10de
            kmsg(state, f"NVRM: The NVIDIA GPU {record['bus_id'][4:].lower()} (PCI ID: 10de:{device[2:6].lower()}) "
                        "installed in this system has fallen off the bus and is not responding to commands.")
            kmsg(state, "NVRM: The NVIDIA probe routine failed for 1 device(s).")
        elif kind == "init-failed":
            record.update(gone=True, off_bus=False, init_failed=True)
            init_failed(state, record)
        elif kind in ("pcie-degraded", "pcie-degraded-under-load"):
            width = int(extra.get("--width", 8 if "--gen" not in extra else model.pcie_width))
            trained = {"gen": int(extra.get("--gen", model.pcie_gen)), "width": width}
            record["link" if kind == "pcie-degraded" else "link_under_load"] = trained
        elif kind == "ecc":
            uncorrectable_ecc_error(state, record, bool(extra.get("--remap-failure")))
        elif kind in FORCED_REASONS:
            force_reasons(record, FORCED_REASONS[kind])
        elif kind == "pcie-errors":
            aer_corrected_error(state, record)
        elif kind == "nvlink-down":
            record["nvlink_down"] = sorted({*record["nvlink_down"], nvlink_of(record, extra.get("--link"))})
        elif kind == "process":  # a CUDA process on it (apps.py): a job runs there
            start_app(record)
        elif kind == "mig-instances-gone":  # as after a crash or a driver reload: MIG mode stays, the layout not
            if not mig_on(record):
                raise SimError(f"GPU {record['slot']} ({model.name}) is not in MIG mode: it has no MIG instances")
            record["gis"] = []
        elif kind in RECOVERY_FAULTS:  # the driver asks for a reset or a reboot (recovery.py)
            inject_recovery(state, record, kind, drain=bool(extra.get("--drain")))
        elif kind == "bad-riser":  # nothing at rest: load.py logs its errors while a load runs
            record["bad_riser"] = True
        elif kind == "nvlink-errors":
            link = str(nvlink_of(record, extra.get("--link")))
            counts = record["nvlink_errors"].get(link, [0, 0, 0])
            record["nvlink_errors"][link] = [n + more for n, more in zip(counts, NVLINK_ERROR_BURST)]
        else:  # a repaired card; its lifetime ECC count is in its InfoROM and stays
            stop_apps(record)
            record.update(healthy(), off_bus=False, gone=False, init_failed=False, link=None, link_under_load=None,
                          ecc_aggregate=record["ecc_aggregate"], recovery_action=None, failing=False)
    return 0


def nvlink_of(record: dict, link) -> int:
    """The link a fault names (--link L, default 0): one of the GPU's NVLinks."""
    model = MODELS[record["model"]]
    if not model.nvlink_links:
        raise SimError(f"GPU {record['slot']} ({model.name}) has no NVLink")
    text = "0" if link is None else str(link)
    if not text.isdigit() or int(text) >= model.nvlink_links:
        raise SimError(f"--link {text}: GPU {record['slot']} ({model.name}) has links 0..{model.nvlink_links - 1}")
    return int(text)


def fall_off_bus(state: dict, record: dict) -> None:
    record["off_bus"] = True
    log_off_bus(state, record)


# An Xid line as the 5xx drivers print one the hardware raised, no process to blame ([XID79], [H100-DBE] and
# [DBE-1146] in gpu_models.md).
XID = "NVRM: Xid (PCI:{pci}): {xid}, pid='<unknown>', name=<unknown>, {text}"
# Frame buffer partitions and subpartitions an Xid 48 may name, per architecture (inferred: real lines show
# partition 4, 5, 7 / subpartition 0, 1 on page-retirement GPUs, partition 16 / subpartition 3 on an H100).
FB_PARTITIONS = {"Volta": (8, 2), "Hopper": (20, 4)}


def uncorrectable_ecc_error(state: dict, record: dict, remap_failure: bool) -> None:
    """One double bit error in device memory: Xid 48, then the page retirement or row remap it causes (Xid 63),
    or the row remap that failed (Xid 64). Sources: gpu_models.md, "Kernel log lines"."""
    model = MODELS[record["model"]]
    if not ecc_on(record):
        state_word = "not supported" if ecc_on(record) is None else "disabled"
        raise SimError(f"GPU {record['slot']} ({model.name}) has ECC {state_word}: "
                       "it cannot report an uncorrectable ECC error")
    if record["gone"] or record["off_bus"]:
        raise SimError(f"GPU {record['slot']} is off the bus: the driver cannot hear of its ECC errors")
    if remap_failure and not model.remap_banks:
        raise SimError(f"--remap-failure: GPU {record['slot']} ({model.name}) retires pages, it has no row remapper")
    # where: stable per GPU and error, 32-byte aligned within the frame buffer, as in the real lines
    digest = hashlib.sha256(f"{record['uuid']}/{record['ecc_aggregate']}".encode()).digest()
    address = int.from_bytes(digest[:8], "big") % (model.memory_mib << 20) & ~0x1F
    partitions, subpartitions = FB_PARTITIONS.get(model.architecture, (8, 2))
    pci = pci_short(record["bus_id"])
    record["ecc_volatile"] += 1
    record["ecc_aggregate"] += 1
    kmsg(state, XID.format(pci=pci, xid=48, text="An uncorrectable double bit error (DBE) has been detected on GPU "
                           f"in the framebuffer at physAddr 0x{address:x} partition {digest[8] % partitions}, "
                           f"subpartition {digest[9] % subpartitions}."))
    if remap_failure:
        record["remap_failure"] = True
        kmsg(state, XID.format(pci=pci, xid=64, text=f"Row Remapper Error: (0x{address:016x}) - "
                               "All reserved rows for bank are remapped"))
    elif model.remap_banks:
        record.update(remap_unc=record["remap_unc"] + 1, remap_pending=True)
        kmsg(state, XID.format(pci=pci, xid=63, text=f"Row Remapper: New row (0x{address:016x}) marked for "
                               "remapping, reset gpu to activate."))
    elif model.retired_pages:
        record.update(retired_dbe=record["retired_dbe"] + 1, retired_pending=True)
        kmsg(state, XID.format(pci=pci, xid=63, text="Dynamic Page Retirement: New page retired, reboot to "
                               f"activate (0x{address >> 12:016x})."))


def force_reasons(record: dict, bits: int) -> None:
    """A hardware condition holds clock event reasons active; the GPU was at work, so it is not idle."""
    now = time.time()
    for bit in (REASON_HW_SLOWDOWN, REASON_HW_THERMAL, REASON_HW_POWER_BRAKE):
        if bits & bit and not record["forced_reasons"] & bit:
            record["reasons_since"][f"0x{bit:x}"] = now
    record["forced_reasons"] |= bits


def root_port(record: dict) -> str:
    """The PCIe root port above a GPU: stable, one per slot (00:01.0 for slot 0, 00:02.0 for slot 1, ...)."""
    domain = record["bus_id"].split(":")[0][-4:].lower()
    return f"{domain}:00:{1 + record['slot'] % 31:02x}.0"


def aer_corrected_error(state: dict, record: dict) -> None:
    """A corrected receiver error on the GPU's link, as the kernel's AER driver reports it (drivers/pci/pcie/
    aer.c: aer_print_port_info, aer_print_error, __aer_print_error's "   [%2d] %-22s%s"): 5.x kernel wording,
    with the "AER: " prefix on every line (a real 5.4 Ubuntu dmesg; see gpu_models.md)."""
    gpu = record["bus_id"][4:].lower()
    device = MODELS[record["model"]].device_id[2:6].lower()
    kmsg(state, f"pcieport {root_port(record)}: AER: Corrected error received: {gpu}")
    kmsg(state, f"nvidia {gpu}: AER: PCIe Bus Error: severity=Corrected, type=Physical Layer, (Receiver ID)")
    kmsg(state, f"nvidia {gpu}: AER:   device [10de:{device}] error status/mask=00000001/0000e000")
    kmsg(state, f"nvidia {gpu}: AER:    [ 0] {'RxErr':<22}")
