"""MIG facts as the real H200 lists them (tests/fixtures/real/h200-modes: its -lgip and -lgipp), with the GPU and
compute instances a test gives by profile name: `h200_mig(["3g.71gb", "3g.71gb"])` is one H200 whose MIG mode is on
with those two GPU instances, each with its default compute instance, placed as the driver would place them."""

from __future__ import annotations

from typing import Iterable

from realdata import REAL_H200_MODES, capture

from builders.gpus import Card, gpu
from provision.capabilities.gpu import mig_listings
from provision.capabilities.gpu.mig_fit import fit
from provision.capabilities.gpu.mig_model import ComputeInstance, GpuInstance, MigFacts, MigGpu, default_compute_profile
from provision.capabilities.gpu.model import GpuFacts

# The H200 of the captures (its name as nvidia-smi prints it; power range as tests/fixtures/real/h200/qgpu.txt).
H200 = Card("NVIDIA H200", "9.0", 700.0, 200.0, 700.0, "2335")


def h200_gpu(index: int = 0, mode: bool = True, pending: bool | None = None, **values: object) -> GpuFacts:
    """An H200 whose MIG mode is `mode` now and `pending` after its next reset (the same by default)."""
    return gpu(index, H200, mig_mode=mode, mig_pending=mode if pending is None else pending, **values)


def h200_mig(layout: Iterable[str] = (), processes: Iterable[str] = (), compute: bool = True) -> MigGpu:
    """The H200's profiles and placements, and GPU instances of these profiles (IDs from 1, as the driver gives
    them), each with its default compute instance unless compute is False."""
    profiles = mig_listings.parse_profiles(capture("mig-lgip.txt", REAL_H200_MODES)[0]).rows[0]
    placements = dict(mig_listings.parse_placements(capture("mig-lgipp.txt", REAL_H200_MODES)[0]).rows[0])
    mig = MigGpu(profiles=profiles, placements=placements, processes=list(processes))
    placed = fit(h200_gpu(), mig, list(layout))
    mig.gpu_instances = [GpuInstance(p.name, p.id, i + 1, where) for i, (p, where) in enumerate(placed)]
    if compute:
        mig.compute_instances = [ComputeInstance(gi.id, default_compute_profile(gi.profile), 0, 0, None)
                                 for gi in mig.gpu_instances]
    return mig


def mig_facts(*gpus: MigGpu) -> MigFacts:
    """The host's MIG facts: these GPUs at indexes 0, 1, ..."""
    return MigFacts(gpus=dict(enumerate(gpus)), instances_read=True)
