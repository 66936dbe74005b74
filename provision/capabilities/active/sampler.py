"""The sampler of an active run: one `nvidia-smi --query-gpu ... -lms N` beside the load, every GPU a row per
interval, read back into Samples per GPU.

The fields are those a brownout, a bad riser or heat shows in: power (power.draw, which newer drivers average
over a second, and power.draw.instant where the driver has it: the transients a PSU sees), the enforced cap,
SM and memory clocks, temperature, the clock event reasons (bitmask), the PCIe link's generation and width
under load, utilization. A driver that does not know a field refuses the whole query ("is not a valid field"):
the run asks again without it, as the facts batch does (gpu/smi.py), so older drivers sample what they have.

The rows are --query-gpu's CSV (gpu/smi.py reads it by column name; a repeated header is skipped). A GPU that
falls off the bus mid-run prints "[GPU is lost]" cells, or its row goes: both are kept (Sample.lost, and the
GPU's last seen time).
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Callable, TypeVar

from provision.capabilities.gpu import smi

SAMPLE_FIELDS = ("timestamp", "uuid", "pci.bus_id", "power.draw", "power.draw.instant", "enforced.power.limit",
                 "clocks.sm", "clocks.mem", "temperature.gpu", "clocks_throttle_reasons.active",
                 "pcie.link.gen.current", "pcie.link.width.current", "utilization.gpu")
SHOWN_AS = {"clocks.sm": "clocks.current.sm", "clocks.mem": "clocks.current.memory",
            "clocks_throttle_reasons.active": "clocks_event_reasons.active"}  # header names newer drivers print
TIMESTAMP = "%Y/%m/%d %H:%M:%S.%f"  # "2026/11/22 10:41:07.512"


@dataclass(frozen=True)
class Sample:
    """One GPU at one instant. None: the driver did not say ([N/A], or a field it does not have)."""

    t: float  # seconds since the first sample
    uuid: str
    bus_id: str | None
    power: float | None  # power.draw (W)
    power_instant: float | None  # power.draw.instant (W)
    cap: float | None  # enforced.power.limit (W)
    sm: int | None  # MHz
    mem: int | None
    temp: int | None  # C
    reasons: int | None  # clock event reasons bitmask
    pcie_gen: int | None
    pcie_width: int | None
    util: int | None  # %
    lost: str = ""  # "GPU is lost" where the row said so

    @property
    def peak_power(self) -> float | None:
        """The instant reading where there is one, else the (averaged) draw."""
        return self.power_instant if self.power_instant is not None else self.power


def command(interval_ms: int = 100) -> list[str]:
    """The sampler as an argument list (the run drops fields the driver refuses: gpu/smi.py's retry)."""
    return ["nvidia-smi", "--query-gpu=" + ",".join(SAMPLE_FIELDS), smi.QUERY_FORMAT, "-lms", str(interval_ms)]


def _cell(row: dict[str, str], name: str) -> str:
    return row.get(name, row.get(SHOWN_AS.get(name, ""), "[N/A]"))


Read = TypeVar("Read")


def _read(reader: Callable[[str], Read], value: str) -> Read | None:
    try:
        return reader(value)
    except ValueError:
        return None  # a value we cannot read is no value: the judge says what it lacked


def parse(text: str) -> list[Sample]:
    """The sampler's output, in order. Rows without a UUID or a timestamp are dropped (a message line)."""
    table = smi.read_query_csv(text)
    samples: list[Sample] = []
    start: datetime.datetime | None = None
    for row in table.rows:
        if all(cell == column for column, cell in row.items()):
            continue  # the header again
        uuid = smi.read_text(_cell(row, "uuid"))
        try:
            when = datetime.datetime.strptime(_cell(row, "timestamp"), TIMESTAMP)
        except ValueError:
            continue
        if uuid is None:
            continue
        start = start or when
        lost = sorted({cell.strip("[]") for cell in row.values() if cell in smi.GPU_GONE})
        samples.append(Sample(
            (when - start).total_seconds(), uuid, smi.read_text(_cell(row, "pci.bus_id")),
            _read(smi.read_number, _cell(row, "power.draw")), _read(smi.read_number, _cell(row, "power.draw.instant")),
            _read(smi.read_number, _cell(row, "enforced.power.limit")), _read(smi.read_int, _cell(row, "clocks.sm")),
            _read(smi.read_int, _cell(row, "clocks.mem")), _read(smi.read_int, _cell(row, "temperature.gpu")),
            _read(smi.read_bitmask, _cell(row, "clocks_throttle_reasons.active")),
            _read(smi.read_int, _cell(row, "pcie.link.gen.current")),
            _read(smi.read_int, _cell(row, "pcie.link.width.current")),
            _read(smi.read_int, _cell(row, "utilization.gpu")), ", ".join(lost)))
    return samples


def by_gpu(samples: list[Sample]) -> dict[str, list[Sample]]:
    """UUID -> its samples in time order, GPUs in the order first seen."""
    grouped: dict[str, list[Sample]] = {}
    for sample in samples:
        grouped.setdefault(sample.uuid, []).append(sample)
    return grouped
