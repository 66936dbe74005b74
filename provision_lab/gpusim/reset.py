"""nvidia-smi -r: which GPUs something holds, the driver's answer, and what a reset does.

Sources (../shared/reference/node-lifecycle-reference.md 7.1): nothing may hold a GPU being reset, "e.g., Fabric
Manager, CUDA application, ... a monitoring application"; persistence mode counts as a hold (NVIDIA/gpu-operator
#118, NVIDIA/NVSentinel#1690: `nvidia-smi -pm 0` or stopping nvidia-persistenced lets the same reset pass); DCGM's
host engine is stopped before a reset in NVIDIA's own procedures (FM guide, mig-parted's hooks). On a Hopper
NVSwitch board a GPU can be reset on its own and `-r` without -i resets every GPU and NVSwitch; a GPU reset there
leaves the NVLink fabric until Fabric Manager, started again, registers it (FM guide, "Initializing NVSwitch and
NVLink")."""

from __future__ import annotations

import os

from .apps import running
from .errors import RC_OK, RC_OTHER
from .modes import reset_gpu
from .recovery import reset as reset_recovery

RESET_DONE = "GPU {bus} was successfully reset."
# The 5xx drivers' refusal, verbatim (ComputeCanada/puppet-magic_castle#387 from mig-parted's log, NVIDIA/
# NVSentinel#1690): the GPUs held, then why. "N devices are" for more than one is inferred from the one-GPU form.
RESET_REFUSED = "The following GPUs could not be reset:\n{gpus}\n{count} currently being used by one or more other " \
                "processes (e.g., Fabric Manager, CUDA application, graphics application such as an X server, or a " \
                "monitoring application such as another instance of nvidia-smi). Please first kill all processes " \
                "using this device and all compute applications running in the system.\n"
RESET_HELD_LINE = "  GPU {bus}: In use by another client\n"
# Programs that keep every GPU open while they run: /proc/PID/comm as the kernel cuts it (15 characters).
HOLDERS = ("nv-fabricmanager", "nv-hostengine")
COMM_LENGTH = 15


def proc_root() -> str | None:
    """Where to look for holders: NVIDIA_SIM_PROC, else /proc on a lab node. A test that moved the simulator's
    files (NVIDIA_SIM_STATE) without naming a /proc looks nowhere: the machine's own processes are not its."""
    if os.environ.get("NVIDIA_SIM_PROC"):
        return os.environ["NVIDIA_SIM_PROC"]
    return None if os.environ.get("NVIDIA_SIM_STATE") else "/proc"


def holder_running() -> bool:
    """A fabric manager or a DCGM host engine runs on this node."""
    root = proc_root()
    if root is None:
        return False
    names = {name[:COMM_LENGTH] for name in HOLDERS}
    for pid in os.listdir(root) if os.path.isdir(root) else []:
        try:
            with open(os.path.join(root, pid, "comm")) as fh:
                if fh.read().strip() in names:
                    return True
        except OSError:
            continue  # not a process, or gone meanwhile
    return False


def daemon_holds(g) -> bool:
    """nvidia-persistenced keeps a GPU open while its persistence mode is on through the daemon (`-pm 0` for that
    GPU lets it go); the legacy mode the driver keeps without the daemon is no client."""
    daemon = g.host.daemon
    if daemon is None:
        return False
    return g.record["daemon_pm"] if g.record["daemon_pm"] is not None else daemon["persistence"]


def held(g, wide: bool) -> bool:
    """Something holds the GPU: the daemon, a process on it, or a program that holds every GPU (wide)."""
    return wide or daemon_holds(g) or bool(running(g.record))


def run_reset(host, gpus: list) -> tuple:
    """(output, rc) of nvidia-smi -r over the selected GPUs: all of them, or none where any is held."""
    wide = holder_running()
    refused = [g for g in gpus if held(g, wide)]
    if refused:
        count = "1 device is" if len(refused) == 1 else f"{len(refused)} devices are"
        text = "".join(RESET_HELD_LINE.format(bus=g.bus_id) for g in refused)
        return RESET_REFUSED.format(gpus=text, count=count), RC_OTHER
    for g in gpus:
        reset_gpu(g.record)
        reset_recovery(g.record)
        if g.record.get("fabric_state") is not None:  # out of the NVLink fabric until FM registers it again
            g.record.update(fabric_state="In Progress", fabric_status=None)
    done = [RESET_DONE.format(bus=g.bus_id) for g in gpus]
    return "\n".join(done + (["All done."] if len(gpus) > 1 else [])) + "\n", RC_OK
