"""MIG on the models that have it: the GPU instance profiles, where each may be placed, and the GPU and compute
instances a GPU holds (record key "gis", read with .get: a newer key). Figures and rules: gpu_models.md, "MIG".

A GPU's memory is eight slots; a GPU instance takes `size` of them from one of its profile's start slots. Its
compute instances (each {"id", "profile", "start"}): migci.py."""

from __future__ import annotations

import hashlib
from collections import namedtuple

from .models import MODELS


class Profile(namedtuple("Profile", "id name slices size starts memory sm dec enc ce jpeg ofa total")):
    """A GPU instance profile as -lgip lists it: slices (compute), size and starts (memory slots), memory in GiB
    as printed, the engines it owns, and how many the GPU can hold at most."""

    __slots__ = ()

    @property
    def media(self) -> bool:
        """The +me profiles own the media engines: one per GPU."""
        return self.name.endswith("+me")


# H100 80GB HBM3 [MIG-H100]: the 7 compute slices and 8 memory slots of a Hopper GPU.
MIG_PROFILES = {
    "h100-80gb-hbm3": (
        Profile(19, "1g.10gb", 1, 1, (0, 1, 2, 3, 4, 5, 6), "9.75", 16, 1, 0, 1, 1, 0, 7),
        Profile(20, "1g.10gb+me", 1, 1, (0, 1, 2, 3, 4, 5, 6), "9.75", 16, 1, 0, 1, 1, 1, 1),
        Profile(15, "1g.20gb", 1, 2, (0, 2, 4, 6), "19.62", 26, 1, 0, 1, 1, 0, 4),
        Profile(14, "2g.20gb", 2, 2, (0, 2, 4), "19.62", 32, 2, 0, 2, 2, 0, 3),
        Profile(9, "3g.40gb", 3, 4, (0, 4), "39.50", 60, 3, 0, 3, 3, 0, 2),
        Profile(5, "4g.40gb", 4, 4, (0,), "39.50", 64, 4, 0, 4, 4, 0, 1),
        Profile(0, "7g.80gb", 7, 8, (0,), "79.25", 132, 7, 0, 8, 7, 1, 1),
    ),
    # H200 [H200-MODES] mig-lgip.txt, mig-lgipp.txt: the same slices and placements, its own memory
    "h200": (
        Profile(19, "1g.18gb", 1, 1, (0, 1, 2, 3, 4, 5, 6), "16.00", 16, 1, 0, 1, 1, 0, 7),
        Profile(20, "1g.18gb+me", 1, 1, (0, 1, 2, 3, 4, 5, 6), "16.00", 16, 1, 0, 1, 1, 1, 1),
        Profile(15, "1g.35gb", 1, 2, (0, 2, 4, 6), "32.50", 26, 1, 0, 1, 1, 0, 4),
        Profile(14, "2g.35gb", 2, 2, (0, 2, 4), "32.50", 32, 2, 0, 2, 2, 0, 3),
        Profile(9, "3g.71gb", 3, 4, (0, 4), "69.75", 60, 3, 0, 3, 3, 0, 2),
        Profile(5, "4g.71gb", 4, 4, (0,), "69.75", 64, 4, 0, 4, 4, 0, 1),
        Profile(0, "7g.141gb", 7, 8, (0,), "140.00", 132, 7, 0, 8, 7, 1, 1),
    ),
}
# The compute instance profile ID of N compute slices (nvml.h NVML_COMPUTE_INSTANCE_PROFILE_N_SLICE); the one of all
# a GPU instance's slices is its default: what -C and a bare -cci create.
CI_PROFILE_IDS = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4}
# BAR1 each memory slot of an instance maps, in MiB (inferred: 24740 MiB for a 3g.40gb of 4 slots, [MIG-TABLE]).
BAR1_PER_SLOT_MIB = 6185


def profiles(record: dict) -> tuple:
    return MIG_PROFILES.get(record["model"], ())


def find_profile(record: dict, spec: str) -> Profile | None:
    """A profile by ID (9), name (3g.40gb) or full name (MIG 3g.40gb)."""
    name = spec.strip()
    name = name[4:] if name.startswith("MIG ") else name
    return next((p for p in profiles(record) if name in (str(p.id), p.name)), None)


def gpu_instances(record: dict) -> list:
    return sorted(record.get("gis") or [], key=lambda gi: gi["id"])


def listed_instances(record: dict, gi_ids: set | None = None) -> list:
    """The GPU instances (those of `gi_ids` where given) in the order -lgi, -lci and -lcip list them: by profile
    as -lgip lists profiles, then by ID (real listings: 1g.5gb 11, 12, 2g.10gb 6, 3g.20gb 1; 1g 9, 2g 3, 4g 2)."""
    order = {p.id: n for n, p in enumerate(profiles(record))}
    chosen = [gi for gi in gpu_instances(record) if gi_ids is None or gi["id"] in gi_ids]
    return sorted(chosen, key=lambda gi: (order[gi["profile"]], gi["id"]))


def profile_of(record: dict, gi: dict) -> Profile:
    return next(p for p in profiles(record) if p.id == gi["profile"])


def occupied(record: dict) -> set:
    slots = set()
    for gi in gpu_instances(record):
        slots |= set(range(gi["start"], gi["start"] + profile_of(record, gi).size))
    return slots


def fits(record: dict, profile: Profile, start: int, taken: set) -> bool:
    return start in profile.starts and not taken & set(range(start, start + profile.size))


def free_count(record: dict, profile: Profile) -> int:
    """How many more of this profile the GPU can take now (-lgip's Free): its free placements that do not
    overlap, at most its total; a +me profile only while no other instance owns the media engines."""
    if profile.media and any(profile_of(record, gi).media for gi in gpu_instances(record)):
        return 0
    taken, count = set(occupied(record)), 0
    for start in profile.starts:
        if fits(record, profile, start, taken):
            taken |= set(range(start, start + profile.size))
            count += 1
    return min(count, profile.total)


def gi_id(profile: Profile, start: int) -> int:
    """The GPU instance ID of a placement, the same whatever the order of creation (inferred from public
    listings, gpu_models.md "MIG"): 0 the whole GPU, 1-2 the halves, 3-6 the quarters, 7-13 the eighths."""
    if profile.size == 8:
        return 0
    if profile.size == 4:
        return 2 if start == 0 else 1
    if profile.size == 2:
        return 3 + start // 2
    return 7 + start


def create_gi(record: dict, profile: Profile, start: int | None) -> dict | None:
    """A GPU instance of this profile at `start` (or the first free placement); None where it does not fit."""
    taken = occupied(record)
    if free_count(record, profile) == 0:
        return None
    starts = profile.starts if start is None else (start,)
    start = next((s for s in starts if fits(record, profile, s, taken)), None)
    if start is None:
        return None
    gi = {"id": gi_id(profile, start), "profile": profile.id, "start": start, "cis": []}
    record["gis"] = [*gpu_instances(record), gi]
    return gi


def mig_devices(record: dict) -> list:
    """(gi, ci) of every compute instance, in the order the driver numbers MIG devices."""
    return [(gi, ci) for gi in gpu_instances(record) for ci in sorted(gi["cis"], key=lambda c: c["id"])]


def mig_uuid(record: dict, gi: dict, ci: dict) -> str:
    """Stable per GPU and instance, as a real MIG device's UUID is while the instance lives."""
    h = hashlib.sha256(f"{record['uuid']}/{gi['id']}/{ci['id']}".encode()).hexdigest()
    return f"MIG-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def gi_memory_mib(record: dict, gi: dict) -> int:
    return int(float(profile_of(record, gi).memory) * 1024)


def has_mig(record: dict) -> bool:
    return bool(MODELS[record["model"]].mig and profiles(record))
