"""The simulated kernel: the NVIDIA driver installed on disk and the one a boot loaded, /proc/driver/nvidia, the
kernel log (kern.log and the ring buffer dmesg reads)."""

from __future__ import annotations

import contextlib
import os
import random
import time

from .env import env_path, proc_driver_path, ring_path
from .errors import SimError
from .migcaps import write_caps
from .models import MODELS

# --- the driver: the one installed on disk, the one a boot loaded --------------------------------------------

# A lab node's default (provision_lab/layout.py DRIVER_VERSION; a unit test checks the two agree).
DEFAULT_DRIVER = "580.159.04"
CUDA_FOR_DRIVER = {"580": "13.0", "575": "12.9", "570": "12.8", "565": "12.7", "560": "12.6", "555": "12.5",
                   "550": "12.4", "545": "12.3", "535": "12.2", "530": "12.1", "525": "12.0"}


def installed_driver(config: dict) -> str | None:
    """The driver on disk: its NVML library's version (NVIDIA_SIM_LIBRARY, which a driver package ships); without
    that file, the config's driver_version (default DEFAULT_DRIVER; null: none installed)."""
    path = env_path("NVIDIA_SIM_LIBRARY")
    try:
        with open(path) as fh:
            version = fh.read().strip()
    except FileNotFoundError:
        if "driver_version" in config and config["driver_version"] is None:
            return None
        return str(config.get("driver_version") or DEFAULT_DRIVER)
    except OSError as exc:
        raise SimError(f"cannot read the NVML library version {path}: {exc}")
    if not is_version(version):
        raise SimError(f"{path}: expected a driver version such as 580.159.04, got {version!r}")
    return version


def is_version(text: str) -> bool:
    return bool(text) and all(part.isdigit() for part in text.split("."))


def load_driver(state: dict, config: dict) -> None:
    """The kernel module on disk loads: the installed driver becomes the loaded one (none installed: none loaded),
    and with it the CUDA version nvidia-smi reports."""
    driver = installed_driver(config)
    state["driver_version"] = driver
    state["cuda_version"] = driver and str(config.get("cuda_version")
                                           or CUDA_FOR_DRIVER.get(driver.split(".")[0], "13.0"))


# --- the kernel log -------------------------------------------------------------------------


def kmsg(state: dict, message: str, source: str = "kernel", uptime: float | None = None) -> None:
    """One kern.log line: 'Nov 22 13:27:16 host kernel: [   65.315783] NVRM: ...'. A kernel line also goes
    to the ring buffer (NVIDIA_SIM_DMESG) as dmesg prints it: '[   65.315783] NVRM: ...'. uptime: seconds
    since boot_time (default: now)."""
    path = env_path("NVIDIA_SIM_KMSG")
    now = time.localtime()
    stamp = f"{time.strftime('%b', now)} {now.tm_mday:2d} {time.strftime('%H:%M:%S', now)}"
    if uptime is None:
        uptime = time.time() - state.get("boot_time", time.time())
    prefix = f"[{uptime:12.6f}] " if source == "kernel" else ""
    with contextlib.suppress(OSError):
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(path, "a") as fh:
            fh.write(f"{stamp} {state.get('hostname') or os.uname().nodename} {source}: {prefix}{message}\n")
    if source == "kernel":
        with contextlib.suppress(OSError):
            ring = ring_path()
            os.makedirs(os.path.dirname(ring) or ".", exist_ok=True)
            with open(ring, "a") as fh:
                fh.write(f"{prefix}{message}\n")


# A boot: the machine came up BOOT_AGO seconds before the simulated reboot returns, and the driver loaded
# at a few seconds of uptime, as on real machines ([    4.378677] .. [   11.402126] in public dmesg outputs).
BOOT_AGO = 20.0
# The loaded module's id string (pNVRM_ID), in its load line (kernel-open/nvidia/nv.c: "NVRM: loading %s") and
# in /proc/driver/nvidia/version ("NVRM version: %s", then "GCC version:  %s", the compiler it was built with).
# The open kernel modules (utils.mk GENERATE_NVIDSTRING), the default since the 560 driver, say "NVIDIA UNIX
# Open Kernel Module for x86_64  <version>  Release Build  (<builder>)  <date>"; they do not drive Volta, so a
# host with a V100 runs the proprietary ones: "NVIDIA UNIX x86_64 Kernel Module  <version>  <date>". Builder
# and date: borrowed from real 580-branch lines (see gpu_models.md), the same for every version; the compiler:
# Debian 12's, which built the module there (DKMS), with the trailing space real files have.
NVRM_ID_OPEN = "NVIDIA UNIX Open Kernel Module for x86_64  {driver}  Release Build  " \
               "(dvs-builder@U22-I3-AF03-29-4)  Wed Feb 18 05:37:09 UTC 2026"
NVRM_ID_PROPRIETARY = "NVIDIA UNIX x86_64 Kernel Module  {driver}  Wed Oct 29 23:15:11 UTC 2025"
LOAD_LINE = "NVRM: loading {id}"
PROC_VERSION = "NVRM version: {id}\nGCC version:  gcc version 12.2.0 (Debian 12.2.0-14) \n"


def empty_ring() -> None:
    """A new boot's kernel ring buffer: empty (kern.log, syslog's file, keeps every boot)."""
    with contextlib.suppress(OSError):
        ring = ring_path()
        os.makedirs(os.path.dirname(ring) or ".", exist_ok=True)
        with open(ring, "w"):
            pass


def boot(state: dict, config: dict) -> float | None:
    """The kernel starts afresh, then the NVIDIA driver on disk loads, if there is one. Returns when it loaded
    (None: no driver)."""
    state["boot_time"] = time.time() - BOOT_AGO
    empty_ring()
    load_driver(state, config)
    write_proc_driver(state)
    if state["driver_version"] is None:
        return None
    for record in state["gpus"]:  # on an NVSwitch board each GPU waits for the fabric manager again
        if record.get("fabric_state") is not None:
            record.update(fabric_state="In Progress", fabric_status=None)
    loaded = random.uniform(4.0, 9.0)
    kmsg(state, LOAD_LINE.format(id=nvrm_id(state)), uptime=loaded)
    for record in state["gpus"]:
        if record.get("init_failed"):  # still broken: the driver fails it again at this load
            init_failed(state, record)
    return state["boot_time"] + loaded


def init_failed(state: dict, record: dict) -> None:
    """The driver cannot bring the GPU up (a dead card, its power cable, GSP firmware): it says so at every load,
    as the 5xx drivers print it (NVIDIA/cuda-samples#104, NVIDIA/gpu-operator#1146; gpu_models.md)."""
    bus = record["bus_id"][4:].lower()
    kmsg(state, f"NVRM: GPU {bus}: RmInitAdapter failed! (0x26:0x56:1463)")
    kmsg(state, f"NVRM: GPU {bus}: rm_init_adapter failed, device minor number {record['slot']}")


def nvrm_id(state: dict) -> str:
    volta = any(MODELS[r["model"]].architecture == "Volta" for r in state["gpus"])
    return (NVRM_ID_PROPRIETARY if volta else NVRM_ID_OPEN).format(driver=state["driver_version"])


def write_proc_driver(state: dict | None) -> None:
    """/proc/driver/nvidia as the loaded driver makes it: its version file; and on an NVSwitch board
    /proc/driver/nvidia-nvswitch/devices, one entry per NVSwitch; no driver loaded, neither directory."""
    directory = proc_driver_path()
    write_proc_nvswitch(state)
    write_caps(state)  # /proc/driver/nvidia-caps and /dev/nvidia-caps (migcaps.py)
    with contextlib.suppress(OSError):
        if not state or state.get("driver_version") is None:
            remove_tree(directory)
            return
        os.makedirs(directory, exist_ok=True)
        version = os.path.join(directory, "version")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(version)  # read-only (0444), as the kernel's
        with open(version, "w") as fh:
            fh.write(PROC_VERSION.format(id=nvrm_id(state)))
        os.chmod(version, 0o444)


def remove_tree(directory: str) -> None:
    if os.path.isdir(directory):
        import shutil  # here: shutil's import (lzma, bz2) would cost every nvidia-smi call 2.5 ms
        shutil.rmtree(directory)


def write_proc_nvswitch(state: dict | None) -> None:
    """The NVSwitch driver's device list (what NVIDIA's driver container tests for an NVSwitch system): a directory
    per switch, named by its PCI address, while a driver is loaded."""
    directory = proc_driver_path() + "-nvswitch"
    with contextlib.suppress(OSError):
        switches = (state.get("nvswitches") or []) if state and state.get("driver_version") else []
        remove_tree(directory)
        for bus_id in switches:
            os.makedirs(os.path.join(directory, "devices", bus_id), exist_ok=True)


def pci_short(bus_id: str) -> str:
    """00000000:00:06.0 -> 0000:00:06, the way Xid lines name a GPU."""
    domain, bus, device = bus_id.split(":")
    return f"{domain[-4:]}:{bus}:{device.split('.')[0]}".lower()
