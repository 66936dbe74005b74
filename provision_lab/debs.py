"""The lab's simulated packages besides the drivers: every stack module's, for the apt repository (aptrepo.py).

Each part of the GPU stack the lab simulates keeps its packages in a module of its own, provision_lab/stack_<name>.py,
with a function `debs() -> list[Deb]` (Deb: provision_lab/deb.py); LAB_DEBS calls each of them.
"""

from __future__ import annotations

from provision_lab import stack_containers, stack_fabric, stack_kernels, stack_pyxis
from provision_lab.deb import Deb


def LAB_DEBS() -> list[Deb]:  # noqa: N802 (the name the stack owners agreed on)
    """Every simulated package of the repository besides the drivers (aptrepo.driver_deb): one line per stack."""
    return [
        *stack_fabric.debs(),
        *stack_containers.debs(),
        *stack_kernels.debs(),
        *stack_pyxis.debs(),
    ]
