"""The driver's own word on each GPU: the recovery it asks for now (a reset, a reboot, a drain)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from provision.capabilities.health import recovery
from provision.capabilities.health.checks import readable_gpus
from provision.core import pci
from provision.core.checks import Finding, fail_each

if TYPE_CHECKING:  # types only
    from provision.verify.model import Node

CHECK = "no_gpu_awaits_recovery"  # the kernel log's Xid 154 and NV_ERR_RESET_REQUIRED lines are its evidence


def check_no_gpu_awaits_recovery(node: Node) -> None:
    """What the driver recommends to recover each GPU from a bad state, read now, so a GPU that needs a reset is
    found even when the Xid that caused it is gone from the log. One finding per action the driver asks, naming
    its GPUs; the step is the driver's (an NVSwitch board resets all its GPUs together).

    Reads: each GPU's recovery action (nvidia-smi --query-gpu gpu_recovery_action, drivers 565 and later).
    Next step: Reset or Drain and Reset: stop what holds the GPU and reset it (nvidia-smi -r), or `provision
    recover`; Reboot: drain the node and reboot it; Drain P2P: stop the jobs using its NVLink peers, then verify again
    """
    gpus = readable_gpus(node)
    if all(gpu.recovery_action is None for gpu in gpus):
        pytest.skip("this driver reports no recovery action (nvidia-smi's gpu_recovery_action: drivers 565 and later)")
    asked: dict[recovery.Action, list[str]] = {}
    slots: dict[recovery.Action, list[str]] = {}
    for gpu in gpus:
        action = recovery.action(gpu.recovery_action)
        if action is not None:
            asked.setdefault(action, []).append(f"{gpu.label} {gpu.bus_id} ({gpu.recovery_action})")
            slots.setdefault(action, []).append(pci.slot(gpu.bus_id))
    fail_each([Finding("no GPU for which the driver asks a recovery (nvidia-smi gpu_recovery_action None)",
                       f"{action.says}: {', '.join(named)}", action.fix, about=tuple(slots[action]),
                       remedy=action.remedy)
               for action, named in asked.items()])
