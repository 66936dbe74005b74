"""The compute instances of a GPU instance: the profiles `mig -lcip` lists for it, where each may be placed
(`-lcipp`), and `-cci PROFILE` by name or ID. Rules and sources: gpu_models.md, "MIG".

A GPU instance of N compute slices takes compute instances of 1, 2, 3, 4 or 7 slices that fit in it (a 4g takes
no 3c: real listings of a 4g.20gb show 1c, 2c and 4g only); the one of all N slices is its default profile (the
`*` of -lcip), named as the GPU instance, the others `Kc.` before it (`MIG 1c.3g.40gb`)."""

from __future__ import annotations

from collections import namedtuple

from .mig import CI_PROFILE_IDS, profile_of

# The compute slice counts a GPU instance of N slices offers, in -lcip's order.
CI_SLICES = {1: (1,), 2: (1, 2), 3: (1, 2, 3), 4: (1, 2, 4), 7: (1, 2, 3, 4, 7)}


class CiProfile(namedtuple("CiProfile", "id name slices total sm default")):
    """A compute instance profile of one GPU instance: its ID, name, compute slices, how many fit, its SMs."""

    __slots__ = ()

    @property
    def starts(self) -> tuple:
        """The first compute slice of each placement: every multiple of its size that fits (inferred: real -lci
        rows put two 1c instances at 0:1 and 1:1)."""
        return tuple(range(0, self.total * self.slices, self.slices))


def ci_profiles(record: dict, gi: dict) -> tuple:
    """The compute instance profiles of this GPU instance, in -lcip's order."""
    gip = profile_of(record, gi)
    base = gip.name.removesuffix("+me")
    return tuple(
        CiProfile(CI_PROFILE_IDS[k], base if k == gip.slices else f"{k}c.{base}", k, gip.slices // k,
                  gip.sm * k // gip.slices, k == gip.slices)
        for k in CI_SLICES[gip.slices])


def default_ci_profile(record: dict, gi: dict) -> CiProfile:
    return next(p for p in ci_profiles(record, gi) if p.default)


def find_ci_profile(record: dict, gi: dict, spec: str) -> CiProfile | None:
    """A compute instance profile by ID (0) or name (1c.3g.40gb, MIG 1c.3g.40gb)."""
    name = spec.strip().removeprefix("MIG ")
    return next((p for p in ci_profiles(record, gi) if name in (str(p.id), p.name)), None)


def ci_profile_of(record: dict, gi: dict, ci: dict) -> CiProfile:
    return next(p for p in ci_profiles(record, gi) if p.id == ci["profile"])


def ci_span(record: dict, gi: dict, ci: dict) -> range:
    """The compute slices a compute instance holds (start 0 where an older state did not record it)."""
    start = ci.get("start", 0)
    return range(start, start + ci_profile_of(record, gi, ci).slices)


def taken_slices(record: dict, gi: dict) -> set:
    return {s for ci in gi["cis"] for s in ci_span(record, gi, ci)}


def free_starts(record: dict, gi: dict, profile: CiProfile) -> list:
    taken = taken_slices(record, gi)
    return [s for s in profile.starts if not taken & set(range(s, s + profile.slices))]


def ci_free_count(record: dict, gi: dict, profile: CiProfile) -> int:
    """-lcip's Free: how many more of this profile fit beside the compute instances the GPU instance holds."""
    taken, count = set(taken_slices(record, gi)), 0
    for start in profile.starts:
        span = set(range(start, start + profile.slices))
        if not taken & span:
            taken |= span
            count += 1
    return count


def create_ci(record: dict, gi: dict, profile: CiProfile) -> dict | None:
    """A compute instance of this profile at its first free placement, with the lowest free ID; None where none
    fits."""
    starts = free_starts(record, gi, profile)
    if not starts:
        return None
    used = {ci["id"] for ci in gi["cis"]}
    ci = {"id": next(i for i in range(len(used) + 1) if i not in used), "profile": profile.id, "start": starts[0]}
    gi["cis"].append(ci)
    return ci


def ci_name(record: dict, gi: dict, ci: dict) -> str:
    return "MIG " + ci_profile_of(record, gi, ci).name
