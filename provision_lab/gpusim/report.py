"""nvidia-smi -q: the full report, section by section (-d picks sections)."""

from __future__ import annotations

import random
import time

from .errors import Exit, RC_INVALID
from .migviews import q_mig_devices
from .modes import COMPUTE_WORDS, compute_mode, ecc_on, ecc_pending, mig_on, mig_pending, mode_word
from .recovery import q_lines as recovery_lines
from .gpu import (DEPRECATED, Gpu, Host, REASON_HW_POWER_BRAKE, REASON_HW_SLOWDOWN, REASON_HW_THERMAL, REASON_IDLE,
                  active, enabled, memory_used, yes_no)

# A GPU's -q report is a list of sections; -d picks sections by display type. A line is
# (depth, key, value): value None is a heading. Sections in_full=False appear only with -d.

KEY_WIDTH = 55


def q_line(depth: int, key: str, value=None) -> str:
    label = "    " * depth + key
    return label if value is None else f"{label:<{KEY_WIDTH}}: {value}"


def mhz(value: int | None) -> str:
    return "N/A" if value is None else f"{value} MHz"


def watts(value: float | None) -> str:
    return "N/A" if value is None else f"{value:.2f} W"


def celsius(value: int | None) -> str:
    return "N/A" if value is None else f"{value} C"


def na(value) -> str:
    return "N/A" if value is None else str(value)


def q_product(g: Gpu) -> list:
    return [
        (1, "Product Name", g.model.name), (1, "Product Brand", g.model.brand),
        (1, "Product Architecture", g.model.architecture), (1, "Display Mode", DEPRECATED),
        (1, "Display Attached", g.model.display_attached), (1, "Display Active", "Disabled"),
        (1, "Persistence Mode", enabled(g.persistent)), (1, "Addressing Mode", "None"),
        (1, "MIG Mode", None), (2, "Current", na(mode_word(mig_on(g.record)))),
        (2, "Pending", na(mode_word(mig_pending(g.record)))),
    ] + q_mig_devices(g)


def q_accounting(g: Gpu) -> list:
    return [(1, "Accounting Mode", "Disabled"), (1, "Accounting Mode Buffer Size", "4000")]


def q_board(g: Gpu) -> list:
    m, r = g.model, g.record
    _, bus, device, _ = g.pci
    return [
        (1, "Driver Model", None), (2, "Current", "N/A"), (2, "Pending", "N/A"),
        (1, "Serial Number", na(r["serial"])), (1, "GPU UUID", g.uuid), (1, "GPU PDI", r["pdi"]),
        (1, "Minor Number", str(r["slot"])), (1, "VBIOS Version", r["vbios"]), (1, "MultiGPU Board", "No"),
        (1, "Board ID", f"0x{(bus << 8) | device:x}"), (1, "Board Part Number", m.board_part),
        (1, "GPU Part Number", m.gpu_part), (1, "FRU Part Number", "N/A"),
        (1, "Platform Info", None), (2, "Chassis Serial Number", "N/A"), (2, "Slot Number", "N/A"),
        (2, "Tray Index", "N/A"), (2, "Host ID", "N/A"), (2, "Peer Type", "N/A"),
        (2, "Module Id", str(r["module_id"])), (2, "GPU Fabric GUID", "N/A"),
        (1, "Inforom Version", None), (2, "Image Version", m.inforom[0]), (2, "OEM Object", m.inforom[1]),
        (2, "ECC Object", m.inforom[2]), (2, "Power Management Object", m.inforom[3]),
        (1, "Inforom BBX Object Flush", None), (2, "Latest Timestamp", "N/A"), (2, "Latest Duration", "N/A"),
        (1, "GPU Operation Mode", None), (2, "Current", "N/A"), (2, "Pending", "N/A"),
        (1, "GPU C2C Mode", m.c2c_mode),
        (1, "GPU Virtualization Mode", None),
        (2, "Virtualization Mode", g.host.state.get("virtualization_mode", "None")),
        (2, "Host VGPU Mode", "N/A"), (2, "vGPU Heterogeneous Mode", "N/A"),
        *recovery_lines(g),
    ]


def q_gsp(g: Gpu) -> list:
    return [(1, "GSP Firmware Version", g.host.driver if g.model.gsp else "N/A")]


def q_pci(g: Gpu) -> list:
    m = g.model
    domain, bus, device, _ = g.pci
    return [
        (1, "IBMNPU", None), (2, "Relaxed Ordering Mode", "N/A"),
        (1, "PCI", None), (2, "Bus", f"0x{bus:02X}"), (2, "Device", f"0x{device:02X}"),
        (2, "Domain", f"0x{domain:04X}"), (2, "Base Classcode", "0x3"), (2, "Sub Classcode", m.sub_class),
        (2, "Device Id", m.device_id), (2, "Bus Id", g.bus_id), (2, "Sub System Id", m.subsystem_id),
        (2, "GPU Link Info", None), (3, "PCIe Generation", None),
        (4, "Max", str(m.pcie_gen)), (4, "Current", str(g.link_gen)), (4, "Device Current", str(g.link_gen)),
        (4, "Device Max", str(m.pcie_gen)), (4, "Host Max", na(m.pcie_host_max)),
        (3, "Link Width", None), (4, "Max", f"{m.pcie_width}x"), (4, "Current", f"{g.link_width}x"),
        (2, "Bridge Chip", None), (3, "Type", "N/A"), (3, "Firmware", "N/A"),
        (2, "Replays Since Reset", "0"), (2, "Replay Number Rollovers", "0"),
        (2, "Tx Throughput", f"{random.randint(200, 1500)} KB/s"),
        (2, "Rx Throughput", f"{random.randint(200, 1500)} KB/s"),
        (2, "Atomic Caps Outbound", "N/A"), (2, "Atomic Caps Inbound", "N/A"),
        (1, "Fan Speed", "0 %" if m.fan else "N/A"),
    ]


# -q's Clocks Event Reasons, in its order: (depth, label, NVML bit) [H100] smi-q.txt
Q_EVENT_REASONS = ((2, "Idle", REASON_IDLE), (2, "Applications Clocks Setting", 0x2), (2, "SW Power Cap", 0x4),
                   (2, "HW Slowdown", REASON_HW_SLOWDOWN), (3, "HW Thermal Slowdown", REASON_HW_THERMAL),
                   (3, "HW Power Brake Slowdown", REASON_HW_POWER_BRAKE), (2, "Sync Boost", 0x10),
                   (2, "SW Thermal Slowdown", 0x20), (2, "Display Clock Setting", 0x100))
# -q's Clocks Event Reasons Counters (time each reason was active, in us) and their bits
Q_EVENT_COUNTERS = (("SW Power Capping", 0x4), ("Sync Boost", 0x10), ("SW Thermal Slowdown", 0x20),
                    ("HW Thermal Slowdown", REASON_HW_THERMAL), ("HW Power Braking", REASON_HW_POWER_BRAKE))


def q_performance(g: Gpu) -> list:
    mask = g.event_reasons
    reasons = [(depth, label, active(mask & bit)) for depth, label, bit in Q_EVENT_REASONS]
    counters = [(2, name, f"{g.event_reason_us(bit)} us") for name, bit in Q_EVENT_COUNTERS]
    return ([(1, "Performance State", g.model.idle_pstate), (1, "Clocks Event Reasons", None)] + reasons
            + [(1, "Clocks Event Reasons Counters", None)] + counters)


def q_sparse(g: Gpu) -> list:
    return [(1, "Sparse Operation Mode", "Disabled" if g.model.architecture != "Volta" else "N/A")]


def q_memory(g: Gpu) -> list:
    m, total = g.model, g.memory_total
    used = memory_used(g)
    bar1_used = 1 if m.bar1_mib > 1024 else 2
    protected = "0 MiB" if m.brand != "GeForce" else "N/A"
    return [
        (1, "FB Memory Usage", None), (2, "Total", f"{total} MiB"), (2, "Reserved", f"{g.memory_reserved} MiB"),
        (2, "Used", f"{used} MiB"), (2, "Free", f"{g.memory_free} MiB"),
        (1, "BAR1 Memory Usage", None), (2, "Total", f"{m.bar1_mib} MiB"), (2, "Used", f"{bar1_used} MiB"),
        (2, "Free", f"{m.bar1_mib - bar1_used} MiB"),
        (1, "Conf Compute Protected Memory Usage", None), (2, "Total", protected), (2, "Used", protected),
        (2, "Free", protected),
    ]


def q_compute(g: Gpu) -> list:
    return [(1, "Compute Mode", COMPUTE_WORDS[compute_mode(g.record)])]


def q_utilization(g: Gpu) -> list:
    jpeg_ofa = "N/A" if g.model.architecture == "Volta" else "0 %"
    return [(1, "Utilization", None), (2, "GPU", "0 %"), (2, "Memory", "0 %"), (2, "Encoder", "0 %"),
            (2, "Decoder", "0 %"), (2, "JPEG", jpeg_ofa), (2, "OFA", jpeg_ofa)]


def q_encoder(g: Gpu) -> list:
    return [(1, "Encoder Stats", None), (2, "Active Sessions", "0"), (2, "Average FPS", "0"),
            (2, "Average Latency", "0")]


def q_fbc(g: Gpu) -> list:
    return [(1, "FBC Stats", None), (2, "Active Sessions", "0"), (2, "Average FPS", "0"),
            (2, "Average Latency", "0")]


def q_dram_encryption(g: Gpu) -> list:
    return [(1, "DRAM Encryption Mode", None), (2, "Current", "N/A"), (2, "Pending", "N/A")]


def q_ecc(g: Gpu) -> list:
    """ECC Mode and ECC Errors: Volta's per-unit single/double bit counters [V100], or SRAM/DRAM counters [H100].
    An uncorrectable error in device memory counts as Double Bit / Device Memory, or as DRAM Uncorrectable."""
    m = g.model
    lines = [(1, "ECC Mode", None), (2, "Current", na(mode_word(ecc_on(g.record)))),
             (2, "Pending", na(mode_word(ecc_pending(g.record)))), (1, "ECC Errors", None)]
    count = "0" if g.ecc_enabled else "N/A"
    dram = {"Volatile": str(g.record["ecc_volatile"]), "Aggregate": str(g.record["ecc_aggregate"])}
    if m.volta_ecc:
        for span in ("Volatile", "Aggregate"):
            lines.append((2, span, None))
            for kind, cbu in (("Single Bit", "N/A"), ("Double Bit", count)):
                device = dram[span] if kind == "Double Bit" and g.ecc_enabled else count
                units = [("Device Memory", device), ("Register File", count), ("L1 Cache", count),
                         ("L2 Cache", count), ("Texture Memory", "N/A"), ("Texture Shared", "N/A")]
                lines.append((3, f"{kind:<22}", None))
                lines += [(4, unit, value) for unit, value in units + [("CBU", cbu), ("Total", device)]]
        return lines
    kinds = ["SRAM Correctable", "SRAM Uncorrectable Parity", "SRAM Uncorrectable SEC-DED", "DRAM Correctable",
             "DRAM Uncorrectable"]
    sources = ["SRAM L2", "SRAM SM", "SRAM Microcontroller", "SRAM PCIE", "SRAM Other"]
    for span in ("Volatile", "Aggregate"):
        lines.append((2, span, None))
        lines += [(3, kind, dram[span] if kind == "DRAM Uncorrectable" and g.ecc_enabled else count)
                  for kind in kinds]
    lines.append((3, "SRAM Threshold Exceeded", "No" if count == "0" else "N/A"))
    lines.append((2, "Aggregate Uncorrectable SRAM Sources", None))
    lines += [(3, source, count) for source in sources]
    return lines + [(2, "Channel Repair Pending", "No"), (2, "TPC Repair Pending", "No"),
                    (2, "Unrepairable Memory", "No" if count == "0" else "N/A")]


def q_retired_pages(g: Gpu) -> list:
    r = g.record
    if not g.model.retired_pages:
        return [(1, "Retired Pages", None), (2, "Single Bit ECC", "N/A"), (2, "Double Bit ECC", "N/A"),
                (2, "Pending Page Blacklist", "N/A")]
    return [(1, "Retired Pages", None), (2, "Single Bit ECC", "0"), (2, "Double Bit ECC", str(r["retired_dbe"])),
            (2, "Pending Page Blacklist", yes_no(r["retired_pending"]))]


def q_remapped_rows(g: Gpu) -> list:
    """Each row remapped for an uncorrectable error takes a spare row of its bank: that bank drops from Max to
    High availability, at once, pending or not (a real 550.90.07 H100: Uncorrectable Error 1, Pending Yes,
    Max 2559 / High 1 bank(s); see gpu_models.md)."""
    banks, r = g.model.remap_banks, g.record
    if not banks:
        return [(1, "Remapped Rows", "N/A")]
    used = min(r["remap_unc"], banks)
    return [(1, "Remapped Rows", None), (2, "Correctable Error", "0"), (2, "Inactive Correctable Error", "0"),
            (2, "Uncorrectable Error", str(r["remap_unc"])), (2, "Inactive Uncorrectable Error", "0"),
            (2, "Pending", yes_no(r["remap_pending"])), (2, "Remapping Failure Occurred", yes_no(r["remap_failure"])),
            (2, "Bank Remap Availability Histogram", None),
            (3, "Max", f"{banks - used} bank(s)"), (3, "High", f"{used} bank(s)"), (3, "Partial", "0 bank(s)"),
            (3, "Low", "0 bank(s)"), (3, "None", "0 bank(s)")]


def q_temperature(g: Gpu) -> list:
    t = g.model.thermal
    now = [(1, "Temperature", None), (2, "GPU Current Temp", celsius(g.temperature))]
    if t.tlimit_total is not None:  # Hopper/Ada: thresholds relative to the T.Limit
        return now + [
            (2, "GPU T.Limit Temp", celsius(t.tlimit_total - g.temperature)),
            (2, "GPU Shutdown T.Limit Temp", celsius(t.shutdown)),
            (2, "GPU Slowdown T.Limit Temp", celsius(t.slowdown)),
            (2, "GPU Max Operating T.Limit Temp", celsius(t.max_operating)),
            (2, "GPU Target Temperature", celsius(t.target)),
            (2, "Memory Current Temp", celsius(g.memory_temperature)),
            (2, "Memory Max Operating T.Limit Temp", celsius(t.memory_max)),
        ]
    return now + [
        (2, "GPU T.Limit Temp", "N/A"), (2, "GPU Shutdown Temp", celsius(t.shutdown)),
        (2, "GPU Slowdown Temp", celsius(t.slowdown)), (2, "GPU Max Operating Temp", celsius(t.max_operating)),
        (2, "GPU Target Temperature", celsius(t.target)), (2, "Memory Current Temp", celsius(g.memory_temperature)),
        (2, "Memory Max Operating Temp", celsius(t.memory_max)),
    ]


def q_power_readings(g: Gpu) -> list:
    m = g.model
    return [(1, "GPU Power Readings", None), (2, "Average Power Draw", watts(g.power_average)),
            (2, "Instantaneous Power Draw", watts(g.power_draw)), (2, "Current Power Limit", watts(g.power_limit)),
            (2, "Requested Power Limit", watts(g.power_limit)), (2, "Default Power Limit", watts(m.power_default)),
            (2, "Min Power Limit", watts(m.power_min)), (2, "Max Power Limit", watts(m.power_max))]


def q_power_samples(g: Gpu) -> list:
    low, high = sorted((g.power_draw, round(g.power_draw * random.uniform(1.2, 2.1), 2)))
    return [(1, "Power Samples", None), (2, "Duration", f"{random.uniform(1.0, 3.0):.2f} sec"),
            (2, "Number of Samples", "119"), (2, "Max", watts(high)), (2, "Min", watts(low)),
            (2, "Avg", watts((low + high) / 2))]


def q_power_other(g: Gpu) -> list:
    memory = None if g.model.memory_power is None else round(g.model.memory_power * random.uniform(0.98, 1.02), 2)
    module = ["Average Power Draw", "Instantaneous Power Draw", "Current Power Limit", "Requested Power Limit",
              "Default Power Limit", "Min Power Limit", "Max Power Limit"]
    return ([(1, "GPU Memory Power Readings ", None), (2, "Average Power Draw", watts(memory)),
             (2, "Instantaneous Power Draw", "N/A"), (1, "Module Power Readings", None)]
            + [(2, name, "N/A") for name in module])


def q_power_smoothing(g: Gpu) -> list:
    return [(1, "Power Smoothing", "N/A")]


def q_power_profiles(g: Gpu) -> list:
    return [(1, "Workload Power Profiles", None), (2, "Requested Profiles", "N/A"), (2, "Enforced Profiles", "N/A")]


def q_clocks(g: Gpu) -> list:
    m, now, app = g.model, g.clocks, g.app_clocks
    default = m.default_app_clocks
    deferred = g.record["deferred_mem"]
    return [
        (1, "Clocks", None), (2, "Graphics", mhz(now.graphics)), (2, "SM", mhz(now.sm)),
        (2, "Memory", mhz(now.memory)), (2, "Video", mhz(now.video)),
        (1, "Applications Clocks", None), (2, "Graphics", mhz(app and app[1])), (2, "Memory", mhz(app and app[0])),
        (1, "Default Applications Clocks", None), (2, "Graphics", mhz(default and default[1])),
        (2, "Memory", mhz(default and default[0])),
        (1, "Deferred Clocks", None), (2, "Memory", mhz(deferred)),
        (1, "Max Clocks", None), (2, "Graphics", mhz(m.max_clocks.graphics)), (2, "SM", mhz(m.max_clocks.sm)),
        (2, "Memory", mhz(m.max_clocks.memory)), (2, "Video", mhz(m.max_clocks.video)),
        (1, "Max Customer Boost Clocks", None), (2, "Graphics", mhz(m.boost_clock)),
        (1, "Clock Policy", None), (2, "Auto Boost", "N/A"), (2, "Auto Boost Default", "N/A"),
    ]


# On an NVSwitch board, the block as the 8x H100 HGX capture prints it once registered (State Completed, Status
# Success, CliqueId 0, ClusterUUID zero on a single-node fabric, ../shared/reference/node-lifecycle-reference.md
# 1.5); before, State In Progress and Status N/A, as the capture before fabric manager started. The rest of that
# block while In Progress was not captured: N/A here. Health's fields are the 580 driver's, N/A (not captured).
SINGLE_NODE_CLUSTER = "00000000-0000-0000-0000-000000000000"


def q_fabric(g: Gpu) -> list:
    health = ["Summary", "Bandwidth", "Route Recovery in progress", "Route Unhealthy", "Access Timeout Recovery",
              "Incorrect Configuration", "Partition Assigned"]
    state = g.record.get("fabric_state")
    done = state == "Completed"
    return ([(1, "Fabric", None), (2, "State", state or "N/A"), (2, "Status", g.record.get("fabric_status") or "N/A"),
             (2, "CliqueId", "0" if done else "N/A"), (2, "ClusterUUID", SINGLE_NODE_CLUSTER if done else "N/A"),
             (2, "Health", None)] + [(3, name, "N/A") for name in health])


def q_processes(g: Gpu) -> list:
    return [(1, "Processes", "None")]


def q_capabilities(g: Gpu) -> list:
    return [(1, "Capabilities", None), (2, "EGM", "disabled")]


def q_supported_clocks(g: Gpu) -> list:
    if not g.model.supported_clocks:
        return [(1, "Supported Clocks", "N/A")]
    lines: list[tuple] = [(1, "Supported Clocks", None)]
    for memory, graphics in g.model.supported_clocks:
        lines.append((2, "Memory", mhz(memory)))
        lines += [(3, "Graphics", mhz(value)) for value in graphics]
    return lines


# (section, the -d types that show it, shown by a plain -q), in -q's order
Q_SECTIONS = [
    (q_product, (), True), (q_accounting, ("ACCOUNTING",), True), (q_board, (), True),
    (q_gsp, ("GSP_FIRMWARE_VERSION",), True), (q_pci, (), True), (q_performance, ("PERFORMANCE",), True),
    (q_sparse, (), True), (q_memory, ("MEMORY",), True), (q_compute, ("COMPUTE",), True),
    (q_utilization, ("UTILIZATION",), True), (q_encoder, ("ENCODER_STATS",), True), (q_fbc, ("FBC_STATS",), True),
    (q_dram_encryption, (), True), (q_ecc, ("ECC",), True), (q_retired_pages, ("PAGE_RETIREMENT",), True),
    (q_remapped_rows, ("ROW_REMAPPER",), True), (q_temperature, ("TEMPERATURE",), True),
    (q_power_readings, ("POWER",), True), (q_power_samples, ("POWER",), False), (q_power_other, ("POWER",), True),
    (q_power_smoothing, ("POWER_SMOOTHING",), True), (q_power_profiles, ("POWER_PROFILES",), True),
    (q_clocks, ("CLOCK",), True), (q_fabric, (), True), (q_processes, ("PIDS",), True),
    (q_capabilities, (), True), (q_supported_clocks, ("SUPPORTED_CLOCKS",), False),
]
DISPLAY_TYPES = {"MEMORY", "UTILIZATION", "ECC", "TEMPERATURE", "POWER", "CLOCK", "COMPUTE", "PIDS", "PERFORMANCE",
                 "SUPPORTED_CLOCKS", "PAGE_RETIREMENT", "ACCOUNTING", "ENCODER_STATS", "SUPPORTED_GPU_TARGET_TEMP",
                 "VOLTAGE", "FBC_STATS", "ROW_REMAPPER", "GSP_FIRMWARE_VERSION", "POWER_SMOOTHING",
                 "POWER_PROFILES"}


def parse_display(spec: str | None) -> set | None:
    if spec is None:
        return None
    wanted = {part.strip().upper() for part in spec.split(",") if part.strip()}
    if not wanted or not wanted <= DISPLAY_TYPES:
        raise Exit("Failed to parse --display/-d flags\n", RC_INVALID)  # the 580 driver's words [H200-MODES]
    return wanted


def render_query(host: Host, gpus: list, display: set | None) -> str:
    lines = ["", "==============NVSMI LOG==============", "",
             q_line(0, "Timestamp", time.asctime()), q_line(0, "Driver Version", host.driver),
             q_line(0, "CUDA Version", host.cuda), "", q_line(0, "Attached GPUs", len(host.gpus))]
    for g in gpus:
        lines.append(f"GPU {g.bus_id}")
        for section, types, in_full in Q_SECTIONS:
            if (in_full and display is None) or (display and display & set(types)):
                lines += [q_line(*line) for line in section(g)]
        lines.append("")
    return "\n".join(lines) + "\n"
