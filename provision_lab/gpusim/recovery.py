"""A GPU's recovery action: what the driver says the GPU needs before it can be used again, as nvidia-smi shows it
(--query-gpu `gpu_recovery_action`, -q's `GPU Recovery Action`, -q -x's <gpu_recovery_action>).

The words are nvidia-smi's: `None` on a healthy GPU (the real H200, tests/fixtures/real/h200-recovery), and the
values NVIDIA documents for NVML's nvmlDeviceGpuRecoveryAction_t, "None, Reset, Reboot, Drain P2P, Drain and
Reset" (docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt, "Error Recovery and Response Flags";
../shared/reference/node-lifecycle-reference.md 7.2). The record key `recovery_action` is newer than the state
file format: read with .get, absent means None."""

from __future__ import annotations

from .errors import BAD_FIELD, Exit, RC_INVALID, SimError
from .kernel import kmsg, pci_short

NONE, RESET, REBOOT, DRAIN_P2P, DRAIN_AND_RESET = "None", "Reset", "Reboot", "Drain P2P", "Drain and Reset"
ACTIONS = (NONE, RESET, REBOOT, DRAIN_P2P, DRAIN_AND_RESET)  # in NVML's order: the enum's value is the index


def recovery_action(record: dict) -> str:
    """The action the driver asks for this GPU: one of ACTIONS."""
    return record.get("recovery_action") or NONE


# --- the faults, and what ends them --------------------------------------------------------------------------

# Xid 79 as the 5xx drivers print it, no process to blame (faults.py's off-bus fault logs it too).
XID79 = "NVRM: Xid (PCI:{pci}): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
# What Xid 154 calls each action, with NVML's code (the driver's gpu.c _gpuRecoveryActionName,
# ../shared/reference/node-lifecycle-reference.md 7.3; verify's health/kernlog.py reads these lines, and
# test_gpusim_recovery holds the two together).
XID154_NAMES = {NONE: "None", RESET: "GPU Reset Required", REBOOT: "Node Reboot Required", DRAIN_P2P: "Drain P2P",
                DRAIN_AND_RESET: "Drain and Reset"}
XID154 = "NVRM: Xid (PCI:{pci}): 154, GPU recovery action changed from 0x{old:x} ({old_name}) to 0x{new:x} ({new_name})"
# What a client that then asks the GPU for a channel meets (verbatim, scitix/sichek#51): CUDA answers "busy or
# unavailable". The line names no GPU.
RESET_REQUIRED = ("NVRM: nvAssertOkFailedNoLog: Assertion failed: Reset required [NV_ERR_RESET_REQUIRED] "
                  "(0x00000062) returned from status @ kernel_channel.c:2874")

# gpusim fault GPU KIND: the states a reset or a reboot ends (the lab's gpu-reset-required, gpu-needs-reboot,
# gpu-failing-card).
FAULTS = ("reset-required", "needs-reboot", "failing-card")


def change_action(state: dict, record: dict, action: str) -> None:
    """The driver decides the GPU needs `action`, and says so in the kernel log (Xid 154)."""
    old = recovery_action(record)
    record["recovery_action"] = action
    kmsg(state, XID154.format(pci=pci_short(record["bus_id"]), old=ACTIONS.index(old), old_name=XID154_NAMES[old],
                              new=ACTIONS.index(action), new_name=XID154_NAMES[action]))


def off_the_bus_and_back(state: dict, record: dict) -> None:
    """Xid 79: the GPU fell off the bus; it answers again, but the driver wants the node rebooted (what a reset
    cannot mend: the OS may be left inconsistent, NVIDIA's words for Reboot)."""
    log_off_bus(state, record)
    change_action(state, record, REBOOT)


def log_off_bus(state: dict, record: dict) -> None:
    """The two lines the driver logs when a GPU falls off the bus (Xid 79)."""
    kmsg(state, XID79.format(pci=pci_short(record["bus_id"])))
    kmsg(state, f"NVRM: GPU {record['bus_id'][4:].lower()}: GPU has fallen off the bus.")


def inject(state: dict, record: dict, kind: str, drain: bool = False) -> None:
    """One of FAULTS on the GPU of `record`; drain (reset-required): Drain and Reset, where the work running may
    end before the reset, so nothing is refused yet."""
    if record.get("gone") or record.get("off_bus"):
        raise SimError(f"GPU {record['slot']} is off the bus: the driver cannot hear of its faults")
    if kind == "reset-required":  # a fault the GPU's firmware cannot recover from by itself, no classic Xid first
        change_action(state, record, DRAIN_AND_RESET if drain else RESET)
        if not drain:
            kmsg(state, RESET_REQUIRED)  # the job on it asks for a channel and is refused
        return
    record["failing"] = kind == "failing-card" or bool(record.get("failing"))
    off_the_bus_and_back(state, record)


def reset(record: dict) -> None:
    """What a GPU reset does to the recovery action: a reset clears what needs a reset; a reboot-class state
    stays (the reset cannot reach what the OS holds)."""
    if recovery_action(record) in (RESET, DRAIN_AND_RESET):
        record["recovery_action"] = NONE


def after_boot(state: dict, loaded: float | None) -> None:
    """A boot: every GPU starts with nothing to recover, except a failing card, which fails again soon after
    the driver loads (`loaded`: when it loaded, as kernel.boot returns it; None: no driver, nothing logs)."""
    for record in state["gpus"]:
        record["recovery_action"] = NONE
        if record.get("failing") and loaded is not None and not record.get("gone"):
            off_the_bus_and_back(state, record)


# --- what nvidia-smi shows of it ----------------------------------------------------------------------------

# The first driver branch that has it: the open kernel module's 565.57.01 (not 560.35.03), and a real 565.57.01 -q
# prints the line (../shared/reference/node-lifecycle-reference.md 7.2). An older driver knows no such field.
SINCE_BRANCH = 565


def known(driver: str) -> bool:
    return int(driver.split(".")[0]) >= SINCE_BRANCH


def query_value(g) -> str:
    """--query-gpu gpu_recovery_action: an older driver refuses it as any field it does not know."""
    if not known(g.host.driver):
        raise Exit(BAD_FIELD.format(name="gpu_recovery_action"), RC_INVALID)
    return recovery_action(g.record)


def q_lines(g) -> list:
    """-q's line, where the driver has it."""
    return [(1, "GPU Recovery Action", recovery_action(g.record))] if known(g.host.driver) else []
