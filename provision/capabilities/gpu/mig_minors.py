"""The driver's table of MIG capability device minors, /proc/driver/nvidia-caps/mig-minors: one line per
capability, "config 1", "monitor 2", then "gpuG/giI/access N" and "gpuG/giI/ciC/access N" for every GPU minor,
GPU instance and compute instance ID the driver could ever make (present with MIG off; see
tests/fixtures/real/h200-recovery/mig-minors.txt). A MIG device is the GPU's /dev/nvidiaG plus
/dev/nvidia-caps/nvidia-capN of its GPU instance and of its compute instance: what a process needs opened to use it
(Slurm's gpu/nvml plugin reads this file for the same, _nvml_get_mig_minor_numbers)."""

from __future__ import annotations

MINORS_PATH = "/proc/driver/nvidia-caps/mig-minors"
CAPS_DIR = "/dev/nvidia-caps"


def parse_minors(text: str) -> dict[str, int]:
    """Capability name -> device minor. Lines that are not "NAME NUMBER" (a read error's words) are left out."""
    minors: dict[str, int] = {}
    for line in text.splitlines():
        words = line.split()
        if len(words) == 2 and words[1].isdigit():
            minors[words[0]] = int(words[1])
    return minors


def gpu_instance_cap(gpu_minor: int, gpu_instance: int) -> str:
    return f"gpu{gpu_minor}/gi{gpu_instance}/access"


def compute_instance_cap(gpu_minor: int, gpu_instance: int, compute_instance: int) -> str:
    return f"gpu{gpu_minor}/gi{gpu_instance}/ci{compute_instance}/access"


def cap_device(minor: int) -> str:
    """The device file nvidia-modprobe makes for a capability of this minor."""
    return f"{CAPS_DIR}/nvidia-cap{minor}"
