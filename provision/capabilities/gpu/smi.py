"""Parsers for nvidia-smi output. Pure functions over text, tested against real captures.

Real output is messier than the happy path: old drivers and GeForce cards print
"[Not Supported]" where a number should be, a GPU that fell off the bus turns
into an error line or "[GPU is lost]" cells beside the GPUs that still answer,
and an old driver refuses a field it does not know. A parser here reads what it
can, per field and per GPU, and says what it could not; it never lets one bad
value or one lost GPU hide the rest.
"""

from __future__ import annotations

import functools
import re
import shlex
from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple

from provision.capabilities.gpu.model import ClockPair, GpuFacts, LostGpu

# Every way nvidia-smi says "no value here" in a CSV cell: not available, not supported, or an NVML
# error for this field (bracketed by current drivers, bare by some old ones). Such a cell is None, silently.
MISSING = frozenset({
    "", "N/A", "[N/A]", "Not Supported", "[Not Supported]", "Unknown Error", "[Unknown Error]",
    "[GPU is lost]", "[GPU requires reset]", "[Insufficient Permissions]",
    "[Requested functionality has been deprecated]",
})
# Cells that speak for the whole GPU, not one field: it cannot be read or tuned until repaired.
REQUIRES_RESET = "[GPU requires reset]"  # the one of them a GPU reset brings back
GPU_GONE = frozenset({"[GPU is lost]", REQUIRES_RESET})


class ParseError(ValueError):
    """nvidia-smi printed something we do not understand."""


def read_text(value: str) -> str | None:
    return None if value in MISSING else value


def read_number(value: str) -> float | None:
    """A number with or without its unit ("700.00 W" or "700.00"). Raises ValueError on anything else."""
    if value in MISSING:  # before cutting the unit: "[Not Supported]" would become "[Not"
        return None
    return float(value.split(" ")[0])


def read_int(value: str) -> int | None:
    number = read_number(value)
    return None if number is None else int(number)


def _flag(yes: str, no: str) -> Callable[[str], bool | None]:
    def read(value: str) -> bool | None:
        if value in MISSING:
            return None
        if value not in (yes, no):
            raise ValueError(value)
        return value == yes
    return read


_enabled = _flag("Enabled", "Disabled")
_yes = _flag("Yes", "No")


def read_word(value: str) -> str | None:
    """ "Exclusive_Process" (compute_mode) -> "exclusive_process": the word as the settings write it."""
    text = read_text(value)
    return None if text is None else text.lower()


def read_bitmask(value: str) -> int | None:
    """ "0x0000000000000001" (clocks_event_reasons.active) -> 1."""
    if value in MISSING:
        return None
    if not value.lower().startswith("0x"):
        raise ValueError(value)
    return int(value, 16)


class QueryField(NamedTuple):
    """One --query-gpu field: what we ask for, where it goes in GpuFacts, how its cell reads."""

    name: str  # as we ask for it
    attr: str  # the GpuFacts attribute ("driver_version" goes to NvidiaFacts)
    read: Callable[[str], object]
    # The names nvidia-smi may print in the CSV header, where they differ from `name` (--help-query-gpu):
    # drivers rename fields ("clocks_throttle_reasons" became "clocks_event_reasons" in the header).
    shown_as: tuple[str, ...] = ()

    def header_in(self, columns: list[str]) -> str | None:
        """This field's column among `columns`, under whichever name this driver prints; None if absent."""
        return next((name for name in (*self.shown_as, self.name) if name in columns), None)


# The --query-gpu fields we gather. One table so the command and the parser cannot drift.
QUERY_FIELDS: list[QueryField] = [
    QueryField("index", "index", read_int),
    QueryField("uuid", "uuid", read_text),
    QueryField("name", "name", read_text),
    QueryField("pci.bus_id", "bus_id", read_text),
    QueryField("compute_cap", "compute_cap", read_text),
    QueryField("driver_version", "driver_version", read_text),
    QueryField("persistence_mode", "persistence", _enabled),
    QueryField("power.limit", "power_limit", read_number),
    QueryField("power.default_limit", "power_default", read_number),
    QueryField("power.min_limit", "power_min", read_number),
    QueryField("power.max_limit", "power_max", read_number),
    QueryField("enforced.power.limit", "power_enforced", read_number),
    QueryField("clocks.applications.graphics", "app_clock_sm", read_int),
    QueryField("clocks.applications.memory", "app_clock_mem", read_int),
    QueryField("clocks.default_applications.graphics", "default_app_clock_sm", read_int),
    QueryField("clocks.default_applications.memory", "default_app_clock_mem", read_int),
    QueryField("clocks.sm", "clock_sm", read_int, shown_as=("clocks.current.sm",)),
    QueryField("clocks.mem", "clock_mem", read_int, shown_as=("clocks.current.memory",)),
    QueryField("clocks.max.graphics", "max_clock_sm", read_int),
    QueryField("clocks.max.memory", "max_clock_mem", read_int),
    QueryField("pcie.link.gen.current", "pcie_gen_current", read_int),
    QueryField("pcie.link.gen.max", "pcie_gen_max", read_int),
    QueryField("pcie.link.width.current", "pcie_width_current", read_int),
    QueryField("pcie.link.width.max", "pcie_width_max", read_int),
    # Health, for verify. The old field name: every driver knows it; new ones print the new name.
    QueryField("clocks_throttle_reasons.active", "clock_events_active", read_bitmask,
               shown_as=("clocks_event_reasons.active",)),
    QueryField("ecc.mode.current", "ecc_enabled", _enabled),
    # The modes (capabilities/gpu/modes.py). An older driver that does not know a field is asked again without it
    # (query_gpu_snippet): the field is None and the notes say so.
    QueryField("ecc.mode.pending", "ecc_pending", _enabled),
    QueryField("compute_mode", "compute_mode", read_word),
    QueryField("mig.mode.current", "mig_mode", _enabled),
    QueryField("mig.mode.pending", "mig_pending", _enabled),
    QueryField("ecc.errors.uncorrected.volatile.total", "ecc_uncorrected", read_int),  # since the driver loaded
    QueryField("retired_pages.pending", "retired_pages_pending", _yes),  # pre-Ampere page retirement
    QueryField("remapped_rows.pending", "remap_pending", _yes),  # Ampere and newer: row remapping
    QueryField("remapped_rows.failure", "remap_failure", _yes),
    # NVSwitch systems (HGX): the GPU's registration with the fabric nvidia-fabricmanager sets up (drivers 5xx).
    QueryField("fabric.state", "fabric_state", read_text),
    QueryField("fabric.status", "fabric_status", read_text),
    # The recovery the driver asks for (drivers 565+; capabilities/health/recovery.py): an older driver refuses it.
    QueryField("gpu_recovery_action", "recovery_action", read_word),
]
# Without these a row cannot name its GPU: it is reported as lost, not tuned.
IDENTITY = ("index", "uuid", "name", "bus_id")


QUERY_FORMAT = "--format=csv,nounits"  # with a header: the parser maps cells by column name, never by position
QUERY_GPU_ARGV = ["nvidia-smi", "--query-gpu=" + ",".join(f.name for f in QUERY_FIELDS), QUERY_FORMAT]
NOT_A_FIELD = "is not a valid field to query"
def query_gpu_snippet(fields: list[str] | tuple[str, ...]) -> str:
    """`nvidia-smi --query-gpu=FIELDS` as POSIX sh, leaving the fields this driver answered in $f, its output in
    $out and its exit status in $rc. A driver that does not know a field refuses the whole query ('Field
    "remapped_rows.pending" is not a valid field to query.', no rows, exit 2): ask again without that field,
    until it answers. Each field is dropped at most once, so this ends."""
    return (
        f"f={shlex.quote(','.join(fields))}; "
        "while :; do "
        f"out=$(nvidia-smi --query-gpu=\"$f\" {QUERY_FORMAT} 2>&1); rc=$?; "
        f"case $out in *'{NOT_A_FIELD}'*) ;; *) break;; esac; "
        "bad=${out#*'Field \"'}; bad=${bad%%'\"'*}; "
        "case ,$f, in *,\"$bad\",*) ;; *) break;; esac; "
        "f=,$f,; f=${f%%,\"$bad\",*},${f#*,\"$bad\",}; f=${f#,}; f=${f%,}; "
        "done"
    )


# The query as the facts batch runs it.
QUERY_GPU_SNIPPET = (query_gpu_snippet([f.name for f in QUERY_FIELDS])
                     + "; printf '%s\\n' \"$out\"; (exit $rc)")
SUPPORTED_CLOCKS_ARGV = [
    "nvidia-smi",
    "--query-supported-clocks=gpu_uuid,memory,graphics",
    "--format=csv,noheader,nounits",
]


def split_csv_row(line: str) -> list[str]:
    """nvidia-smi separates CSV fields with ", " and does not quote."""
    return [cell.strip() for cell in line.split(", ")]


# --- --query-* --format=csv, by column name ---------------------------------------------------

_HEADER_CELL = re.compile(r"[a-z][a-z0-9_.]*(?: \[[^\]]*\])?")  # "clocks.current.sm [MHz]" even with nounits
_BUS_ID = re.compile(r"(?<![0-9A-Fa-f])[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]")


@dataclass
class CsvTable:
    columns: list[str]  # header names without their unit
    rows: list[dict[str, str]]  # column -> cell
    other_lines: list[str]  # neither the header nor a row: nvidia-smi's messages


def read_query_csv(text: str) -> CsvTable:
    """Read `nvidia-smi --query-...=... --format=csv[,nounits]` output by column name.

    The header is the first line made only of field names; a line with as many cells as the header
    is a row; anything else (a GPU nvidia-smi cannot reach, before or among the rows) is kept apart.
    """
    table = CsvTable([], [], [])
    for line in text.splitlines():
        if not line.strip():
            continue
        cells = split_csv_row(line)
        if not table.columns and all(_HEADER_CELL.fullmatch(cell) for cell in cells):
            table.columns = [cell.split(" [")[0] for cell in cells]
        elif table.columns and len(cells) == len(table.columns):
            table.rows.append(dict(zip(table.columns, cells)))
        else:
            table.other_lines.append(line.strip())
    return table


# --- --query-gpu: our fields into GpuFacts ---------------------------------------------------


@dataclass
class GpuQuery:
    """What one --query-gpu output says: the GPUs it could read and the ones it could not."""

    gpus: list[GpuFacts] = field(default_factory=list)
    driver_version: str | None = None
    lost: list[LostGpu] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # values and lines not understood, fields not reported


def read_query_gpu(text: str) -> GpuQuery:
    """Parse QUERY_GPU_SNIPPET's output. Raises ParseError only when the header lacks a GPU's identity."""
    table = read_query_csv(text)
    result = GpuQuery()
    for line in table.other_lines:
        bus = _BUS_ID.search(line)
        if bus:  # "Unable to determine the device handle for GPU0000:41:00.0: Unknown Error"
            result.lost.append(LostGpu(bus_id=bus.group(), message=line))
        else:
            result.notes.append(line)
    if not table.columns:
        return result  # nothing but messages: driver not loaded, NVML mismatch, every GPU lost
    headers = {f.name: f.header_in(table.columns) for f in QUERY_FIELDS}
    fields = [f for f in QUERY_FIELDS if headers[f.name]]
    absent = [f for f in QUERY_FIELDS if f not in fields]
    nameless = [f.name for f in absent if f.attr in IDENTITY]
    if nameless:  # another query's output: never guess which column is which
        raise ParseError(f"nvidia-smi --query-gpu printed no {', '.join(nameless)} column")
    if absent:  # an older driver, asked again without the fields it refused
        result.notes.append(f"not reported by this driver: {', '.join(f.name for f in absent)}")
    for row in table.rows:
        _read_gpu_row({name: row[header] for name, header in headers.items() if header}, fields, result)
    return result


def _read_gpu_row(row: dict[str, str], fields: list[QueryField], into: GpuQuery) -> None:
    """row: field name -> cell."""
    values: dict[str, Any] = {f.attr: None for f in QUERY_FIELDS}
    unreadable = []
    for f in fields:
        try:
            values[f.attr] = f.read(row[f.name])
        except ValueError:  # neither a value nor a known "no value": None, and say so
            unreadable.append(f"{f.name} {row[f.name]!r}")
    why_lost = _why_lost(row, values)
    if why_lost:
        into.lost.append(LostGpu(bus_id=values["bus_id"], uuid=values["uuid"], index=values["index"],
                                 message=why_lost))
        return
    if unreadable:
        into.notes.append(f"GPU{values['index']}: cannot read {', '.join(unreadable)}")
    into.driver_version = values.pop("driver_version") or into.driver_version
    into.gpus.append(GpuFacts(**values))


def _why_lost(row: dict[str, str], values: dict[str, object]) -> str | None:
    """Why this row is not a GPU we can tune, in nvidia-smi's words; None when it is."""
    gone = sorted({cell.strip("[]") for cell in row.values() if cell in GPU_GONE})
    if gone:
        return ", ".join(gone)
    nameless = [f"{f.name} {row.get(f.name)!r}" for f in QUERY_FIELDS
                if f.attr in IDENTITY and values[f.attr] is None]
    return f"cannot read {', '.join(nameless)}" if nameless else None


def parse_query_gpu(text: str) -> tuple[list[GpuFacts], str | None]:
    """The readable GPUs and the driver version of a --query-gpu output (read_query_gpu says more)."""
    result = read_query_gpu(text)
    return result.gpus, result.driver_version


# --- supported clocks ------------------------------------------------------------------------


def parse_supported_clocks_csv(text: str) -> dict[str, list[ClockPair]]:
    """Parse SUPPORTED_CLOCKS_ARGV output: uuid -> [(mem, sm)], in nvidia-smi's order.

    GPUs that report no supported clocks ("[N/A]" rows) get an empty list.
    """
    pairs: dict[str, list[ClockPair]] = {}
    for line in text.splitlines():  # a few hundred rows per GPU, on every read of a host: kept plain
        cells = line.split(",")
        if len(cells) != 3 or not (uuid := cells[0].strip()).startswith("GPU-"):
            continue
        mem, sm = cells[1].strip(), cells[2].strip()
        bucket = pairs.setdefault(uuid, [])
        if mem.isdigit() and sm.isdigit():
            bucket.append(_clock_pair(mem, sm))
    return pairs


@functools.lru_cache(maxsize=8192)
def _clock_pair(mem: str, sm: str) -> ClockPair:
    """One frozen pair for each value: the same few hundred pairs repeat for every GPU of every host."""
    return ClockPair(int(mem), int(sm))


_Q_GPU_HEADER = re.compile(r"GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\s*")


def parse_supported_clocks_q(text: str) -> dict[str, list[ClockPair]]:
    """Parse `nvidia-smi -q -d SUPPORTED_CLOCKS`: bus id -> [(mem, sm)].

    Each GPU starts at a non-indented "GPU 00000000:3B:00.0" line. Pairs are read only inside its
    "Supported Clocks" section, where Graphics lines nest under their Memory line; a GPU without
    support prints "Supported Clocks : N/A" (an empty list). Any other -q output (the full report has
    application and max clocks, never this section) gives no GPU at all.
    """
    pairs: dict[str, list[ClockPair]] = {}
    bus = None
    section_depth = None  # the indentation of "Supported Clocks" while inside it
    mem = None
    for line in text.expandtabs().splitlines():
        header = _Q_GPU_HEADER.fullmatch(line)
        if header:
            bus, section_depth = header.group(1), None
            continue
        if not line.strip() or bus is None:
            continue
        depth = len(line) - len(line.lstrip())
        key, _, value = (part.strip() for part in line.partition(":"))
        if key == "Supported Clocks":
            pairs[bus], section_depth, mem = [], depth, None
        elif section_depth is not None and depth <= section_depth:
            section_depth = None  # the next section of this GPU
        elif section_depth is not None:
            number = value.removesuffix(" MHz")
            if key == "Memory" and number.isdigit():
                mem = int(number)
            elif key == "Graphics" and number.isdigit() and mem is not None:
                pairs[bus].append(ClockPair(mem, int(number)))
    return pairs


# --- the rest --------------------------------------------------------------------------------


def parse_clock_records(text: str) -> dict[str, dict[str, str]]:
    """Parse the locked-clock records provision keeps (see tuning.py): "UUID key=value ..." lines -> uuid -> {key: value}."""
    records: dict[str, dict[str, str]] = {}
    for line in text.splitlines():
        uuid, *words = line.split() or [""]  # a blank line is no record, not a crash
        if uuid.startswith("GPU-"):
            records[uuid] = dict(w.split("=", 1) for w in words if "=" in w)
    return records


def parse_gpu_list(text: str) -> list[tuple[int, str, str]]:
    """Parse `nvidia-smi -L`: [(index, name, uuid)]."""
    gpus = []
    for line in text.splitlines():
        if not line.startswith("GPU ") or "(UUID: " not in line:
            continue
        head, _, uuid = line.partition(" (UUID: ")
        index, _, name = head[4:].partition(": ")
        gpus.append((int(index), name, uuid.rstrip(")")))
    return gpus
