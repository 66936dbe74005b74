"""A GPU's recovery action: what the driver says the GPU needs before it can be used again, as nvidia-smi shows it
(--query-gpu `gpu_recovery_action`, -q's `GPU Recovery Action`, -q -x's <gpu_recovery_action>).

The words are nvidia-smi's: `None` on a healthy GPU (the real H200, tests/fixtures/real/h200-recovery), and the
values NVIDIA documents for NVML's nvmlDeviceGpuRecoveryAction_t, "None, Reset, Reboot, Drain P2P, Drain and
Reset" (docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt, "Error Recovery and Response Flags";
../shared/reference/node-lifecycle-reference.md 7.2). The record key `recovery_action` is newer than the state
file format: read with .get, absent means None."""

from __future__ import annotations

NONE, RESET, REBOOT, DRAIN_P2P, DRAIN_AND_RESET = "None", "Reset", "Reboot", "Drain P2P", "Drain and Reset"
ACTIONS = (NONE, RESET, REBOOT, DRAIN_P2P, DRAIN_AND_RESET)  # in NVML's order: the enum's value is the index


def recovery_action(record: dict) -> str:
    """The action the driver asks for this GPU: one of ACTIONS."""
    return record.get("recovery_action") or NONE
