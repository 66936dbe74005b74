"""Whether a MIG layout fits one GPU, from its facts: each profile one it lists (-lgip), no more of each than it
allows, and every GPU instance a placement of its own (-lgipp) that overlaps no other. A layout that fits gets
its placements pinned, so the driver cannot place one instance where it blocks the next."""

from __future__ import annotations

from typing import Iterator

from provision.capabilities.gpu.mig_model import MigGpu, MigProfile, Placement
from provision.capabilities.gpu.model import GpuFacts
from provision.capabilities.gpu.tuning import Refused, gpu_words

Placed = list[tuple[MigProfile, Placement]]


def profiles_words(mig: MigGpu) -> str:
    """The GPU's profiles as the inventory names them, with their memory slices and how many it takes."""
    return ", ".join(f"{p.name} ({_size(mig, p)} slice{'s' if _size(mig, p) != 1 else ''}, at most {p.total})"
                     for p in mig.profiles)


def _size(mig: MigGpu, profile: MigProfile) -> int | str:
    placements = mig.placements.get(profile.id, [])
    return placements[0].size if placements else "?"


def fit(gpu: GpuFacts, mig: MigGpu | None, layout: list[str]) -> Placed:
    """The layout's GPU instances with a placement each, ordered by it; Refused (naming the GPU, what does not fit
    and the profiles it has) where this GPU cannot take it."""
    asked = f"provision_gpu.mig {layout}"
    if mig is None or not mig.profiles:
        raise Refused(f"{gpu_words(gpu)}: {asked}, but it lists no MIG profile (nvidia-smi mig -lgip): it does not "
                      "support MIG; set mig only for the GPUs that do (an override by model or uuid)", gpu, "mig",
                      "it lists no MIG profile (nvidia-smi mig -lgip): it does not support MIG")
    unknown = sorted({name for name in layout if mig.profile(name) is None})
    if unknown:
        raise Refused(f"{gpu_words(gpu)}: {asked}: it has no GPU instance profile {', '.join(unknown)}; "
                      f"its profiles: {profiles_words(mig)}", gpu, "mig", f"it has no GPU instance profile {', '.join(unknown)}",
                      f"its profiles: {profiles_words(mig)}")
    for name in sorted(set(layout)):
        profile = mig.profile(name)
        if profile is not None and profile.total is not None and layout.count(name) > profile.total:
            raise Refused(f"{gpu_words(gpu)}: {asked}: {layout.count(name)} x {name}, but it takes at most "
                          f"{profile.total}; its profiles: {profiles_words(mig)}", gpu, "mig",
                          f"{layout.count(name)} x {name}, but it takes at most {profile.total}",
                          f"its profiles: {profiles_words(mig)}")
    wanted = [p for p in (mig.profile(n) for n in layout) if p is not None]
    placed = next(_placements(mig, sorted(wanted, key=lambda p: -_slices(mig, p)), []), None)
    if placed is None:
        raise Refused(f"{gpu_words(gpu)}: {asked} does not fit its memory slices (nvidia-smi mig -lgipp): no "
                      f"placement gives each GPU instance slices of its own; its profiles: {profiles_words(mig)}",
                      gpu, "mig", "does not fit its memory slices (nvidia-smi mig -lgipp): no placement gives each GPU "
                      "instance slices of its own", f"its profiles: {profiles_words(mig)}")
    return sorted(placed, key=lambda pair: pair[1].start)


def _slices(mig: MigGpu, profile: MigProfile) -> int:
    return max((p.size for p in mig.placements.get(profile.id, [])), default=0)


def _placements(mig: MigGpu, left: list[MigProfile], taken: Placed) -> Iterator[Placed]:
    """Every way to place the profiles left beside those taken (largest first, so the search stays small)."""
    if not left:
        yield list(taken)
        return
    profile, rest = left[0], left[1:]
    for placement in mig.placements.get(profile.id, []):
        if not any(placement.overlaps(other) for _, other in taken):
            yield from _placements(mig, rest, [*taken, (profile, placement)])


def cgi_argument(placed: Placed) -> str:
    """nvidia-smi mig -cgi's profile tuples with their placements pinned (its -h: "a profile name or ID and an
    optional placement specifier, which consists of a colon and a placement start index"), by name, as the
    inventory and the boot file write them: "3g.71gb:0,3g.71gb:4"."""
    return ",".join(f"{profile.name}:{placement.start}" for profile, placement in placed)
