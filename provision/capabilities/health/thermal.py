"""How far each GPU runs from the temperatures where it slows down and shuts down (`nvidia-smi -q -d TEMPERATURE`).

Two layouts, by driver generation (real captures):
- absolute thresholds (V100 SXM2, driver 418.67, ../shared/real-outputs/smi-q-full/v100-sxm2-32gb-traverse-gpu0.txt):
  "GPU Current Temp : 38 C", "GPU Shutdown Temp : 90 C", "GPU Slowdown Temp : 87 C", "GPU Max Operating Temp";
- margins to T.Limit (H100, driver 580.159.04, ../shared/real-gpu/h100-80gb-hbm3/smi-q.txt): "GPU T.Limit Temp :
  51 C" is how far the GPU is below its limit, and "GPU Shutdown T.Limit Temp : -8 C", "GPU Slowdown T.Limit Temp :
  -2 C" are where, on that scale, it shuts down and slows down; the Windows 610 driver
  (smi-q-full/rtx4090-geforce-windows-wddm.txt) names them "GPU Current T.Limit Temp" and "... Specification".
Either way the headroom is the same thing: degrees C until slowdown (and until shutdown). "N/A" is unknown.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_GPU = re.compile(r"GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\s*")
_DEGREES = re.compile(r"(-?\d+(?:\.\d+)?) C")


@dataclass(frozen=True)
class Thermal:
    """One GPU's temperature and its headroom, in degrees C; None where nvidia-smi says N/A."""

    bus_id: str  # as -q prints it: "00000000:01:00.0"
    current: float | None = None  # the GPU's temperature (absolute layout only)
    to_slowdown: float | None = None
    to_shutdown: float | None = None


def _degrees(value: str) -> float | None:
    match = _DEGREES.fullmatch(value.strip())
    return float(match.group(1)) if match else None


def _headroom(values: dict[str, float | None], bus_id: str) -> Thermal:
    current, tlimit = values.get("GPU Current Temp"), values.get("GPU T.Limit Temp")
    if tlimit is None:
        tlimit = values.get("GPU Current T.Limit Temp")

    def to(kind: str) -> float | None:
        on_tlimit = values.get(f"GPU {kind} T.Limit Temp", values.get(f"GPU {kind} T.Limit Temp Specification"))
        if tlimit is not None and on_tlimit is not None:
            return tlimit - on_tlimit  # both below the limit: the distance between them
        absolute = values.get(f"GPU {kind} Temp")
        return absolute - current if absolute is not None and current is not None else None

    return Thermal(bus_id, current, to("Slowdown"), to("Shutdown"))


def parse(text: str) -> dict[str, Thermal]:
    """bus id -> Thermal, for each GPU of the report (read inside its Temperature section only)."""
    found: dict[str, dict[str, float | None]] = {}
    bus = None
    section = None  # the indentation of "Temperature" while inside it
    for line in text.expandtabs().splitlines():
        header = _GPU.fullmatch(line)
        if header:
            bus, section = header.group(1), None
            found[bus] = {}
            continue
        if bus is None or not line.strip():
            continue
        depth = len(line) - len(line.lstrip())
        key, _, value = (part.strip() for part in line.partition(":"))
        if key == "Temperature" and not value:
            section = depth
        elif section is not None and depth <= section:
            section = None
        elif section is not None:
            found[bus][key] = _degrees(value)
    return {bus: _headroom(values, bus) for bus, values in found.items()}
