"""What `provision facts` shows of MIG, one line per MIG-capable GPU: its mode (and the mode pending a reset) and
its GPU instances where and as the driver placed them; what nvidia-smi mig said besides its listings."""

from __future__ import annotations

from typing import TYPE_CHECKING

from provision.capabilities.capability import WARNING, FactLine
from provision.capabilities.gpu.mig_model import MigGpu
from provision.capabilities.gpu.tasks import on_off

if TYPE_CHECKING:  # types only
    from provision.capabilities.host import HostFacts


def lines(facts: HostFacts) -> list[FactLine]:
    """Nothing where the MIG listings were not read or no GPU lists a MIG profile."""
    mig = facts.mig
    if mig is None:
        return []
    shown = []
    for gpu in facts.nvidia.gpus:
        listed = mig.gpus.get(gpu.index)
        if listed is None or gpu.mig_pending is None:
            continue
        mode = on_off(gpu.mig_mode)
        if gpu.mig_pending != gpu.mig_mode:
            shown.append(FactLine.labelled("mig", f"{gpu.label} mode {mode}, {on_off(gpu.mig_pending)} pending a GPU "
                                                  "reset or reboot", WARNING))
        else:
            shown.append(FactLine.labelled("mig", f"{gpu.label} mode {mode}" + _instances(listed)))
    return shown + [FactLine.labelled("mig", note, WARNING) for note in mig.notes]


def _instances(gpu: MigGpu) -> str:
    if not gpu.gpu_instances:
        return ""
    alone = {gi.id for gi in gpu.without_default_compute()}
    return ": " + ", ".join(f"{gi.profile} at {gi.placement}" + (" (without its default compute instance)" if gi.id in alone else "")
                            for gi in gpu.gpu_instances)
