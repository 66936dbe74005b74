"""Parsers for nvidia-smi output. Pure functions over text, tested against real captures."""

from __future__ import annotations

from provision.facts.model import ClockPair, GpuFacts

# The --query-gpu fields we gather, in order, with the GpuFacts attribute and
# converter for each. One table so the command and the parser cannot drift.
_NOT_AVAILABLE = {"[N/A]", "N/A", "[Not Supported]", "Not Supported", ""}


def _text(value: str) -> str | None:
    return None if value in _NOT_AVAILABLE else value


def _float(value: str) -> float | None:
    value = value.split(" ")[0]  # tolerate units ("700.00 W") as well as nounits
    return None if value in _NOT_AVAILABLE else float(value)


def _int(value: str) -> int | None:
    number = _float(value)
    return None if number is None else int(number)


def _enabled(value: str) -> bool | None:
    return {"Enabled": True, "Disabled": False}.get(value)


QUERY_FIELDS: list[tuple[str, str, object]] = [
    ("index", "index", int),
    ("uuid", "uuid", str),
    ("name", "name", str),
    ("pci.bus_id", "bus_id", str),
    ("compute_cap", "compute_cap", _text),
    ("driver_version", "driver_version", _text),
    ("persistence_mode", "persistence", _enabled),
    ("power.limit", "power_limit", _float),
    ("power.default_limit", "power_default", _float),
    ("power.min_limit", "power_min", _float),
    ("power.max_limit", "power_max", _float),
    ("enforced.power.limit", "power_enforced", _float),
    ("clocks.applications.graphics", "app_clock_sm", _int),
    ("clocks.applications.memory", "app_clock_mem", _int),
    ("clocks.default_applications.graphics", "default_app_clock_sm", _int),
    ("clocks.default_applications.memory", "default_app_clock_mem", _int),
    ("clocks.sm", "clock_sm", _int),
    ("clocks.mem", "clock_mem", _int),
    ("clocks.max.graphics", "max_clock_sm", _int),
    ("clocks.max.memory", "max_clock_mem", _int),
    ("pcie.link.gen.current", "pcie_gen_current", _int),
    ("pcie.link.gen.max", "pcie_gen_max", _int),
    ("pcie.link.width.current", "pcie_width_current", _int),
    ("pcie.link.width.max", "pcie_width_max", _int),
]

QUERY_GPU_ARGV = [
    "nvidia-smi",
    "--query-gpu=" + ",".join(field for field, _, _ in QUERY_FIELDS),
    "--format=csv,noheader,nounits",
]
SUPPORTED_CLOCKS_ARGV = [
    "nvidia-smi",
    "--query-supported-clocks=gpu_uuid,memory,graphics",
    "--format=csv,noheader,nounits",
]


class ParseError(ValueError):
    """nvidia-smi printed something we do not understand."""


def split_csv_row(line: str) -> list[str]:
    """nvidia-smi separates CSV fields with ", " and does not quote."""
    return [cell.strip() for cell in line.split(", ")]


def parse_query_gpu(text: str) -> tuple[list[GpuFacts], str | None]:
    """Parse QUERY_GPU_ARGV output. Returns the GPUs and the driver version."""
    gpus: list[GpuFacts] = []
    driver = None
    for line in text.splitlines():
        if not line.strip():
            continue
        cells = split_csv_row(line)
        if len(cells) != len(QUERY_FIELDS):
            raise ParseError(
                f"expected {len(QUERY_FIELDS)} fields from nvidia-smi --query-gpu, got {len(cells)}: {line!r}"
            )
        values: dict[str, object] = {}
        for (field, attr, convert), cell in zip(QUERY_FIELDS, cells):
            try:
                values[attr] = convert(cell)  # type: ignore[operator]
            except ValueError as exc:
                raise ParseError(f"{field}: cannot read {cell!r}") from exc
        driver = values.pop("driver_version") or driver  # type: ignore[assignment]
        gpus.append(GpuFacts(**values))  # type: ignore[arg-type]
    return gpus, driver


def parse_supported_clocks_csv(text: str) -> dict[str, list[ClockPair]]:
    """Parse SUPPORTED_CLOCKS_ARGV output: uuid -> [(mem, sm)], in nvidia-smi's order.

    GPUs that report no supported clocks ("[N/A]" rows) get an empty list.
    """
    pairs: dict[str, list[ClockPair]] = {}
    for line in text.splitlines():
        cells = split_csv_row(line)
        if len(cells) != 3 or not cells[0].startswith("GPU-"):
            continue
        uuid, mem, sm = cells
        bucket = pairs.setdefault(uuid, [])
        if mem.isdigit() and sm.isdigit():
            bucket.append(ClockPair(int(mem), int(sm)))
    return pairs


def parse_supported_clocks_q(text: str) -> dict[str, list[ClockPair]]:
    """Parse `nvidia-smi -q -d SUPPORTED_CLOCKS`: bus id -> [(mem, sm)].

    The layout nests Graphics lines under their Memory line; a GPU without
    support prints "Supported Clocks : N/A".
    """
    pairs: dict[str, list[ClockPair]] = {}
    bus = None
    mem = None
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("GPU ") and ":" in stripped:
            bus = stripped[4:].strip()
            pairs[bus] = []
            mem = None
            continue
        if bus is None or ":" not in stripped:
            continue
        key, _, value = (part.strip() for part in stripped.partition(":"))
        number = value.removesuffix(" MHz")
        if key == "Memory" and number.isdigit():
            mem = int(number)
        elif key == "Graphics" and number.isdigit() and mem is not None:
            pairs[bus].append(ClockPair(mem, int(number)))
    return pairs


def parse_clock_records(text: str) -> dict[str, dict[str, str]]:
    """Parse the locked-clock records provision keeps (see tuning.py): "UUID key=value ..." lines -> uuid -> {key: value}."""
    records: dict[str, dict[str, str]] = {}
    for line in text.splitlines():
        uuid, *words = line.split()
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
