"""The driver's MIG capabilities: /proc/driver/nvidia-caps/mig-minors and /dev/nvidia-caps/nvidia-capN.

While a driver is loaded, /proc/driver/nvidia-caps/mig-minors lists every capability the driver could ever hand
out, with MIG off too: "config 1", "monitor 2", then for each of 32 GPU minors and 15 GPU instance IDs
"gpuG/giI/access N" followed by its 8 compute instances "gpuG/giI/ciC/access N", N counting up from 3 (the real
H200's file, tests/fixtures/real/h200-recovery/mig-minors.txt). /dev/nvidia-caps holds nvidia-cap1 (config,
0400) and nvidia-cap2 (monitor, 0444) there, char devices of the driver's nvidia-caps major; creating a GPU or
compute instance adds the nvidia-capN of its minor (0444; nvidia-smi has nvidia-modprobe make it), which stays
after the instance is destroyed, as nvidia-modprobe removes no device file. Slurm and the container toolkit open
these to give a job one MIG device.
"""

from __future__ import annotations

import contextlib
import os
import stat

from .env import ENV_DEFAULTS, env_path, proc_driver_path
from .mig import mig_devices

GPU_MINORS, GPU_INSTANCES, COMPUTE_INSTANCES = 32, 15, 8
CAPS_MAJOR = 241  # dynamic, from /proc/devices' "nvidia-caps": the real H200's
CONFIG_MODE, MONITOR_MODE, INSTANCE_MODE = 0o400, 0o444, 0o444


def minors_path() -> str:
    """Beside /proc/driver/nvidia, as the real driver's /proc/driver/nvidia-caps."""
    return os.path.join(proc_driver_path() + "-caps", "mig-minors")


def caps_dir() -> str:
    """/dev/nvidia-caps on a lab node; beside the state where a caller moved the simulator's files (a test)."""
    if os.environ.get("NVIDIA_SIM_CAPS_DEV"):
        return os.environ["NVIDIA_SIM_CAPS_DEV"]
    if any(os.environ.get(name) for name in ENV_DEFAULTS):
        return env_path("NVIDIA_SIM_STATE") + ".dev-nvidia-caps"
    return "/dev/nvidia-caps"


def gpu_instance_minor(gpu_minor: int, gi: int) -> int:
    return 3 + (gpu_minor * GPU_INSTANCES + gi) * (1 + COMPUTE_INSTANCES)


def compute_instance_minor(gpu_minor: int, gi: int, ci: int) -> int:
    return gpu_instance_minor(gpu_minor, gi) + 1 + ci


def minors_table() -> str:
    lines = ["config 1", "monitor 2"]
    for gpu in range(GPU_MINORS):
        for gi in range(GPU_INSTANCES):
            lines.append(f"gpu{gpu}/gi{gi}/access {gpu_instance_minor(gpu, gi)}")
            lines += [f"gpu{gpu}/gi{gi}/ci{ci}/access {compute_instance_minor(gpu, gi, ci)}"
                      for ci in range(COMPUTE_INSTANCES)]
    return "\n".join(lines) + "\n"


def write_caps(state: dict | None) -> None:
    """At a driver's load: the minors table and the config and monitor devices; no driver, no table."""
    directory = os.path.dirname(minors_path())
    with contextlib.suppress(OSError):
        if not state or state.get("driver_version") is None:
            if os.path.isdir(directory):
                for name in os.listdir(directory):
                    os.unlink(os.path.join(directory, name))
                os.rmdir(directory)
            return
        os.makedirs(directory, exist_ok=True)
        path = minors_path()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)  # read-only (0444), as the kernel's
        with open(path, "w") as fh:
            fh.write(minors_table())
        os.chmod(path, 0o444)
    make_device(1, CONFIG_MODE)
    make_device(2, MONITOR_MODE)


def make_instance_devices(records: list) -> None:
    """The device files of every GPU and compute instance that exists (nvidia-modprobe -f for each new one)."""
    for record in records:
        minor = record["slot"]  # the GPU's device minor (/dev/nvidiaN)
        for gi, ci in mig_devices(record):
            make_device(gpu_instance_minor(minor, gi["id"]), INSTANCE_MODE)
            make_device(compute_instance_minor(minor, gi["id"], ci["id"]), INSTANCE_MODE)


def make_device(minor: int, mode: int) -> None:
    """One /dev/nvidia-caps/nvidia-capN, unless it exists; where mknod is not allowed (a test without root),
    nothing."""
    path = os.path.join(caps_dir(), f"nvidia-cap{minor}")
    with contextlib.suppress(OSError):
        os.makedirs(caps_dir(), mode=0o755, exist_ok=True)
        if not os.path.exists(path):
            os.mknod(path, mode | stat.S_IFCHR, os.makedev(CAPS_MAJOR, minor))
            os.chmod(path, mode)  # mknod's mode passes through the umask
