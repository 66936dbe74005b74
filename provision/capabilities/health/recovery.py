"""The recovery the NVIDIA driver asks for a GPU: nvidia-smi's `gpu_recovery_action` and the kernel's Xid 154.

The driver keeps one recommended action per GPU (drivers 565 and later) and logs Xid 154 whenever it changes:
"GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)". nvidia-smi reports the current one as
`None`, `Reset`, `Reboot`, `Drain P2P` or `Drain and Reset`. The Xid line's names change between drivers (610
prints "0x1 (PF FLR)", "0x2 (OS Reboot)"), so a line is read by its code, which follows NVML's
nvmlDeviceGpuRecoveryAction_t. Sources: ../shared/reference/node-lifecycle-reference.md §7.2-7.3 (NVML's enum,
the open kernel module's gpu.c, nvidia-smi's documentation), the real H200 captures in
tests/fixtures/real/h200-recovery/.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from provision.core.checks import REBOOT, RESET

NONE = "none"  # nvidia-smi's values, lower-cased as the GPU facts hold words (gpu/smi.py read_word)


class Action(NamedTuple):
    remedy: str  # provision's smallest step (core/checks.py)
    says: str  # what the driver asks, in a finding's words
    fix: str  # what to do, short


ACTIONS = {
    "reset": Action(RESET, "the driver asks for a GPU reset",
                    "stop what holds the GPU (its processes, DCGM, Fabric Manager), reset it (nvidia-smi -r), start "
                    "them again"),
    "drain and reset": Action(RESET, "the driver asks to drain it and reset it (it runs at reduced capacity)",
                              "schedule nothing new on it; once its jobs end, reset it (nvidia-smi -r)"),
    "drain p2p": Action(RESET, "the driver asks to drain its peer-to-peer (NVLink) traffic",
                        "stop the jobs using it and its NVLink peers, then read it again; reset it if it still asks"),
    "reboot": Action(REBOOT, "the driver asks for a node reboot", "drain the node and reboot it"),
}
# Xid 154's codes: NVML's NONE 0, GPU_RESET 1, NODE_REBOOT 2, DRAIN_P2P 3, DRAIN_AND_RESET 4.
_BY_CODE = {0: NONE, 1: "reset", 2: "reboot", 3: "drain p2p", 4: "drain and reset"}
_CHANGED_TO = re.compile(r"\bto 0x(?P<code>[0-9a-fA-F]+)(?: \((?P<name>[^)]*)\))?")


def action(value: str | None) -> Action | None:
    """What a recovery action asks ("reset", "Drain and Reset", ...); None for none, N/A or no value. An action this
    table does not know yet is worth a reboot before a person looks, as an unknown fault is."""
    word = (value or "").strip().lower()
    if word in ("", NONE, "n/a", "[n/a]"):
        return None
    return ACTIONS.get(word) or Action(REBOOT, f"the driver asks for recovery action {value!r}",
                                       "look the action up in nvidia-smi's documentation; drain the node and reboot")


def of_xid_154(detail: str) -> str | None:
    """The action an Xid 154 line changed to: "reset", "reboot", ..., "none"; an unknown code as its name or
    "0xN"; None when the line says no "to 0xN"."""
    m = _CHANGED_TO.search(detail)
    if m is None:
        return None
    code = int(m["code"], 16)
    return _BY_CODE.get(code) or m["name"] or f"0x{code:x}"
