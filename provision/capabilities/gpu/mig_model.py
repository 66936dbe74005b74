"""What `nvidia-smi mig` says of a host's MIG-capable GPUs: their GPU instance profiles and placements, the GPU
and compute instances that exist. Keyed by GPU index, as nvidia-smi's listings print it."""

from __future__ import annotations

import re
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Placement:
    """Where an instance sits on the GPU's memory slices: {start}:size in -lgipp, start:size in -lgi."""

    start: int
    size: int

    def overlaps(self, other: Placement) -> bool:
        return self.start < other.start + other.size and other.start < self.start + self.size

    def __str__(self) -> str:
        return f"{self.start}:{self.size}"


@dataclass(frozen=True)
class MigProfile:
    """One GPU instance profile of `nvidia-smi mig -lgip`: "3g.71gb", ID 9, 2 of 2 free."""

    name: str  # without nvidia-smi's "MIG " prefix, as the inventory writes it
    id: int
    free: int | None  # None: nvidia-smi printed no number
    total: int | None
    memory_gib: float | None


@dataclass(frozen=True)
class GpuInstance:
    """One row of `nvidia-smi mig -lgi`."""

    profile: str  # "3g.71gb"
    profile_id: int
    id: int  # the GPU instance ID the driver chose
    placement: Placement


@dataclass(frozen=True)
class ComputeInstance:
    """One row of `nvidia-smi mig -lci`. The default compute instance of a GPU instance (-C) takes all of it and
    has the GPU instance's own name; a smaller one is named for its share ("1c.3g.40gb")."""

    gpu_instance: int
    profile: str
    profile_id: int
    id: int
    placement: Placement | None  # older drivers print no Placement column


def default_compute_profile(gpu_instance_profile: str) -> str:
    """The name -lci gives a GPU instance's default compute instance: the profile's slices and memory, without
    the media-engine suffix ("1g.18gb+me" -> "1g.18gb"), as compute instance profiles have none."""
    return re.split(r"[+-]", gpu_instance_profile, maxsplit=1)[0]


@dataclass
class MigGpu:
    """One MIG-capable GPU: what it supports and, where MIG mode is on, what exists on it."""

    profiles: list[MigProfile] = field(default_factory=list)
    placements: dict[int, list[Placement]] = field(default_factory=dict)  # profile ID -> where it may go
    gpu_instances: list[GpuInstance] = field(default_factory=list)
    compute_instances: list[ComputeInstance] = field(default_factory=list)
    processes: list[str] = field(default_factory=list)  # "pid name" of the compute apps that use it

    def profile(self, name: str) -> MigProfile | None:
        return next((p for p in self.profiles if p.name == name), None)

    def layout(self) -> list[str]:
        """The GPU instances' profile names, ordered as the driver lists them."""
        return [gi.profile for gi in self.gpu_instances]

    def without_default_compute(self) -> list[GpuInstance]:
        """GPU instances that lack their one full compute instance (none made, or split into smaller ones)."""
        by_gi: dict[int, list[ComputeInstance]] = {}
        for ci in self.compute_instances:
            by_gi.setdefault(ci.gpu_instance, []).append(ci)
        return [gi for gi in self.gpu_instances
                if [ci.profile for ci in by_gi.get(gi.id, [])] != [default_compute_profile(gi.profile)]]


@dataclass
class MigFacts:
    """The MIG listings of a host. `gpus` holds the MIG-capable GPUs only (those -lgip lists), by index."""

    gpus: dict[int, MigGpu] = field(default_factory=dict)
    instances_read: bool = False  # -lgi answered with a table or "No MIG-enabled devices found."
    notes: list[str] = field(default_factory=list)  # what nvidia-smi said that is no listing (an error, its exit)
    minors: dict[str, int] = field(default_factory=dict)  # mig-minors (mig_minors.py), read where instances exist
