"""A node's network ports as the facts read them (capabilities/nccl/facts.py Interface)."""

from __future__ import annotations

from collections.abc import Sequence

from provision.capabilities.nccl.facts import Interface

UP = ("BROADCAST", "UP", "LOWER_UP")  # a port up with its link


def blade(n: int, speeds: Sequence[int | None] = (10000, 10000)) -> list[Interface]:
    """Blade `n`'s ports ens803f0, ens803f1, ..., one per speed (Mb/s), each on its own 10.214+k.0.0/24 network."""
    return [Interface(f"ens803f{k}", "up", speed, UP, (f"10.{214 + k}.0.{10 + n}/24",))
            for k, speed in enumerate(speeds)]
