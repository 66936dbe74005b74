"""MIG's words on a GPU's line of the boot file (gpu/boot.py LINE_WORDS): `mig=3g.71gb:0,3g.71gb:4`, the profile
tuples the boot script's mig_layout gives `nvidia-smi mig -i UUID -cgi ... -C` at every boot, since a reboot (or a
crash) loses every GPU instance while the MIG mode stays. Placements are pinned where the facts list the GPU's;
else the largest profiles come first, so the driver's first free placement for each leaves room for the next."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from provision.capabilities.gpu.mig_fit import cgi_argument, fit
from provision.capabilities.gpu.mig_settings import layout_of
from provision.capabilities.gpu.model import GpuFacts
from provision.capabilities.gpu.settings import GpuSettings
from provision.capabilities.gpu.tuning import Refused

if TYPE_CHECKING:  # types only
    from provision.capabilities.host import HostFacts

KEY = "mig"
_SIZE = re.compile(r"(\d+)g\.(\d+)gb")


def boot_words(gpu: GpuFacts, facts: HostFacts, want: GpuSettings) -> list[str]:
    """["mig=TUPLES"] for a GPU whose settings give it a layout; [] for none, "disabled" or a layout it refuses
    (apply reports that, and the run stops before the file is written)."""
    layout = layout_of(want.mig)
    if not layout:
        return []
    mig = facts.mig.gpus.get(gpu.index) if facts.mig is not None else None
    if mig is None or not mig.profiles:
        return [f"{KEY}={','.join(sorted(layout, key=_largest_first))}"]
    try:
        return [f"{KEY}={cgi_argument(fit(gpu, mig, layout))}"]
    except Refused:
        return []


def layout_of_words(value: str) -> list[str]:
    """The layout a boot line's mig= value makes (its profile names, placements dropped: the next write pins them
    again from the facts): what boot_words wrote, read back."""
    return [entry.partition(":")[0] for entry in value.split(",") if entry]


def _largest_first(name: str) -> tuple[int, int]:
    found = _SIZE.match(name)
    return (-int(found[1]), -int(found[2])) if found else (0, 0)

