"""Where the simulator keeps its files (the NVIDIA_SIM_* environment, a lab node's paths by default) and who runs it."""

from __future__ import annotations

import os

# A lab node's paths (NVIDIA_SIM_CONFIG and NVIDIA_SIM_LIBRARY are also in provision_lab/layout.py; a unit
# test checks that they agree).
ENV_DEFAULTS = {
    "NVIDIA_SIM_CONFIG": "/etc/nvidia-sim/config.json",
    "NVIDIA_SIM_STATE": "/var/lib/nvidia-sim/state.json",
    "NVIDIA_SIM_RUNDIR": "/var/run/nvidia-persistenced",
    "NVIDIA_SIM_KMSG": "/var/log/nvidia-sim-kern.log",
    "NVIDIA_SIM_DMESG": "/run/nvidia-sim/dmesg",
    "NVIDIA_SIM_LIBRARY": "/usr/lib/provision-lab/nvml-library-version",
    "NVIDIA_SIM_PROC_DRIVER": "/proc/driver/nvidia",
    "NVIDIA_SIM_FABRIC_MANAGER": "/usr/lib/provision-lab/fabricmanager-version",  # the lab's fabric manager package's
}


def env_path(name: str) -> str:
    return os.environ.get(name) or ENV_DEFAULTS[name]


def ring_path() -> str:
    """The ring buffer's file. Where a caller moved the kernel log (a test) but not the ring, the ring
    goes beside that log rather than into the real /run."""
    if os.environ.get("NVIDIA_SIM_DMESG"):
        return os.environ["NVIDIA_SIM_DMESG"]
    if os.environ.get("NVIDIA_SIM_KMSG"):
        return os.environ["NVIDIA_SIM_KMSG"] + ".ring"
    return ENV_DEFAULTS["NVIDIA_SIM_DMESG"]


def proc_driver_path() -> str:
    """The loaded driver's /proc/driver/nvidia. Where a caller moved the simulator's other files (a test, a
    simulator set up on its own) but not this, it goes beside the state rather than into the real /proc."""
    if os.environ.get("NVIDIA_SIM_PROC_DRIVER"):
        return os.environ["NVIDIA_SIM_PROC_DRIVER"]
    if any(os.environ.get(name) for name in ENV_DEFAULTS):
        return env_path("NVIDIA_SIM_STATE") + ".proc-driver-nvidia"
    return ENV_DEFAULTS["NVIDIA_SIM_PROC_DRIVER"]


def pidfile_path() -> str:
    return os.path.join(env_path("NVIDIA_SIM_RUNDIR"), "nvidia-persistenced.pid")


def effective_uid() -> int:
    # Tests pretend to be another user; the real check is the effective uid, as nvidia-smi's.
    value = os.environ.get("NVIDIA_SIM_UID")
    return int(value) if value not in (None, "") else os.geteuid()
