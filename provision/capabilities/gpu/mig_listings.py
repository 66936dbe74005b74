"""Parsers for `nvidia-smi mig -lgip`, `-lgipp`, `-lgi` and `-lci`: pure functions over their text.

Each table row is matched on its own, so column widths (which differ between drivers) do not matter, and each
table's rows are keyed by the GPU index its first column prints. A line that is no part of a table is nvidia-smi
speaking ("No MIG-enabled devices found.", an error): it is returned as a message, never raised.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from provision.capabilities.gpu.mig_model import ComputeInstance, GpuInstance, MigProfile, Placement

# What -lgi, -lci and -lcip print where no GPU has MIG mode on (exit 0).
NO_MIG_ENABLED = "No MIG-enabled devices found."
# What -lgip prints where no GPU supports MIG (GeForce, L4, L40S; exit 6, as published for those boards).
NO_MIG_SUPPORTED = "No MIG-supported devices found."
# What -lgi and -lci print for a GPU whose MIG mode is on but holds none: "No GPU instances found: Not Found" as
# published from a real A30 (the simulator prints the words alone), so matched by their start.
NO_GPU_INSTANCES, NO_COMPUTE_INSTANCES = "No GPU instances found", "No compute instances found"
STATES = (NO_MIG_ENABLED, NO_MIG_SUPPORTED, NO_GPU_INSTANCES, NO_COMPUTE_INSTANCES)  # answers, not errors


def is_state(message: str) -> bool:
    """Whether nvidia-smi's words say there is nothing to list (an answer), not that it could not list."""
    return message.startswith(tuple(state.rstrip(".") for state in STATES))

Row = TypeVar("Row")

_PROFILE = re.compile(r"^\|\s*(?P<gpu>\d+)\s+MIG\s+(?P<name>\S+)\s+(?P<id>\d+)\s+(?P<free>[^\s/]+)/(?P<total>\S+)"
                      r"\s+(?P<memory>\S+)\s")
_GPU_INSTANCE = re.compile(r"^\|\s*(?P<gpu>\d+)\s+MIG\s+(?P<name>\S+)\s+(?P<profile>\d+)\s+(?P<id>\d+)"
                           r"\s+(?P<start>\d+):(?P<size>\d+)\s*\|$")
_COMPUTE_INSTANCE = re.compile(r"^\|\s*(?P<gpu>\d+)\s+(?P<gi>\d+)\s+MIG\s+(?P<name>\S+)\s+(?P<profile>\d+)"
                               r"\s+(?P<id>\d+)(?:\s+(?P<start>\d+):(?P<size>\d+))?\s*\|$")
_PLACEMENTS = re.compile(r"^GPU\s+(?P<gpu>\d+)\s+Profile ID\s+(?P<id>\d+)\s+Placements?\s*:"
                         r"\s*\{(?P<starts>[\d,\s]*)\}:(?P<size>\d+)\s*$")


@dataclass
class Listing(Generic[Row]):
    """One listing's rows by GPU index, and what nvidia-smi said besides them."""

    rows: dict[int, list[Row]] = field(default_factory=dict)
    messages: list[str] = field(default_factory=list)

    @property
    def no_mig_enabled(self) -> bool:
        return NO_MIG_ENABLED in self.messages

    @property
    def answered(self) -> bool:
        """Rows, or words that say there are none: the listing was read."""
        return bool(self.rows) or any(is_state(m) for m in self.messages)

    def add(self, gpu: int, row: Row) -> None:
        self.rows.setdefault(gpu, []).append(row)


def _number(text: str) -> int | None:
    return int(text) if text.isdigit() else None


def _gib(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _message(line: str) -> str | None:
    """A line that is neither a table's border, header or row nor empty: nvidia-smi's own words."""
    stripped = line.strip()
    return stripped if stripped and stripped[0] not in "|+" else None


def parse_profiles(text: str) -> Listing[MigProfile]:
    """`nvidia-smi mig -lgip`: two lines per profile; the first names it (the second holds CE, JPEG, OFA)."""
    listing: Listing[MigProfile] = Listing()
    for line in text.splitlines():
        match = _PROFILE.match(line)
        if match:
            listing.add(int(match["gpu"]), MigProfile(match["name"], int(match["id"]), _number(match["free"]),
                                                      _number(match["total"]), _gib(match["memory"])))
        elif (said := _message(line)) is not None:
            listing.messages.append(said)
    return listing


def parse_placements(text: str) -> Listing[tuple[int, list[Placement]]]:
    """`nvidia-smi mig -lgipp`: "GPU  0 Profile ID  9 Placements: {0,4}:4" (one start: "Placement : {0}:8").
    Each row is (profile ID, its placements)."""
    listing: Listing[tuple[int, list[Placement]]] = Listing()
    for line in text.splitlines():
        match = _PLACEMENTS.match(line.strip())
        if match:
            size = int(match["size"])
            starts = [int(s) for s in match["starts"].replace(" ", "").split(",") if s]
            listing.add(int(match["gpu"]), (int(match["id"]), [Placement(s, size) for s in starts]))
        elif line.strip():
            listing.messages.append(line.strip())
    return listing


def parse_gpu_instances(text: str) -> Listing[GpuInstance]:
    """`nvidia-smi mig -lgi`: one row per GPU instance, "|   0  MIG 3g.40gb   9   2   4:4   |"."""
    listing: Listing[GpuInstance] = Listing()
    for line in text.splitlines():
        match = _GPU_INSTANCE.match(line.strip())
        if match:
            placement = Placement(int(match["start"]), int(match["size"]))
            listing.add(int(match["gpu"]), GpuInstance(match["name"], int(match["profile"]), int(match["id"]),
                                                       placement))
        elif (said := _message(line)) is not None:
            listing.messages.append(said)
    return listing


def parse_compute_instances(text: str) -> Listing[ComputeInstance]:
    """`nvidia-smi mig -lci`: one row per compute instance, its GPU instance's ID second; older drivers print no
    Placement column."""
    listing: Listing[ComputeInstance] = Listing()
    for line in text.splitlines():
        match = _COMPUTE_INSTANCE.match(line.strip())
        if match:
            placement = Placement(int(match["start"]), int(match["size"])) if match["start"] is not None else None
            listing.add(int(match["gpu"]), ComputeInstance(int(match["gi"]), match["name"], int(match["profile"]),
                                                           int(match["id"]), placement))
        elif (said := _message(line)) is not None:
            listing.messages.append(said)
    return listing
