"""nvidia-smi --query-gpu and its sister queries: the fields, and the CSV they print."""

from __future__ import annotations

import time
from collections import namedtuple
from collections.abc import Callable

from .apps import running
from .modes import COMPUTE_WORDS, compute_mode, ecc_on, ecc_pending, mig_on, mig_pending, mode_word
from .errors import BAD_FIELD, Exit, HELP_HINT, INVALID_COMBINATION, RC_INVALID
from .recovery import query_value as recovery_value
from .gpu import (DEPRECATED, Gpu, REASON_HW_POWER_BRAKE, REASON_HW_SLOWDOWN, REASON_HW_THERMAL, REASON_IDLE, Special,
                  active, enabled, memory_used, yes_no)


# --- the fields: their names, unit, and how each reads a GPU ------------------------------------------


# names: the first is the canonical name, which the CSV header shows; get: Gpu -> its value
Field = namedtuple("Field", "names unit get")


def field(names: str, unit: str, get: Callable) -> Field:
    return Field(tuple(names.split("|")), unit, get)


def csv_timestamp() -> str:
    now = time.time()
    return time.strftime("%Y/%m/%d %H:%M:%S", time.localtime(now)) + f".{int(now * 1000) % 1000:03d}"


def when(condition: bool, value):
    return value if condition else None


# --query-gpu's clocks_event_reasons.* fields and their NVML bits (nvmlClocksEventReason*, nvml.h).
EVENT_REASONS = {"gpu_idle": REASON_IDLE, "applications_clocks_setting": 0x2, "sw_power_cap": 0x4,
                 "hw_slowdown": REASON_HW_SLOWDOWN, "hw_thermal_slowdown": REASON_HW_THERMAL,
                 "hw_power_brake_slowdown": REASON_HW_POWER_BRAKE, "sw_thermal_slowdown": 0x20, "sync_boost": 0x10}


def ecc_count(g: Gpu, kind: str, span: str):
    """ecc.errors.<kind>.<span>.total: uncorrected counts from the state, corrected ones 0; N/A without ECC."""
    if not g.ecc_enabled:
        return None
    if kind == "corrected":
        return 0
    return g.record["ecc_volatile"] if span == "volatile" else g.record["ecc_aggregate"]


def ecc_fields() -> list:
    counts = [field(f"ecc.errors.{kind}.{span}.total", "", lambda g, k=kind, s=span: ecc_count(g, k, s))
              for kind in ("corrected", "uncorrected") for span in ("volatile", "aggregate")]
    return counts + [
        field("ecc.mode.current", "", lambda g: mode_word(ecc_on(g.record))),
        field("ecc.mode.pending", "", lambda g: mode_word(ecc_pending(g.record))),
    ]


def clock_fields() -> list:
    current = [field(f"clocks.current.{name}|clocks.{short}", "MHz", lambda g, n=name: getattr(g.clocks, n))
               for name, short in (("graphics", "gr"), ("sm", "sm"), ("memory", "mem"), ("video", "video"))]
    pairs = (("applications", lambda g: g.app_clocks), ("default_applications", lambda g: g.model.default_app_clocks))
    app = [field(f"clocks.{kind}.{name}|clocks.{kind}.{short}", "MHz",
                 lambda g, pair=pair, i=index: pair(g) and pair(g)[i])
           for kind, pair in pairs for name, short, index in (("graphics", "gr", 1), ("memory", "mem", 0))]
    return current + app + [
        field("clocks.max.graphics|clocks.max.gr", "MHz", lambda g: g.model.max_clocks.graphics),
        field("clocks.max.sm", "MHz", lambda g: g.model.max_clocks.sm),
        field("clocks.max.memory|clocks.max.mem", "MHz", lambda g: g.model.max_clocks.memory),
    ]


def power_fields() -> list:
    return [
        field("power.management", "", lambda g: "Enabled"),
        field("power.draw", "W", lambda g: g.power_draw),
        field("power.draw.average|gpu.power.draw.average", "W", lambda g: g.power_average),
        field("power.draw.instant|gpu.power.draw.instant", "W", lambda g: g.power_instant),
        field("power.limit|gpu.power.requested_limit", "W", lambda g: g.power_limit),
        field("enforced.power.limit|gpu.power.current_limit", "W", lambda g: g.power_limit),
        field("power.default_limit|gpu.power.default_limit", "W", lambda g: g.model.power_default),
        field("power.min_limit|gpu.power.min_limit", "W", lambda g: g.model.power_min),
        field("power.max_limit|gpu.power.max_limit", "W", lambda g: g.model.power_max),
    ]


GPU_FIELDS = [
    field("timestamp", "", lambda g: csv_timestamp()),
    field("driver_version", "", lambda g: g.host.driver),
    field("count", "", lambda g: len(g.host.gpus)),
    field("name|gpu_name", "", lambda g: g.model.name),
    field("serial|gpu_serial", "", lambda g: g.record["serial"]),
    field("uuid|gpu_uuid", "", lambda g: g.uuid),
    field("pci.bus_id|gpu_bus_id", "", lambda g: g.bus_id),
    field("pci.domain", "", lambda g: f"0x{g.pci[0]:04X}"),
    field("pci.bus", "", lambda g: f"0x{g.pci[1]:02X}"),
    field("pci.device", "", lambda g: f"0x{g.pci[2]:02X}"),
    field("pci.device_id", "", lambda g: g.model.device_id),
    field("pci.sub_device_id", "", lambda g: g.model.subsystem_id),
    field("pcie.link.gen.current", "", lambda g: g.link_gen),
    field("pcie.link.gen.gpucurrent", "", lambda g: g.link_gen),
    field("pcie.link.gen.max", "", lambda g: g.model.pcie_gen),
    field("pcie.link.gen.gpumax", "", lambda g: g.model.pcie_gen),
    field("pcie.link.gen.hostmax", "", lambda g: g.model.pcie_host_max),
    field("pcie.link.width.current", "", lambda g: g.link_width),
    field("pcie.link.width.max", "", lambda g: g.model.pcie_width),
    field("index", "", lambda g: g.index),
    field("display_mode", "", lambda g: DEPRECATED),
    field("display_attached", "", lambda g: g.model.display_attached),
    field("display_active", "", lambda g: "Disabled"),
    field("persistence_mode", "", lambda g: enabled(g.persistent)),
    field("addressing_mode", "", lambda g: "None"),
    field("accounting.mode", "", lambda g: "Disabled"),
    field("accounting.buffer_size", "", lambda g: 4000),
    field("driver_model.current", "", lambda g: None),
    field("driver_model.pending", "", lambda g: None),
    field("vbios_version", "", lambda g: g.record["vbios"]),
    field("inforom.img|inforom.image", "", lambda g: g.model.inforom[0]),
    field("inforom.oem", "", lambda g: g.model.inforom[1]),
    field("inforom.ecc", "", lambda g: g.model.inforom[2]),
    field("inforom.pwr|inforom.power", "", lambda g: g.model.inforom[3]),
    field("gpu_recovery_action", "", recovery_value),
    field("gom.current|gpu_operation_mode.current", "", lambda g: None),
    field("gom.pending|gpu_operation_mode.pending", "", lambda g: None),
    field("fan.speed", "%", lambda g: when(g.model.fan, 0)),
    field("pstate", "", lambda g: g.model.idle_pstate),
    field("clocks_event_reasons.supported|clocks_throttle_reasons.supported", "",
          lambda g: g.model.events_supported),
    field("clocks_event_reasons.active|clocks_throttle_reasons.active", "", lambda g: f"0x{g.event_reasons:016X}"),
    *[field(f"clocks_event_reasons.{r}|clocks_throttle_reasons.{r}", "",
            lambda g, bit=bit: active(g.event_reasons & bit)) for r, bit in EVENT_REASONS.items()],
    field("memory.total", "MiB", lambda g: g.memory_total),
    field("memory.reserved", "MiB", lambda g: g.memory_reserved),
    field("memory.used", "MiB", memory_used),
    field("memory.free", "MiB", lambda g: g.memory_free),
    field("compute_mode", "", lambda g: COMPUTE_WORDS[compute_mode(g.record)]),
    field("compute_cap", "", lambda g: g.model.compute_cap),
    # in MIG mode the GPU as a whole reports no utilization: its MIG devices do
    *[field(f"utilization.{u}", "%", lambda g: when(not g.mig_enabled, g.utilization)) for u in ("gpu", "memory")],
    *[field(f"utilization.{u}", "%", lambda g: 0) for u in ("encoder", "decoder", "jpeg", "ofa")],
    *ecc_fields(),
    field("retired_pages.single_bit_ecc.count|retired_pages.sbe", "", lambda g: when(g.model.retired_pages, 0)),
    field("retired_pages.double_bit.count|retired_pages.dbe", "",
          lambda g: when(g.model.retired_pages, g.record["retired_dbe"])),
    field("retired_pages.pending", "", lambda g: when(g.model.retired_pages, yes_no(g.record["retired_pending"]))),
    field("remapped_rows.correctable|remapped_rows.sbe", "", lambda g: when(bool(g.model.remap_banks), 0)),
    field("remapped_rows.uncorrectable|remapped_rows.dbe", "",
          lambda g: when(bool(g.model.remap_banks), g.record["remap_unc"])),
    field("remapped_rows.pending", "", lambda g: when(bool(g.model.remap_banks), yes_no(g.record["remap_pending"]))),
    field("remapped_rows.failure", "", lambda g: when(bool(g.model.remap_banks), yes_no(g.record["remap_failure"]))),
    # N/A off an NVSwitch board, as on the real single H100 (PCIe); on one (HGX), as -q's Fabric section says.
    field("fabric.state", "", lambda g: g.record.get("fabric_state")),
    field("fabric.status", "", lambda g: g.record.get("fabric_status")),
    field("temperature.gpu", "", lambda g: g.temperature),
    field("temperature.gpu.tlimit", "",
          lambda g: g.model.thermal.tlimit_total and g.model.thermal.tlimit_total - g.temperature),
    field("temperature.memory", "", lambda g: g.memory_temperature),
    *power_fields(),
    *clock_fields(),
    field("mig.mode.current", "", lambda g: mode_word(mig_on(g.record))),
    field("mig.mode.pending", "", lambda g: mode_word(mig_pending(g.record))),
]

# --query-supported-clocks: one row per (memory, graphics) pair; the GPU's own columns as named.
SUPPORTED_CLOCK_FIELDS = [
    field("timestamp", "", lambda g, pair: csv_timestamp()),
    field("gpu_name|name", "", lambda g, pair: g.model.name),
    field("gpu_bus_id|pci.bus_id", "", lambda g, pair: g.bus_id),
    field("gpu_serial|serial", "", lambda g, pair: g.record["serial"]),
    field("gpu_uuid|uuid", "", lambda g, pair: g.uuid),
    field("memory|mem", "MHz", lambda g, pair: pair[0]),
    field("graphics|gr", "MHz", lambda g, pair: pair[1]),
]

REMAPPED_ROW_FIELDS = [
    field("timestamp", "", lambda g: csv_timestamp()),
    field("gpu_name", "", lambda g: g.model.name),
    field("gpu_bus_id", "", lambda g: g.bus_id),
    field("gpu_serial", "", lambda g: g.record["serial"]),
    field("gpu_uuid", "", lambda g: g.uuid),
    *[f for f in GPU_FIELDS if f.names[0].startswith("remapped_rows.")],
]

COMPUTE_APP_FIELDS = [  # a row per process on a GPU (gpusim fault GPU process: apps.py); get: (Gpu, app)
    field("timestamp", "", lambda g, app: csv_timestamp()), field("gpu_name", "", lambda g, app: g.model.name),
    field("gpu_bus_id", "", lambda g, app: g.bus_id), field("gpu_serial", "", lambda g, app: g.record["serial"]),
    field("gpu_uuid", "", lambda g, app: g.uuid), field("pid", "", lambda g, app: app["pid"]),
    field("process_name|name", "", lambda g, app: app["name"]),
    field("used_gpu_memory|used_memory", "MiB", lambda g, app: app["used_mib"]),
]


# --- a query: its fields looked up, its rows printed as CSV --------------------------------------------


def lookup_fields(spec: str, table: list) -> list:
    by_name = {name: f for f in table for name in f.names}
    names = [name.strip() for name in spec.split(",")]
    for name in names:
        if name not in by_name:
            raise Exit(BAD_FIELD.format(name=name), RC_INVALID)
    return [by_name[name] for name in names]


def csv_cell(value, unit: str, nounits: bool) -> str:
    if value is None:
        return "[N/A]"
    if isinstance(value, Special):
        return f"[{value}]"
    if isinstance(value, float):
        text = f"{value:.2f}"
    else:
        text = str(value)
    return text if nounits or not unit or isinstance(value, str) else f"{text} {unit}"


def parse_format(spec: str | None) -> set:
    if spec is None:
        raise Exit(f'"--format=" switch is missing. {HELP_HINT}\n', RC_INVALID)
    options = {part.strip() for part in spec.split(",")}
    if "csv" not in options or not options <= {"csv", "noheader", "nounits"}:
        raise Exit(INVALID_COMBINATION, RC_INVALID)
    return options


def render_csv(fields: list, rows: list, options: set) -> str:
    """rows: one list of raw values per row, in field order."""
    nounits = "nounits" in options
    lines = []
    if "noheader" not in options:
        lines.append(", ".join(f.names[0] + (f" [{f.unit}]" if f.unit else "") for f in fields))
    for row in rows:
        lines.append(", ".join(csv_cell(v, f.unit, nounits) for f, v in zip(fields, row)))
    return "".join(line + "\n" for line in lines)


def query_gpus(gpus: list, spec: str, fmt: str | None) -> str:
    fields = lookup_fields(spec, GPU_FIELDS)
    options = parse_format(fmt)
    return render_csv(fields, [[f.get(g) for f in fields] for g in gpus], options)


def query_supported_clocks(gpus: list, spec: str, fmt: str | None) -> str:
    fields = lookup_fields(spec, SUPPORTED_CLOCK_FIELDS)
    options = parse_format(fmt)
    rows = [[f.get(g, (memory, graphics)) for f in fields]
            for g in gpus for memory, graphics_list in g.model.supported_clocks for graphics in graphics_list]
    return render_csv(fields, rows, options)


def query_remapped_rows(gpus: list, spec: str, fmt: str | None) -> str:
    fields = lookup_fields(spec, REMAPPED_ROW_FIELDS)
    options = parse_format(fmt)
    return render_csv(fields, [[f.get(g) for f in fields] for g in gpus], options)


def query_compute_apps(gpus: list, spec: str, fmt: str | None) -> str:
    fields = lookup_fields(spec, COMPUTE_APP_FIELDS)
    rows = [[f.get(g, app) for f in fields] for g in gpus if not g.lost for app in running(g.record)]
    return render_csv(fields, rows, parse_format(fmt))
