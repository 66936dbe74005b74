"""gpusim: a faithful, stateful stand-in for nvidia-smi, nvidia-persistenced and dmesg (stdlib only, Python 3.9+).

Installed on lab nodes as /usr/bin/nvidia-smi (and /usr/bin/nvidia-persistenced): wrappers that import this
package from one zipapp file. What it prints, how it fails and what survives what follow real captures;
every model figure and its source is in gpu_models.md beside this package.

Usage (gpusim: `python -m provision.lab.gpusim`, `python provision/lab/gpusim`, `python gpusim.pyz`)
  nvidia-smi ARGS...                     when installed (copied or linked) under that name
  nvidia-persistenced ARGS...            likewise: daemonizes, writes its pid file
  dmesg [-T|--ctime] [-t|--notime] [-k|--kernel] [-P|--nopager]
                                         likewise: the simulated kernel's ring buffer (this boot's kernel
                                         lines, as `[   65.315783] message`); root only (kernel.dmesg_restrict=1)
  gpusim nvidia-smi|nvidia-persistenced|dmesg ARGS...
  gpusim init [--config FILE]            fresh state from the config (settings and faults forgotten);
                                         FILE, if given, first replaces the config; a boot (see reboot)
  gpusim reboot                          power cycle: the driver on disk (the installed one, see Driver) is
                                         the one that loads; persistence off, power limits and clocks back to
                                         defaults, pending -lmcd applied, fallen-off GPUs back; a degraded
                                         link stays degraded; volatile ECC counts back to 0, a pending page
                                         retirement or row remap takes effect; forced clock event reasons
                                         (power brake, thermal) stay; the kernel ring buffer starts afresh
                                         with the driver's load line; kills no process
  gpusim fault GPU KIND [--width N] [--gen N] [--remap-failure]
                                         GPU: slot number (0.. in config order), UUID or PCI bus id. KIND:
                                         off-bus: fallen off the bus while running (Xid 79): still counted,
                                         its handle fails, nvidia-smi says so and exits 15, the others keep
                                         their indexes; a reboot brings it back.
                                         gone: not enumerated at all (a dead card or riser, a pulled GPU):
                                         the others are renumbered; it stays gone across reboots until clear.
                                         pcie-degraded trains the link at x8 unless --width/--gen say otherwise.
                                         ecc: one uncorrectable (double bit) ECC error in device memory (Xid 48,
                                         then Xid 63): volatile and aggregate counts +1, a row marked for
                                         remapping (Ampere and later) or a page retired (Volta), pending until
                                         a reboot; refused where ECC is not enabled (GeForce). --remap-failure:
                                         the row could not be remapped (Xid 64, Remapping Failure Occurred).
                                         power-brake: HW Slowdown + HW Power Brake Slowdown (0x88) active, the
                                         GPU no longer idle; thermal: HW Slowdown + HW Thermal Slowdown (0x48);
                                         both hardware conditions: they stay across reboots until clear.
                                         pcie-errors: the kernel logs a PCIe AER corrected error (RxErr) of the
                                         GPU's link.
                                         clear: a repaired card: every fault above undone, its counts back to 0
                                         but the aggregate (lifetime) ECC count.
  gpusim set-driver VERSION              driver VERSION installed and loaded at once, without the reboot a real
                                         one needs (the config's, and the library file where there is one; the
                                         config's GPUs stay): a shortcut for tests; no config: nothing to do
  gpusim install DIR                     DIR/nvidia-smi, DIR/nvidia-persistenced and DIR/dmesg: wrappers that run
                                         this package (from where it was imported: a checkout or a zipapp)
  gpusim show                            the state as JSON

Environment
  NVIDIA_SIM_CONFIG   config JSON (default /etc/nvidia-sim/config.json); none: the driver is not loaded
  NVIDIA_SIM_STATE    state JSON (default /var/lib/nvidia-sim/state.json), created on first use
  NVIDIA_SIM_RUNDIR   nvidia-persistenced's pid file directory (default /var/run/nvidia-persistenced)
  NVIDIA_SIM_KMSG     the kernel log the simulated driver writes, every boot's lines, as syslog keeps them
                      (default /var/log/nvidia-sim-kern.log)
  NVIDIA_SIM_DMESG    the kernel ring buffer: this boot's kernel lines as dmesg prints them, emptied at each
                      boot (default /run/nvidia-sim/dmesg; where only NVIDIA_SIM_KMSG is set, that path + ".ring",
                      so that a test's simulator never writes to /run)
  NVIDIA_SIM_UID      act as this uid (default: the effective uid); setters and dmesg need 0
  NVIDIA_SIM_LIBRARY  the installed driver's NVML library version, a file a driver package ships holding its
                      full version, "580.159.04" (default /usr/lib/provision-lab/nvml-library-version)
  NVIDIA_SIM_PROC_DRIVER  /proc/driver/nvidia, which the loaded driver makes: its version file, written at
                      each boot, gone while no driver is loaded (default /proc/driver/nvidia; where another
                      NVIDIA_SIM_* path is set, the state's path + ".proc-driver-nvidia", so that a test's
                      simulator never writes to /proc)

Driver
  Installed and loaded, as on a real machine. The installed driver is what NVIDIA_SIM_LIBRARY says; without
  that file, the config's driver_version (a simulator set up on its own; null: none installed). The loaded
  one is the kernel module a boot (init, reboot) loaded: the installed one at that boot, or none. Installing
  another driver changes what nvidia-smi (the library) is, not the module: every nvidia-smi run then fails
  with "Failed to initialize NVML: Driver/library version mismatch" (exit 18) until the next boot; installed
  where none is loaded, it cannot communicate with the driver (exit 9).

Config
  {"driver_version": "580.159.04",   (the installed driver where no NVIDIA_SIM_LIBRARY file is; null: none)
   "gpus": [{"model": "v100-sxm2-16gb", "count": 4},
            {"model": "h100-80gb-hbm3", "uuid": "GPU-5afa2088-...", "bus_id": "00000000:00:06.0"}],
   "cpus": 16, "numa_nodes": 1, "virtualization_mode": "None", "cuda_version": "13.0",
   "nics": [{"name": "mlx5_0", "numa": 0, "near_gpu": 0}, {"name": "mlx5_bond_0", "numa": 1}]}
  Models: v100-sxm2-16gb, rtx-3090, rtx-4090, h100-80gb-hbm3. Per-GPU overrides (uuid, bus_id,
  vbios, serial, module_id, pdi) are one value when count is 1, else a list of count values.
  Without overrides UUIDs are derived from the hostname and slot, so nodes differ.
  nics: the RDMA NICs topo -m shows (NIC0.. in this order; none: GPUs only). near_gpu, optional: the slot
  of the GPU behind the same PCIe switch (PIX); numa: its NUMA node (default: near_gpu's, else 0).
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import hashlib
import json
import os
import random
import shutil
import signal
import socket
import sys
import tempfile
import time
import zlib
from dataclasses import dataclass
from functools import cached_property
from typing import Callable, Iterator, Optional

# --- where things live --------------------------------------------------------------------

ENV_DEFAULTS = {
    "NVIDIA_SIM_CONFIG": "/etc/nvidia-sim/config.json",
    "NVIDIA_SIM_STATE": "/var/lib/nvidia-sim/state.json",
    "NVIDIA_SIM_RUNDIR": "/var/run/nvidia-persistenced",
    "NVIDIA_SIM_KMSG": "/var/log/nvidia-sim-kern.log",
    "NVIDIA_SIM_DMESG": "/run/nvidia-sim/dmesg",
    "NVIDIA_SIM_LIBRARY": "/usr/lib/provision-lab/nvml-library-version",
    "NVIDIA_SIM_PROC_DRIVER": "/proc/driver/nvidia",
}
DEFAULT_DRIVER = "580.159.04"
CUDA_FOR_DRIVER = {"580": "13.0", "575": "12.9", "570": "12.8", "565": "12.7", "560": "12.6", "555": "12.5",
                   "550": "12.4", "545": "12.3", "535": "12.2", "530": "12.1", "525": "12.0"}
STATE_VERSION = 2  # 2: the health keys of new_record (ECC, retired pages, remapped rows, clock events)


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


# --- nvidia-smi's return codes (man page, RETURN VALUE) -----------------------------------------

RC_OK, RC_INVALID, RC_NOT_SUPPORTED, RC_NO_PERMISSION, RC_NOT_FOUND, RC_NO_DRIVER = 0, 2, 3, 4, 6, 9
RC_GPU_LOST = 15  # nvidia-smi(1): "GPU has fallen off the bus or has otherwise become inaccessible"
RC_VERSION_MISMATCH = 18  # nvml.h NVML_ERROR_LIB_RM_VERSION_MISMATCH: what nvidia-smi exits with on it
RC_SIM = 255  # the simulator itself cannot do what was asked (bad config, unsimulated option)

# --- what the real programs print ---------------------------------------------------------------

NO_DRIVER = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
             "Make sure that the latest NVIDIA driver is installed and running.\n\n")
NO_DEVICES = "No devices were found\n"
# The library (nvidia-smi's NVML) is not the loaded kernel module's version: a driver installed, no reboot yet.
# Since the 5xx drivers the library's version follows, as its first two components ("550.144", "570.124").
VERSION_MISMATCH = "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: {nvml}\n"
HELP_HINT = "Please run 'nvidia-smi -h' for help."
INVALID_COMBINATION = f"Invalid combination of input arguments. {HELP_HINT}\n"
ALL_DONE = "All done."
MOVING_ON = "Treating as warning and moving on."
TERMINATING = "Terminating early due to previous errors."
# The 5xx-driver wording (seen after -lgc and -mig); older drivers said "This settings will go
# back to default as soon as driver unloads ...". Printed after each volatile setting.
PERSISTENCE_WARNING = ("\nWarning: persistence mode is disabled on device {bus}. See the Known Issues section of "
                       "the nvidia-smi(1) man page for more information. Run with [--help | -h] switch to get more "
                       "information on how to enable persistence mode.")
PM_DEPRECATED = ("NVRM: Persistence mode is deprecated and will be removed in a future release. "
                 "Please use nvidia-persistenced instead.")
PERSISTENCED_FAILED = "nvidia-persistenced failed to initialize. Check syslog for more details.\n"
BAD_FIELD = 'Field "{name}" is not a valid field to query.\n\n'
XML_WITH_DISPLAY = ("Invalid combination of input arguments: --display/-d flags can not be combined with "
                    "-x/--xml-format flags.\n")
TOPO_LEGEND = """
Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks
"""
PROCESSES_BOX = """\
+-----------------------------------------------------------------------------------------+
| Processes:                                                                              |
|  GPU   GI   CI              PID   Type   Process name                        GPU Memory |
|        ID   ID                                                               Usage      |
|=========================================================================================|
|  No running processes found                                                             |
+-----------------------------------------------------------------------------------------+
"""

# --- models ---------------------------------------------------------------------------------
# Every figure is sourced in gpu_models.md; [H100] means the verbatim captures in
# tests/fixtures/real/h100-80gb-hbm3.


@dataclass(frozen=True)
class Clocks:
    graphics: int
    sm: int
    memory: int
    video: int


@dataclass(frozen=True)
class Thermal:
    """Thresholds as -q prints them. With tlimit_total the "T.Limit" layout (current + T.Limit = total)."""

    shutdown: int
    slowdown: int
    max_operating: int
    target: Optional[int] = None
    memory_max: Optional[int] = None
    tlimit_total: Optional[int] = None


@dataclass(frozen=True)
class Model:
    key: str
    name: str
    brand: str
    architecture: str
    compute_cap: str
    device_id: str
    subsystem_id: str
    sub_class: str  # PCI sub class: 0x2 3D controller (datacenter), 0x0 VGA (GeForce)
    vbios: str
    board_part: str
    gpu_part: str
    inforom: tuple  # image, OEM, ECC, power management object
    memory_mib: int
    reserved_mib: int
    bar1_mib: int
    power_default: float
    power_min: float
    power_max: float
    pcie_gen: int
    pcie_width: int
    pcie_host_max: Optional[int]
    max_clocks: Clocks
    idle_clocks: Clocks
    boost_clock: Optional[int]
    default_app_clocks: Optional[tuple]  # (memory, graphics); None where -ac is refused (GeForce)
    supported_clocks: tuple  # ((memory, (graphics, ...)), ...), as SUPPORTED_CLOCKS lists them
    locked_mem_clocks: bool  # -lmc: Ampere or newer, but not Hopper
    deferred_mem_clocks: bool  # -lmcd: Hopper's way
    ecc_mode: Optional[str]  # "Enabled", "Disabled", or None where the GPU has no ECC
    volta_ecc: bool  # Volta's per-unit single/double bit ECC counters instead of SRAM/DRAM
    retired_pages: bool  # page retirement (pre-Ampere); row remapping otherwise
    remap_banks: Optional[int]
    mig: bool
    fan: bool
    serial: bool
    gsp: bool
    c2c_mode: str
    display_attached: str
    idle_pstate: str
    idle_power: float
    memory_power: Optional[float]
    idle_temp: int
    memory_temp: Optional[int]
    thermal: Thermal
    nvlink: str  # "all" (every pair NV<links>), "dgx1" (hybrid cube mesh), "" (PCIe only)
    nvlink_links: int = 0
    nvlink_speed: str = ""
    locked_gpu_clocks: bool = True  # -lgc: Volta and newer, i.e. every model here
    events_supported: str = "0x00000000000001FF"

    @property
    def app_clocks(self) -> bool:
        return self.default_app_clocks is not None

    def graphics_clocks(self, memory: int) -> tuple:
        return dict(self.supported_clocks).get(memory, ())

    def memory_clocks(self) -> tuple:
        return tuple(memory for memory, _ in self.supported_clocks)


def descending(top: int, bottom: int, step: int = 15) -> tuple:
    return tuple(range(top, bottom - 1, -step))


def volta_grid(top: int, bottom: int) -> tuple:
    """Volta's 7.5 MHz graphics grid, rounded down (1530, 1522, 1515, ...), as real V100 lists show."""
    return tuple(bottom + k * 15 // 2 for k in range((top - bottom) * 2 // 15, -1, -1))


MODELS = {m.key: m for m in (
    Model(
        key="v100-sxm2-16gb", name="Tesla V100-SXM2-16GB", brand="Tesla", architecture="Volta",
        compute_cap="7.0", device_id="0x1DB110DE", subsystem_id="0x121210DE", sub_class="0x2",
        vbios="88.00.4F.00.09", board_part="900-2G503-0300-000", gpu_part="1DB1-895-A1",
        inforom=("G503.0201.00.03", "1.1", "5.0", "N/A"),
        memory_mib=16384, reserved_mib=240, bar1_mib=16384,
        power_default=300.0, power_min=150.0, power_max=300.0,
        pcie_gen=3, pcie_width=16, pcie_host_max=None,
        max_clocks=Clocks(1530, 1530, 877, 1372), idle_clocks=Clocks(135, 135, 877, 555), boost_clock=1530,
        default_app_clocks=(877, 1312), supported_clocks=((877, volta_grid(1530, 135)),),
        locked_mem_clocks=False, deferred_mem_clocks=False,
        ecc_mode="Enabled", volta_ecc=True, retired_pages=True, remap_banks=None, mig=False, fan=False,
        serial=True, gsp=False, c2c_mode="N/A", display_attached="No",
        idle_pstate="P0", idle_power=44.5, memory_power=None, idle_temp=37, memory_temp=33,
        thermal=Thermal(shutdown=90, slowdown=87, max_operating=83, memory_max=85),
        nvlink="dgx1", nvlink_links=6, nvlink_speed="25.781 GB/s",
    ),
    Model(
        key="rtx-3090", name="NVIDIA GeForce RTX 3090", brand="GeForce", architecture="Ampere",
        compute_cap="8.6", device_id="0x220410DE", subsystem_id="0x147D10DE", sub_class="0x0",
        vbios="94.02.71.40.72", board_part="N/A", gpu_part="2204-300-A1",
        inforom=("G001.0000.03.03", "2.0", "N/A", "N/A"),
        memory_mib=24576, reserved_mib=316, bar1_mib=32768,
        power_default=350.0, power_min=100.0, power_max=375.0,
        pcie_gen=4, pcie_width=16, pcie_host_max=None,
        max_clocks=Clocks(2100, 2100, 9751, 1950), idle_clocks=Clocks(210, 210, 405, 555), boost_clock=None,
        default_app_clocks=None,
        supported_clocks=tuple((m, descending(2100, 210)) for m in (9751, 9501, 5001, 810))
        + ((405, descending(420, 210)),),
        locked_mem_clocks=True, deferred_mem_clocks=False,
        ecc_mode=None, volta_ecc=False, retired_pages=False, remap_banks=None, mig=False, fan=True,
        serial=False, gsp=True, c2c_mode="N/A", display_attached="No",
        idle_pstate="P8", idle_power=27.2, memory_power=None, idle_temp=37, memory_temp=None,
        thermal=Thermal(shutdown=98, slowdown=95, max_operating=93, target=83),
        nvlink="",
    ),
    Model(
        key="rtx-4090", name="NVIDIA GeForce RTX 4090", brand="GeForce", architecture="Ada Lovelace",
        compute_cap="8.9", device_id="0x268410DE", subsystem_id="0xF29710B0", sub_class="0x0",
        vbios="95.02.3C.00.EB", board_part="N/A", gpu_part="2684-301-A1",
        inforom=("G002.0000.00.03", "2.0", "6.16", "N/A"),
        memory_mib=24564, reserved_mib=354, bar1_mib=256,
        power_default=450.0, power_min=150.0, power_max=450.0,
        pcie_gen=4, pcie_width=16, pcie_host_max=4,
        max_clocks=Clocks(3105, 3105, 10501, 2415), idle_clocks=Clocks(210, 210, 405, 1185), boost_clock=None,
        default_app_clocks=None,
        supported_clocks=tuple((m, descending(3105, 210)) for m in (10501, 10251, 5001, 810))
        + ((405, descending(420, 210)),),
        locked_mem_clocks=True, deferred_mem_clocks=False,
        ecc_mode="Disabled", volta_ecc=False, retired_pages=False, remap_banks=192, mig=False, fan=True,
        serial=False, gsp=True, c2c_mode="N/A", display_attached="No",
        idle_pstate="P8", idle_power=20.0, memory_power=None, idle_temp=28, memory_temp=None,
        thermal=Thermal(shutdown=-7, slowdown=-2, max_operating=0, target=84, tlimit_total=84),
        nvlink="",
    ),
    Model(
        key="h100-80gb-hbm3", name="NVIDIA H100 80GB HBM3", brand="NVIDIA", architecture="Hopper",
        compute_cap="9.0", device_id="0x233010DE", subsystem_id="0x16C110DE", sub_class="0x2",
        vbios="96.00.DA.00.0C", board_part="692-2G520-0200-000", gpu_part="2330-885-A1",
        inforom=("G520.0200.00.05", "2.1", "7.16", "N/A"),
        memory_mib=81559, reserved_mib=480, bar1_mib=131072,
        power_default=700.0, power_min=200.0, power_max=700.0,
        pcie_gen=5, pcie_width=16, pcie_host_max=None,
        max_clocks=Clocks(1980, 1980, 2619, 1545), idle_clocks=Clocks(345, 345, 2619, 765), boost_clock=1980,
        default_app_clocks=(2619, 1980),
        supported_clocks=((2619, descending(1980, 345)), (1593, descending(1980, 345))),
        locked_mem_clocks=False, deferred_mem_clocks=True,
        ecc_mode="Enabled", volta_ecc=False, retired_pages=False, remap_banks=2560, mig=True, fan=False,
        serial=True, gsp=True, c2c_mode="Disabled", display_attached="Yes",
        idle_pstate="P0", idle_power=73.8, memory_power=32.2, idle_temp=36, memory_temp=38,
        thermal=Thermal(shutdown=-8, slowdown=-2, max_operating=0, memory_max=0, tlimit_total=87),
        nvlink="all", nvlink_links=18, nvlink_speed="26.562 GB/s",
    ),
)}

# DGX-1 (8x V100 SXM2) hybrid cube-mesh: the NVLink bond between each pair, as its topo -m prints it.
DGX1_LINKS = (
    (0, 1, 1, 2, 2, 0, 0, 0),
    (1, 0, 2, 1, 0, 2, 0, 0),
    (1, 2, 0, 2, 0, 0, 1, 0),
    (2, 1, 2, 0, 0, 0, 0, 1),
    (2, 0, 0, 0, 0, 1, 1, 2),
    (0, 2, 0, 0, 1, 0, 2, 1),
    (0, 0, 1, 0, 1, 2, 0, 2),
    (0, 0, 0, 1, 2, 1, 2, 0),
)

# --- errors ---------------------------------------------------------------------------------


class SimError(Exception):
    """The simulator cannot go on (bad config, unsimulated option): a message on stderr, exit 255."""


class Exit(Exception):
    """Stop with this output and return code, as the real program would."""

    def __init__(self, text: str, rc: int):
        super().__init__(text)
        self.text, self.rc = text, rc


# --- config and state -----------------------------------------------------------------------

OVERRIDABLE = ("uuid", "bus_id", "vbios", "serial", "module_id", "pdi")
VOLATILE = ("power_limit", "app_clocks", "locked_gpu", "locked_mem")  # lost when the driver unloads


def load_config() -> Optional[dict]:
    """The node's GPUs; None where there is no config (a host whose driver is not loaded)."""
    path = env_path("NVIDIA_SIM_CONFIG")
    try:
        with open(path) as fh:
            config = json.load(fh)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise SimError(f"cannot read the config {path}: {exc}")
    if not isinstance(config, dict) or not isinstance(config.get("gpus", []), list):
        raise SimError(f"{path}: expected {{\"gpus\": [{{\"model\": M, \"count\": N}}, ...]}}")
    for entry in config.get("gpus", []):
        if not isinstance(entry, dict) or entry.get("model") not in MODELS:
            raise SimError(f"{path}: unknown GPU {entry!r}; models: {', '.join(MODELS)}")
    check_nics(path, config)
    return config


def check_nics(path: str, config: dict) -> None:
    """NICs with a name, a NUMA node the host has and, if any, a near GPU slot the config has."""
    nics = config.get("nics", [])
    slots = sum(int(entry.get("count", 1)) for entry in config.get("gpus", []))
    nodes = int(config.get("numa_nodes") or 1)

    def fits(nic) -> bool:
        if not isinstance(nic, dict) or not isinstance(nic.get("name"), str) or not nic["name"]:
            return False
        bounds = (("numa", nodes), ("near_gpu", slots))
        return all(nic.get(key) is None or nic[key] in range(top) for key, top in bounds)

    if not isinstance(nics, list) or not all(fits(nic) for nic in nics):
        raise SimError(f'{path}: expected "nics": [{{"name": "mlx5_0", "numa": 0..{nodes - 1}, '
                       f'"near_gpu": 0..{slots - 1} (optional)}}, ...], got {nics!r}')


def config_digest(config: dict) -> str:
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:16]


def installed_driver(config: dict) -> Optional[str]:
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


def new_state(config: dict) -> dict:
    hostname = socket.gethostname()
    records = []
    for entry in config.get("gpus", []):
        count = int(entry.get("count", 1))
        for k in range(count):
            records.append(new_record(len(records), MODELS[entry["model"]], overrides(entry, k, count), hostname))
    state = {
        "version": STATE_VERSION,
        "config_digest": config_digest(config),
        "hostname": hostname,
        "cpus": int(config.get("cpus") or os.cpu_count() or 1),
        "numa_nodes": int(config.get("numa_nodes") or 1),
        "virtualization_mode": str(config.get("virtualization_mode") or "None"),
        "nics": [{"name": nic["name"], "numa": nic.get("numa"), "near_gpu": nic.get("near_gpu")}
                 for nic in config.get("nics", [])],
        "boot_time": time.time(),
        "daemon": None,
        "gpus": records,
    }
    load_driver(state, config)  # first use: as if the machine had booted with the driver on disk
    return state


def overrides(entry: dict, k: int, count: int) -> dict:
    found = {}
    for key in OVERRIDABLE:
        if key not in entry:
            continue
        value = entry[key]
        if isinstance(value, list):
            if len(value) != count:
                raise SimError(f"config: {key} has {len(value)} values for {count} GPUs of {entry['model']}")
            found[key] = value[k]
        elif count == 1:
            found[key] = value
        else:
            raise SimError(f"config: {key} for {count} GPUs must be a list of {count} values")
    return found


def new_record(slot: int, model: Model, given: dict, hostname: str) -> dict:
    # Identity derived from host and slot: stable across runs, different on every node.
    h = hashlib.sha256(f"{hostname}/{slot}/{model.key}".encode()).hexdigest()
    record = {
        "slot": slot,
        "model": model.key,
        "uuid": f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}",
        "bus_id": f"00000000:{0x01 + 0x10 * (slot % 16):02X}:{slot // 16:02X}.0",
        "vbios": model.vbios,
        "serial": str(int(h[32:44], 16) % 10**13).zfill(13) if model.serial else None,
        "module_id": slot + 1,
        "pdi": f"0x{int(h[44:60], 16):x}",
        "legacy_pm": False,  # persistence set by nvidia-smi -pm 1 without the daemon
        "daemon_pm": None,  # persistence set through the running daemon; None: the daemon's default
        "deferred_mem": None,  # -lmcd value, applied at the next boot
        "deferred_active": None,  # the -lmcd value in force since the last boot
        "off_bus": False,  # fallen off the bus since boot: enumerated, but its handle fails
        "gone": False,  # not enumerated at all (dead, pulled): the others are renumbered
        "link": None,  # {"gen": g, "width": w} when the link trained below its maximum
    }
    record.update({key: None for key in VOLATILE})
    record.update(healthy())
    record.update(given)
    return record


def healthy() -> dict:
    """A GPU's health keys with nothing wrong (state version 2)."""
    return {
        "ecc_volatile": 0,  # uncorrectable (double bit) ECC errors in device memory since the driver loaded
        "ecc_aggregate": 0,  # the same over the board's life (kept in its InfoROM: survives everything)
        "retired_dbe": 0,  # pages retired for a double bit error (page retirement: Volta)
        "retired_pending": False,  # a retired page not yet blacklisted: the next boot does it
        "remap_unc": 0,  # rows remapped for an uncorrectable error (row remapper: Ampere and later)
        "remap_pending": False,  # a row marked for remapping: the next GPU reset (here: boot) does it
        "remap_failure": False,  # a remapping ever failed
        "forced_reasons": 0,  # clock event reason bits a hardware fault holds active (NVML bit values)
        "reasons_since": {},  # hex bit -> since when (time.time()): the fault, or the last driver load
    }


def migrate(state: dict) -> Optional[dict]:
    """An older state file brought up to STATE_VERSION; None where it cannot be."""
    if state.get("version") == 1:  # before the health keys: nothing wrong yet
        for record in state.get("gpus", []):
            for key, value in healthy().items():
                record.setdefault(key, value)
        state["version"] = 2
    return state if state.get("version") == STATE_VERSION else None


def load_state(path: str) -> Optional[dict]:
    try:
        with open(path) as fh:
            state = json.load(fh)
    except (OSError, ValueError):
        return None
    return migrate(state) if isinstance(state, dict) else None


def save_state(path: str, state: dict) -> None:
    """Temp file + rename: a reader sees the old state or the new one, never half of one."""
    directory = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".state-", suffix=".json")
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(state, fh, indent=2, sort_keys=True)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def open_state(config: dict, fresh: bool = False) -> Iterator[dict]:
    """The state under an exclusive lock (several nvidia-smi may run at once), saved if it changed.

    A user who can read but not write the state directory still gets answers to queries.
    """
    path = env_path("NVIDIA_SIM_STATE")
    lock = None
    try:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        lock = open(path + ".lock", "a+")
    except OSError:
        pass
    try:
        if lock is not None:
            fcntl.flock(lock, fcntl.LOCK_EX)
        state = None if fresh else load_state(path)
        if state is None or state.get("config_digest") != config_digest(config):
            state = new_state(config)  # first use, or the config changed: new hardware
        before = json.dumps(state, sort_keys=True)
        yield state
        if lock is not None and json.dumps(state, sort_keys=True) != before:
            save_state(path, state)
    finally:
        if lock is not None:
            lock.close()


def reset_volatile(record: dict) -> None:
    for key in VOLATILE:
        record[key] = None


# --- the persistence daemon, as nvidia-smi sees it ------------------------------------------


def live_daemon_pid() -> Optional[int]:
    try:
        with open(pidfile_path()) as fh:
            pid = int(fh.read().strip())
    except (OSError, ValueError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass  # alive, owned by someone else
    return pid


def sync_daemon(state: dict) -> Optional[dict]:
    """The running daemon's record, or None. A daemon that died takes its per-GPU settings with it."""
    pid = live_daemon_pid()
    daemon = state.get("daemon")
    if daemon and daemon.get("pid") != pid:
        daemon = state["daemon"] = None
        for record in state["gpus"]:
            record["daemon_pm"] = None
    if pid and not daemon:
        daemon = state["daemon"] = {"pid": pid, "persistence": True}
    return daemon


def is_persistent(record: dict, daemon: Optional[dict]) -> bool:
    if record["legacy_pm"]:
        return True
    if daemon is None:
        return False
    return record["daemon_pm"] if record["daemon_pm"] is not None else daemon["persistence"]


def unload_idle_gpus(state: dict, daemon: Optional[dict]) -> None:
    """Without persistence the driver lets go of a GPU when its last client exits: settings are lost."""
    for record in state["gpus"]:
        if not is_persistent(record, daemon):
            reset_volatile(record)


# --- the kernel log -------------------------------------------------------------------------


def kmsg(state: dict, message: str, source: str = "kernel", uptime: Optional[float] = None) -> None:
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
            fh.write(f"{stamp} {state.get('hostname') or socket.gethostname()} {source}: {prefix}{message}\n")
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


def boot(state: dict, config: dict) -> Optional[float]:
    """The kernel starts afresh, then the NVIDIA driver on disk loads, if there is one. Returns when it loaded
    (None: no driver)."""
    state["boot_time"] = time.time() - BOOT_AGO
    empty_ring()
    load_driver(state, config)
    write_proc_driver(state)
    if state["driver_version"] is None:
        return None
    loaded = random.uniform(4.0, 9.0)
    kmsg(state, LOAD_LINE.format(id=nvrm_id(state)), uptime=loaded)
    return state["boot_time"] + loaded


def nvrm_id(state: dict) -> str:
    volta = any(MODELS[r["model"]].architecture == "Volta" for r in state["gpus"])
    return (NVRM_ID_PROPRIETARY if volta else NVRM_ID_OPEN).format(driver=state["driver_version"])


def write_proc_driver(state: Optional[dict]) -> None:
    """/proc/driver/nvidia as the loaded driver makes it: its version file; no driver loaded, no directory."""
    directory = proc_driver_path()
    with contextlib.suppress(OSError):
        if not state or state.get("driver_version") is None:
            if os.path.isdir(directory):
                shutil.rmtree(directory)
            return
        os.makedirs(directory, exist_ok=True)
        version = os.path.join(directory, "version")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(version)  # read-only (0444), as the kernel's
        with open(version, "w") as fh:
            fh.write(PROC_VERSION.format(id=nvrm_id(state)))
        os.chmod(version, 0o444)


def pci_short(bus_id: str) -> str:
    """00000000:00:06.0 -> 0000:00:06, the way Xid lines name a GPU."""
    domain, bus, device = bus_id.split(":")
    return f"{domain[-4:]}:{bus}:{device.split('.')[0]}".lower()


# --- one GPU as nvidia-smi shows it ---------------------------------------------------------


# Clock event reason bits (nvml.h nvmlClocksEventReason*): the ones a fault forces.
REASON_IDLE, REASON_HW_SLOWDOWN, REASON_HW_THERMAL, REASON_HW_POWER_BRAKE = 0x1, 0x8, 0x40, 0x80


class Special(str):
    """A value nvidia-smi prints bare in -q and in brackets in CSV: N/A, Not Supported, ..."""


NA = Special("N/A")
DEPRECATED = Special("Requested functionality has been deprecated")


def clamp(value: int, bounds: Optional[list]) -> int:
    return value if not bounds else max(bounds[0], min(bounds[1], value))


class Host:
    """What one run sees: the state, the daemon, the GPUs the driver enumerated (indexed 0..n-1), among them
    any that fell off the bus since (lost: counted, but no handle)."""

    def __init__(self, state: dict):
        self.state = state
        self.daemon = sync_daemon(state)
        enumerated = [r for r in state["gpus"] if not r.get("gone")]
        self.gpus = [Gpu(self, record, index) for index, record in enumerate(enumerated)]

    @property
    def driver(self) -> str:
        return self.state["driver_version"]

    @property
    def cuda(self) -> str:
        return self.state["cuda_version"]

    @property
    def nics(self) -> list:
        return self.state.get("nics") or []  # a state file from before NICs were simulated has none


class Gpu:
    def __init__(self, host: Host, record: dict, index: int):
        self.host, self.record, self.index = host, record, index
        self.model = MODELS[record["model"]]

    @property
    def bus_id(self) -> str:
        return self.record["bus_id"]

    @property
    def lost(self) -> bool:
        return bool(self.record["off_bus"])

    def handle_error(self) -> str:
        """What nvidia-smi prints for a GPU whose handle NVML cannot get (a 4-digit PCI domain)."""
        return f"Unable to determine the device handle for GPU{self.bus_id[4:]}: Unknown Error\n"

    @property
    def uuid(self) -> str:
        return self.record["uuid"]

    @property
    def persistent(self) -> bool:
        return is_persistent(self.record, self.host.daemon)

    @property
    def power_limit(self) -> float:
        return self.record["power_limit"] if self.record["power_limit"] is not None else self.model.power_default

    @property
    def app_clocks(self) -> Optional[tuple]:
        """(memory, graphics) applications clocks; None on GPUs without them."""
        return tuple(self.record["app_clocks"]) if self.record["app_clocks"] else self.model.default_app_clocks

    @property
    def clocks(self) -> Clocks:
        """Idle clocks, pulled into the locked ranges: locked clocks apply even with no work running."""
        idle = self.model.idle_clocks
        graphics = clamp(idle.graphics, self.record["locked_gpu"])
        memory = clamp(idle.memory, self.record["locked_mem"])
        if self.record["deferred_active"] and not self.record["locked_mem"]:
            memory = self.record["deferred_active"]
        return Clocks(graphics, graphics, memory, idle.video)

    @property
    def link_gen(self) -> int:
        return (self.record["link"] or {}).get("gen") or self.model.pcie_gen

    @property
    def link_width(self) -> int:
        return (self.record["link"] or {}).get("width") or self.model.pcie_width

    @property
    def pci(self) -> tuple:
        """(domain, bus, device, function) as integers."""
        domain, bus, rest = self.bus_id.split(":")
        device, function = rest.split(".")
        return int(domain, 16), int(bus, 16), int(device, 16), int(function, 16)

    @property
    def ecc_enabled(self) -> bool:
        return self.model.ecc_mode == "Enabled"

    @property
    def event_reasons(self) -> int:
        """The active clock event reasons (NVML bits): Idle, unless a hardware fault holds others active."""
        return self.record["forced_reasons"] or REASON_IDLE

    def event_reason_us(self, bit: int) -> int:
        """Microseconds the reason has been active since the driver loaded (0 where it never was)."""
        since = self.record["reasons_since"].get(f"0x{bit:x}")
        if since is None or not self.record["forced_reasons"] & bit:
            return 0
        return max(0, int((time.time() - since) * 1e6))

    # Live readings: near the model's idle values, a little noise so nothing depends on them.
    @cached_property
    def temperature(self) -> int:
        return self.model.idle_temp + random.randint(0, 1)

    @cached_property
    def memory_temperature(self) -> Optional[int]:
        return None if self.model.memory_temp is None else self.model.memory_temp + random.randint(0, 1)

    @cached_property
    def power_draw(self) -> float:
        return round(self.model.idle_power * random.uniform(0.995, 1.01), 2)

    @cached_property
    def power_average(self) -> float:
        return round(self.model.idle_power * random.uniform(0.995, 1.01), 2)


# --- --query-gpu and friends ----------------------------------------------------------------


@dataclass(frozen=True)
class Field:
    names: tuple  # the first is the canonical name, which the CSV header shows
    unit: str
    get: Callable


def field(names: str, unit: str, get: Callable) -> Field:
    return Field(tuple(names.split("|")), unit, get)


def enabled(flag: bool) -> str:
    return "Enabled" if flag else "Disabled"


def active(flag: bool) -> str:
    return "Active" if flag else "Not Active"


def csv_timestamp() -> str:
    now = time.time()
    return time.strftime("%Y/%m/%d %H:%M:%S", time.localtime(now)) + f".{int(now * 1000) % 1000:03d}"


def when(condition: bool, value):
    return value if condition else None


def memory_used(g: Gpu) -> int:
    return 0


# --query-gpu's clocks_event_reasons.* fields and their NVML bits (nvmlClocksEventReason*, nvml.h).
EVENT_REASONS = {"gpu_idle": REASON_IDLE, "applications_clocks_setting": 0x2, "sw_power_cap": 0x4,
                 "hw_slowdown": REASON_HW_SLOWDOWN, "hw_thermal_slowdown": REASON_HW_THERMAL,
                 "hw_power_brake_slowdown": REASON_HW_POWER_BRAKE, "sw_thermal_slowdown": 0x20, "sync_boost": 0x10}


def ecc_count(g: Gpu, kind: str, span: str):
    """ecc.errors.<kind>.<span>.total: uncorrected counts from the state, corrected ones 0; N/A without ECC."""
    if not g.ecc_enabled:
        return None
    if kind == "corrected":
        return 0
    return g.record["ecc_volatile"] if span == "volatile" else g.record["ecc_aggregate"]


def yes_no(flag: bool) -> str:
    return "Yes" if flag else "No"


def ecc_fields() -> list:
    counts = [field(f"ecc.errors.{kind}.{span}.total", "", lambda g, k=kind, s=span: ecc_count(g, k, s))
              for kind in ("corrected", "uncorrected") for span in ("volatile", "aggregate")]
    return counts + [
        field("ecc.mode.current", "", lambda g: g.model.ecc_mode),
        field("ecc.mode.pending", "", lambda g: g.model.ecc_mode),
    ]


def clock_fields() -> list:
    current = [field(f"clocks.current.{name}|clocks.{short}", "MHz", lambda g, n=name: getattr(g.clocks, n))
               for name, short in (("graphics", "gr"), ("sm", "sm"), ("memory", "mem"), ("video", "video"))]
    pairs = (("applications", lambda g: g.app_clocks), ("default_applications", lambda g: g.model.default_app_clocks))
    app = [field(f"clocks.{kind}.{name}|clocks.{kind}.{short}", "MHz",
                 lambda g, pair=pair, i=index: pair(g) and pair(g)[i])
           for kind, pair in pairs for name, short, index in (("graphics", "gr", 1), ("memory", "mem", 0))]
    return current + app + [
        field("clocks.max.graphics|clocks.max.gr", "MHz", lambda g: g.model.max_clocks.graphics),
        field("clocks.max.sm", "MHz", lambda g: g.model.max_clocks.sm),
        field("clocks.max.memory|clocks.max.mem", "MHz", lambda g: g.model.max_clocks.memory),
    ]


def power_fields() -> list:
    return [
        field("power.management", "", lambda g: "Enabled"),
        field("power.draw", "W", lambda g: g.power_draw),
        field("power.draw.average|gpu.power.draw.average", "W", lambda g: g.power_average),
        field("power.draw.instant|gpu.power.draw.instant", "W", lambda g: g.power_draw),
        field("power.limit|gpu.power.requested_limit", "W", lambda g: g.power_limit),
        field("enforced.power.limit|gpu.power.current_limit", "W", lambda g: g.power_limit),
        field("power.default_limit|gpu.power.default_limit", "W", lambda g: g.model.power_default),
        field("power.min_limit|gpu.power.min_limit", "W", lambda g: g.model.power_min),
        field("power.max_limit|gpu.power.max_limit", "W", lambda g: g.model.power_max),
    ]


GPU_FIELDS = [
    field("timestamp", "", lambda g: csv_timestamp()),
    field("driver_version", "", lambda g: g.host.driver),
    field("count", "", lambda g: len(g.host.gpus)),
    field("name|gpu_name", "", lambda g: g.model.name),
    field("serial|gpu_serial", "", lambda g: g.record["serial"]),
    field("uuid|gpu_uuid", "", lambda g: g.uuid),
    field("pci.bus_id|gpu_bus_id", "", lambda g: g.bus_id),
    field("pci.domain", "", lambda g: f"0x{g.pci[0]:04X}"),
    field("pci.bus", "", lambda g: f"0x{g.pci[1]:02X}"),
    field("pci.device", "", lambda g: f"0x{g.pci[2]:02X}"),
    field("pci.device_id", "", lambda g: g.model.device_id),
    field("pci.sub_device_id", "", lambda g: g.model.subsystem_id),
    field("pcie.link.gen.current", "", lambda g: g.link_gen),
    field("pcie.link.gen.gpucurrent", "", lambda g: g.link_gen),
    field("pcie.link.gen.max", "", lambda g: g.model.pcie_gen),
    field("pcie.link.gen.gpumax", "", lambda g: g.model.pcie_gen),
    field("pcie.link.gen.hostmax", "", lambda g: g.model.pcie_host_max),
    field("pcie.link.width.current", "", lambda g: g.link_width),
    field("pcie.link.width.max", "", lambda g: g.model.pcie_width),
    field("index", "", lambda g: g.index),
    field("display_mode", "", lambda g: DEPRECATED),
    field("display_attached", "", lambda g: g.model.display_attached),
    field("display_active", "", lambda g: "Disabled"),
    field("persistence_mode", "", lambda g: enabled(g.persistent)),
    field("addressing_mode", "", lambda g: "None"),
    field("accounting.mode", "", lambda g: "Disabled"),
    field("accounting.buffer_size", "", lambda g: 4000),
    field("driver_model.current", "", lambda g: None),
    field("driver_model.pending", "", lambda g: None),
    field("vbios_version", "", lambda g: g.record["vbios"]),
    field("inforom.img|inforom.image", "", lambda g: g.model.inforom[0]),
    field("inforom.oem", "", lambda g: g.model.inforom[1]),
    field("inforom.ecc", "", lambda g: g.model.inforom[2]),
    field("inforom.pwr|inforom.power", "", lambda g: g.model.inforom[3]),
    field("gom.current|gpu_operation_mode.current", "", lambda g: None),
    field("gom.pending|gpu_operation_mode.pending", "", lambda g: None),
    field("fan.speed", "%", lambda g: when(g.model.fan, 0)),
    field("pstate", "", lambda g: g.model.idle_pstate),
    field("clocks_event_reasons.supported|clocks_throttle_reasons.supported", "",
          lambda g: g.model.events_supported),
    field("clocks_event_reasons.active|clocks_throttle_reasons.active", "", lambda g: f"0x{g.event_reasons:016X}"),
    *[field(f"clocks_event_reasons.{r}|clocks_throttle_reasons.{r}", "",
            lambda g, bit=bit: active(g.event_reasons & bit)) for r, bit in EVENT_REASONS.items()],
    field("memory.total", "MiB", lambda g: g.model.memory_mib),
    field("memory.reserved", "MiB", lambda g: g.model.reserved_mib),
    field("memory.used", "MiB", memory_used),
    field("memory.free", "MiB", lambda g: g.model.memory_mib - g.model.reserved_mib - memory_used(g)),
    field("compute_mode", "", lambda g: "Default"),
    field("compute_cap", "", lambda g: g.model.compute_cap),
    *[field(f"utilization.{u}", "%", lambda g: 0) for u in ("gpu", "memory", "encoder", "decoder", "jpeg", "ofa")],
    *ecc_fields(),
    field("retired_pages.single_bit_ecc.count|retired_pages.sbe", "", lambda g: when(g.model.retired_pages, 0)),
    field("retired_pages.double_bit.count|retired_pages.dbe", "",
          lambda g: when(g.model.retired_pages, g.record["retired_dbe"])),
    field("retired_pages.pending", "", lambda g: when(g.model.retired_pages, yes_no(g.record["retired_pending"]))),
    field("remapped_rows.correctable|remapped_rows.sbe", "", lambda g: when(bool(g.model.remap_banks), 0)),
    field("remapped_rows.uncorrectable|remapped_rows.dbe", "",
          lambda g: when(bool(g.model.remap_banks), g.record["remap_unc"])),
    field("remapped_rows.pending", "", lambda g: when(bool(g.model.remap_banks), yes_no(g.record["remap_pending"]))),
    field("remapped_rows.failure", "", lambda g: when(bool(g.model.remap_banks), yes_no(g.record["remap_failure"]))),
    field("temperature.gpu", "", lambda g: g.temperature),
    field("temperature.gpu.tlimit", "",
          lambda g: g.model.thermal.tlimit_total and g.model.thermal.tlimit_total - g.temperature),
    field("temperature.memory", "", lambda g: g.memory_temperature),
    *power_fields(),
    *clock_fields(),
    field("mig.mode.current", "", lambda g: when(g.model.mig, "Disabled")),
    field("mig.mode.pending", "", lambda g: when(g.model.mig, "Disabled")),
]

# --query-supported-clocks: one row per (memory, graphics) pair; the GPU's own columns as named.
SUPPORTED_CLOCK_FIELDS = [
    field("timestamp", "", lambda g, pair: csv_timestamp()),
    field("gpu_name|name", "", lambda g, pair: g.model.name),
    field("gpu_bus_id|pci.bus_id", "", lambda g, pair: g.bus_id),
    field("gpu_serial|serial", "", lambda g, pair: g.record["serial"]),
    field("gpu_uuid|uuid", "", lambda g, pair: g.uuid),
    field("memory|mem", "MHz", lambda g, pair: pair[0]),
    field("graphics|gr", "MHz", lambda g, pair: pair[1]),
]

REMAPPED_ROW_FIELDS = [
    field("timestamp", "", lambda g: csv_timestamp()),
    field("gpu_name", "", lambda g: g.model.name),
    field("gpu_bus_id", "", lambda g: g.bus_id),
    field("gpu_serial", "", lambda g: g.record["serial"]),
    field("gpu_uuid", "", lambda g: g.uuid),
    *[f for f in GPU_FIELDS if f.names[0].startswith("remapped_rows.")],
]

COMPUTE_APP_FIELDS = [  # no process ever runs on a simulated GPU: a header, no rows
    field("timestamp", "", None), field("gpu_name", "", None), field("gpu_bus_id", "", None),
    field("gpu_serial", "", None), field("gpu_uuid", "", None), field("pid", "", None),
    field("process_name|name", "", None), field("used_gpu_memory|used_memory", "MiB", None),
]


def lookup_fields(spec: str, table: list) -> list:
    by_name = {name: f for f in table for name in f.names}
    names = [name.strip() for name in spec.split(",")]
    for name in names:
        if name not in by_name:
            raise Exit(BAD_FIELD.format(name=name), RC_INVALID)
    return [by_name[name] for name in names]


def csv_cell(value, unit: str, nounits: bool) -> str:
    if value is None:
        return "[N/A]"
    if isinstance(value, Special):
        return f"[{value}]"
    if isinstance(value, float):
        text = f"{value:.2f}"
    else:
        text = str(value)
    return text if nounits or not unit or isinstance(value, str) else f"{text} {unit}"


def parse_format(spec: Optional[str]) -> set:
    if spec is None:
        raise Exit(f'"--format=" switch is missing. {HELP_HINT}\n', RC_INVALID)
    options = {part.strip() for part in spec.split(",")}
    if "csv" not in options or not options <= {"csv", "noheader", "nounits"}:
        raise Exit(INVALID_COMBINATION, RC_INVALID)
    return options


def render_csv(fields: list, rows: list, options: set) -> str:
    """rows: one list of raw values per row, in field order."""
    nounits = "nounits" in options
    lines = []
    if "noheader" not in options:
        lines.append(", ".join(f.names[0] + (f" [{f.unit}]" if f.unit else "") for f in fields))
    for row in rows:
        lines.append(", ".join(csv_cell(v, f.unit, nounits) for f, v in zip(fields, row)))
    return "".join(line + "\n" for line in lines)


def query_gpus(gpus: list, spec: str, fmt: Optional[str]) -> str:
    fields = lookup_fields(spec, GPU_FIELDS)
    options = parse_format(fmt)
    return render_csv(fields, [[f.get(g) for f in fields] for g in gpus], options)


def query_supported_clocks(gpus: list, spec: str, fmt: Optional[str]) -> str:
    fields = lookup_fields(spec, SUPPORTED_CLOCK_FIELDS)
    options = parse_format(fmt)
    rows = [[f.get(g, (memory, graphics)) for f in fields]
            for g in gpus for memory, graphics_list in g.model.supported_clocks for graphics in graphics_list]
    return render_csv(fields, rows, options)


def query_remapped_rows(gpus: list, spec: str, fmt: Optional[str]) -> str:
    fields = lookup_fields(spec, REMAPPED_ROW_FIELDS)
    options = parse_format(fmt)
    return render_csv(fields, [[f.get(g) for f in fields] for g in gpus], options)


def query_compute_apps(gpus: list, spec: str, fmt: Optional[str]) -> str:
    fields = lookup_fields(spec, COMPUTE_APP_FIELDS)
    return render_csv(fields, [], parse_format(fmt))


# --- nvidia-smi -q ----------------------------------------------------------------------------
# A GPU's -q report is a list of sections; -d picks sections by display type. A line is
# (depth, key, value): value None is a heading. Sections in_full=False appear only with -d.

KEY_WIDTH = 55


def q_line(depth: int, key: str, value=None) -> str:
    label = "    " * depth + key
    return label if value is None else f"{label:<{KEY_WIDTH}}: {value}"


def mhz(value: Optional[int]) -> str:
    return "N/A" if value is None else f"{value} MHz"


def watts(value: Optional[float]) -> str:
    return "N/A" if value is None else f"{value:.2f} W"


def celsius(value: Optional[int]) -> str:
    return "N/A" if value is None else f"{value} C"


def na(value) -> str:
    return "N/A" if value is None else str(value)


def q_product(g: Gpu) -> list:
    mig = "Disabled" if g.model.mig else "N/A"
    return [
        (1, "Product Name", g.model.name), (1, "Product Brand", g.model.brand),
        (1, "Product Architecture", g.model.architecture), (1, "Display Mode", DEPRECATED),
        (1, "Display Attached", g.model.display_attached), (1, "Display Active", "Disabled"),
        (1, "Persistence Mode", enabled(g.persistent)), (1, "Addressing Mode", "None"),
        (1, "MIG Mode", None), (2, "Current", mig), (2, "Pending", mig),
    ]


def q_accounting(g: Gpu) -> list:
    return [(1, "Accounting Mode", "Disabled"), (1, "Accounting Mode Buffer Size", "4000")]


def q_board(g: Gpu) -> list:
    m, r = g.model, g.record
    _, bus, device, _ = g.pci
    return [
        (1, "Driver Model", None), (2, "Current", "N/A"), (2, "Pending", "N/A"),
        (1, "Serial Number", na(r["serial"])), (1, "GPU UUID", g.uuid), (1, "GPU PDI", r["pdi"]),
        (1, "Minor Number", str(r["slot"])), (1, "VBIOS Version", r["vbios"]), (1, "MultiGPU Board", "No"),
        (1, "Board ID", f"0x{(bus << 8) | device:x}"), (1, "Board Part Number", m.board_part),
        (1, "GPU Part Number", m.gpu_part), (1, "FRU Part Number", "N/A"),
        (1, "Platform Info", None), (2, "Chassis Serial Number", "N/A"), (2, "Slot Number", "N/A"),
        (2, "Tray Index", "N/A"), (2, "Host ID", "N/A"), (2, "Peer Type", "N/A"),
        (2, "Module Id", str(r["module_id"])), (2, "GPU Fabric GUID", "N/A"),
        (1, "Inforom Version", None), (2, "Image Version", m.inforom[0]), (2, "OEM Object", m.inforom[1]),
        (2, "ECC Object", m.inforom[2]), (2, "Power Management Object", m.inforom[3]),
        (1, "Inforom BBX Object Flush", None), (2, "Latest Timestamp", "N/A"), (2, "Latest Duration", "N/A"),
        (1, "GPU Operation Mode", None), (2, "Current", "N/A"), (2, "Pending", "N/A"),
        (1, "GPU C2C Mode", m.c2c_mode),
        (1, "GPU Virtualization Mode", None),
        (2, "Virtualization Mode", g.host.state.get("virtualization_mode", "None")),
        (2, "Host VGPU Mode", "N/A"), (2, "vGPU Heterogeneous Mode", "N/A"),
        (1, "GPU Recovery Action", "None"),
    ]


def q_gsp(g: Gpu) -> list:
    return [(1, "GSP Firmware Version", g.host.driver if g.model.gsp else "N/A")]


def q_pci(g: Gpu) -> list:
    m = g.model
    domain, bus, device, _ = g.pci
    return [
        (1, "IBMNPU", None), (2, "Relaxed Ordering Mode", "N/A"),
        (1, "PCI", None), (2, "Bus", f"0x{bus:02X}"), (2, "Device", f"0x{device:02X}"),
        (2, "Domain", f"0x{domain:04X}"), (2, "Base Classcode", "0x3"), (2, "Sub Classcode", m.sub_class),
        (2, "Device Id", m.device_id), (2, "Bus Id", g.bus_id), (2, "Sub System Id", m.subsystem_id),
        (2, "GPU Link Info", None), (3, "PCIe Generation", None),
        (4, "Max", str(m.pcie_gen)), (4, "Current", str(g.link_gen)), (4, "Device Current", str(g.link_gen)),
        (4, "Device Max", str(m.pcie_gen)), (4, "Host Max", na(m.pcie_host_max)),
        (3, "Link Width", None), (4, "Max", f"{m.pcie_width}x"), (4, "Current", f"{g.link_width}x"),
        (2, "Bridge Chip", None), (3, "Type", "N/A"), (3, "Firmware", "N/A"),
        (2, "Replays Since Reset", "0"), (2, "Replay Number Rollovers", "0"),
        (2, "Tx Throughput", f"{random.randint(200, 1500)} KB/s"),
        (2, "Rx Throughput", f"{random.randint(200, 1500)} KB/s"),
        (2, "Atomic Caps Outbound", "N/A"), (2, "Atomic Caps Inbound", "N/A"),
        (1, "Fan Speed", "0 %" if m.fan else "N/A"),
    ]


# -q's Clocks Event Reasons, in its order: (depth, label, NVML bit) [H100] smi-q.txt
Q_EVENT_REASONS = ((2, "Idle", REASON_IDLE), (2, "Applications Clocks Setting", 0x2), (2, "SW Power Cap", 0x4),
                   (2, "HW Slowdown", REASON_HW_SLOWDOWN), (3, "HW Thermal Slowdown", REASON_HW_THERMAL),
                   (3, "HW Power Brake Slowdown", REASON_HW_POWER_BRAKE), (2, "Sync Boost", 0x10),
                   (2, "SW Thermal Slowdown", 0x20), (2, "Display Clock Setting", 0x100))
# -q's Clocks Event Reasons Counters (time each reason was active, in us) and their bits
Q_EVENT_COUNTERS = (("SW Power Capping", 0x4), ("Sync Boost", 0x10), ("SW Thermal Slowdown", 0x20),
                    ("HW Thermal Slowdown", REASON_HW_THERMAL), ("HW Power Braking", REASON_HW_POWER_BRAKE))


def q_performance(g: Gpu) -> list:
    mask = g.event_reasons
    reasons = [(depth, label, active(mask & bit)) for depth, label, bit in Q_EVENT_REASONS]
    counters = [(2, name, f"{g.event_reason_us(bit)} us") for name, bit in Q_EVENT_COUNTERS]
    return ([(1, "Performance State", g.model.idle_pstate), (1, "Clocks Event Reasons", None)] + reasons
            + [(1, "Clocks Event Reasons Counters", None)] + counters)


def q_sparse(g: Gpu) -> list:
    return [(1, "Sparse Operation Mode", "Disabled" if g.model.architecture != "Volta" else "N/A")]


def q_memory(g: Gpu) -> list:
    m = g.model
    used = memory_used(g)
    bar1_used = 1 if m.bar1_mib > 1024 else 2
    protected = "0 MiB" if m.brand != "GeForce" else "N/A"
    return [
        (1, "FB Memory Usage", None), (2, "Total", f"{m.memory_mib} MiB"), (2, "Reserved", f"{m.reserved_mib} MiB"),
        (2, "Used", f"{used} MiB"), (2, "Free", f"{m.memory_mib - m.reserved_mib - used} MiB"),
        (1, "BAR1 Memory Usage", None), (2, "Total", f"{m.bar1_mib} MiB"), (2, "Used", f"{bar1_used} MiB"),
        (2, "Free", f"{m.bar1_mib - bar1_used} MiB"),
        (1, "Conf Compute Protected Memory Usage", None), (2, "Total", protected), (2, "Used", protected),
        (2, "Free", protected),
    ]


def q_compute(g: Gpu) -> list:
    return [(1, "Compute Mode", "Default")]


def q_utilization(g: Gpu) -> list:
    jpeg_ofa = "N/A" if g.model.architecture == "Volta" else "0 %"
    return [(1, "Utilization", None), (2, "GPU", "0 %"), (2, "Memory", "0 %"), (2, "Encoder", "0 %"),
            (2, "Decoder", "0 %"), (2, "JPEG", jpeg_ofa), (2, "OFA", jpeg_ofa)]


def q_encoder(g: Gpu) -> list:
    return [(1, "Encoder Stats", None), (2, "Active Sessions", "0"), (2, "Average FPS", "0"),
            (2, "Average Latency", "0")]


def q_fbc(g: Gpu) -> list:
    return [(1, "FBC Stats", None), (2, "Active Sessions", "0"), (2, "Average FPS", "0"),
            (2, "Average Latency", "0")]


def q_dram_encryption(g: Gpu) -> list:
    return [(1, "DRAM Encryption Mode", None), (2, "Current", "N/A"), (2, "Pending", "N/A")]


def q_ecc(g: Gpu) -> list:
    """ECC Mode and ECC Errors: Volta's per-unit single/double bit counters [V100], or SRAM/DRAM counters [H100].
    An uncorrectable error in device memory counts as Double Bit / Device Memory, or as DRAM Uncorrectable."""
    m = g.model
    mode = na(m.ecc_mode)
    lines = [(1, "ECC Mode", None), (2, "Current", mode), (2, "Pending", mode), (1, "ECC Errors", None)]
    count = "0" if g.ecc_enabled else "N/A"
    dram = {"Volatile": str(g.record["ecc_volatile"]), "Aggregate": str(g.record["ecc_aggregate"])}
    if m.volta_ecc:
        for span in ("Volatile", "Aggregate"):
            lines.append((2, span, None))
            for kind, cbu in (("Single Bit", "N/A"), ("Double Bit", count)):
                device = dram[span] if kind == "Double Bit" and g.ecc_enabled else count
                units = [("Device Memory", device), ("Register File", count), ("L1 Cache", count),
                         ("L2 Cache", count), ("Texture Memory", "N/A"), ("Texture Shared", "N/A")]
                lines.append((3, f"{kind:<22}", None))
                lines += [(4, unit, value) for unit, value in units + [("CBU", cbu), ("Total", device)]]
        return lines
    kinds = ["SRAM Correctable", "SRAM Uncorrectable Parity", "SRAM Uncorrectable SEC-DED", "DRAM Correctable",
             "DRAM Uncorrectable"]
    sources = ["SRAM L2", "SRAM SM", "SRAM Microcontroller", "SRAM PCIE", "SRAM Other"]
    for span in ("Volatile", "Aggregate"):
        lines.append((2, span, None))
        lines += [(3, kind, dram[span] if kind == "DRAM Uncorrectable" and g.ecc_enabled else count)
                  for kind in kinds]
    lines.append((3, "SRAM Threshold Exceeded", "No" if count == "0" else "N/A"))
    lines.append((2, "Aggregate Uncorrectable SRAM Sources", None))
    lines += [(3, source, count) for source in sources]
    return lines + [(2, "Channel Repair Pending", "No"), (2, "TPC Repair Pending", "No"),
                    (2, "Unrepairable Memory", "No" if count == "0" else "N/A")]


def q_retired_pages(g: Gpu) -> list:
    r = g.record
    if not g.model.retired_pages:
        return [(1, "Retired Pages", None), (2, "Single Bit ECC", "N/A"), (2, "Double Bit ECC", "N/A"),
                (2, "Pending Page Blacklist", "N/A")]
    return [(1, "Retired Pages", None), (2, "Single Bit ECC", "0"), (2, "Double Bit ECC", str(r["retired_dbe"])),
            (2, "Pending Page Blacklist", yes_no(r["retired_pending"]))]


def q_remapped_rows(g: Gpu) -> list:
    """Each row remapped for an uncorrectable error takes a spare row of its bank: that bank drops from Max to
    High availability, at once, pending or not (a real 550.90.07 H100: Uncorrectable Error 1, Pending Yes,
    Max 2559 / High 1 bank(s); see gpu_models.md)."""
    banks, r = g.model.remap_banks, g.record
    if not banks:
        return [(1, "Remapped Rows", "N/A")]
    used = min(r["remap_unc"], banks)
    return [(1, "Remapped Rows", None), (2, "Correctable Error", "0"), (2, "Inactive Correctable Error", "0"),
            (2, "Uncorrectable Error", str(r["remap_unc"])), (2, "Inactive Uncorrectable Error", "0"),
            (2, "Pending", yes_no(r["remap_pending"])), (2, "Remapping Failure Occurred", yes_no(r["remap_failure"])),
            (2, "Bank Remap Availability Histogram", None),
            (3, "Max", f"{banks - used} bank(s)"), (3, "High", f"{used} bank(s)"), (3, "Partial", "0 bank(s)"),
            (3, "Low", "0 bank(s)"), (3, "None", "0 bank(s)")]


def q_temperature(g: Gpu) -> list:
    t = g.model.thermal
    now = [(1, "Temperature", None), (2, "GPU Current Temp", celsius(g.temperature))]
    if t.tlimit_total is not None:  # Hopper/Ada: thresholds relative to the T.Limit
        return now + [
            (2, "GPU T.Limit Temp", celsius(t.tlimit_total - g.temperature)),
            (2, "GPU Shutdown T.Limit Temp", celsius(t.shutdown)),
            (2, "GPU Slowdown T.Limit Temp", celsius(t.slowdown)),
            (2, "GPU Max Operating T.Limit Temp", celsius(t.max_operating)),
            (2, "GPU Target Temperature", celsius(t.target)),
            (2, "Memory Current Temp", celsius(g.memory_temperature)),
            (2, "Memory Max Operating T.Limit Temp", celsius(t.memory_max)),
        ]
    return now + [
        (2, "GPU T.Limit Temp", "N/A"), (2, "GPU Shutdown Temp", celsius(t.shutdown)),
        (2, "GPU Slowdown Temp", celsius(t.slowdown)), (2, "GPU Max Operating Temp", celsius(t.max_operating)),
        (2, "GPU Target Temperature", celsius(t.target)), (2, "Memory Current Temp", celsius(g.memory_temperature)),
        (2, "Memory Max Operating Temp", celsius(t.memory_max)),
    ]


def q_power_readings(g: Gpu) -> list:
    m = g.model
    return [(1, "GPU Power Readings", None), (2, "Average Power Draw", watts(g.power_average)),
            (2, "Instantaneous Power Draw", watts(g.power_draw)), (2, "Current Power Limit", watts(g.power_limit)),
            (2, "Requested Power Limit", watts(g.power_limit)), (2, "Default Power Limit", watts(m.power_default)),
            (2, "Min Power Limit", watts(m.power_min)), (2, "Max Power Limit", watts(m.power_max))]


def q_power_samples(g: Gpu) -> list:
    low, high = sorted((g.power_draw, round(g.power_draw * random.uniform(1.2, 2.1), 2)))
    return [(1, "Power Samples", None), (2, "Duration", f"{random.uniform(1.0, 3.0):.2f} sec"),
            (2, "Number of Samples", "119"), (2, "Max", watts(high)), (2, "Min", watts(low)),
            (2, "Avg", watts((low + high) / 2))]


def q_power_other(g: Gpu) -> list:
    memory = None if g.model.memory_power is None else round(g.model.memory_power * random.uniform(0.98, 1.02), 2)
    module = ["Average Power Draw", "Instantaneous Power Draw", "Current Power Limit", "Requested Power Limit",
              "Default Power Limit", "Min Power Limit", "Max Power Limit"]
    return ([(1, "GPU Memory Power Readings ", None), (2, "Average Power Draw", watts(memory)),
             (2, "Instantaneous Power Draw", "N/A"), (1, "Module Power Readings", None)]
            + [(2, name, "N/A") for name in module])


def q_power_smoothing(g: Gpu) -> list:
    return [(1, "Power Smoothing", "N/A")]


def q_power_profiles(g: Gpu) -> list:
    return [(1, "Workload Power Profiles", None), (2, "Requested Profiles", "N/A"), (2, "Enforced Profiles", "N/A")]


def q_clocks(g: Gpu) -> list:
    m, now, app = g.model, g.clocks, g.app_clocks
    default = m.default_app_clocks
    deferred = g.record["deferred_mem"]
    return [
        (1, "Clocks", None), (2, "Graphics", mhz(now.graphics)), (2, "SM", mhz(now.sm)),
        (2, "Memory", mhz(now.memory)), (2, "Video", mhz(now.video)),
        (1, "Applications Clocks", None), (2, "Graphics", mhz(app and app[1])), (2, "Memory", mhz(app and app[0])),
        (1, "Default Applications Clocks", None), (2, "Graphics", mhz(default and default[1])),
        (2, "Memory", mhz(default and default[0])),
        (1, "Deferred Clocks", None), (2, "Memory", mhz(deferred)),
        (1, "Max Clocks", None), (2, "Graphics", mhz(m.max_clocks.graphics)), (2, "SM", mhz(m.max_clocks.sm)),
        (2, "Memory", mhz(m.max_clocks.memory)), (2, "Video", mhz(m.max_clocks.video)),
        (1, "Max Customer Boost Clocks", None), (2, "Graphics", mhz(m.boost_clock)),
        (1, "Clock Policy", None), (2, "Auto Boost", "N/A"), (2, "Auto Boost Default", "N/A"),
    ]


def q_fabric(g: Gpu) -> list:
    health = ["Summary", "Bandwidth", "Route Recovery in progress", "Route Unhealthy", "Access Timeout Recovery",
              "Incorrect Configuration", "Partition Assigned"]
    return ([(1, "Fabric", None), (2, "State", "N/A"), (2, "Status", "N/A"), (2, "CliqueId", "N/A"),
             (2, "ClusterUUID", "N/A"), (2, "Health", None)] + [(3, name, "N/A") for name in health])


def q_processes(g: Gpu) -> list:
    return [(1, "Processes", "None")]


def q_capabilities(g: Gpu) -> list:
    return [(1, "Capabilities", None), (2, "EGM", "disabled")]


def q_supported_clocks(g: Gpu) -> list:
    if not g.model.supported_clocks:
        return [(1, "Supported Clocks", "N/A")]
    lines = [(1, "Supported Clocks", None)]
    for memory, graphics in g.model.supported_clocks:
        lines.append((2, "Memory", mhz(memory)))
        lines += [(3, "Graphics", mhz(value)) for value in graphics]
    return lines


# (section, the -d types that show it, shown by a plain -q), in -q's order
Q_SECTIONS = [
    (q_product, (), True), (q_accounting, ("ACCOUNTING",), True), (q_board, (), True),
    (q_gsp, ("GSP_FIRMWARE_VERSION",), True), (q_pci, (), True), (q_performance, ("PERFORMANCE",), True),
    (q_sparse, (), True), (q_memory, ("MEMORY",), True), (q_compute, ("COMPUTE",), True),
    (q_utilization, ("UTILIZATION",), True), (q_encoder, ("ENCODER_STATS",), True), (q_fbc, ("FBC_STATS",), True),
    (q_dram_encryption, (), True), (q_ecc, ("ECC",), True), (q_retired_pages, ("PAGE_RETIREMENT",), True),
    (q_remapped_rows, ("ROW_REMAPPER",), True), (q_temperature, ("TEMPERATURE",), True),
    (q_power_readings, ("POWER",), True), (q_power_samples, ("POWER",), False), (q_power_other, ("POWER",), True),
    (q_power_smoothing, ("POWER_SMOOTHING",), True), (q_power_profiles, ("POWER_PROFILES",), True),
    (q_clocks, ("CLOCK",), True), (q_fabric, (), True), (q_processes, ("PIDS",), True),
    (q_capabilities, (), True), (q_supported_clocks, ("SUPPORTED_CLOCKS",), False),
]
DISPLAY_TYPES = {"MEMORY", "UTILIZATION", "ECC", "TEMPERATURE", "POWER", "CLOCK", "COMPUTE", "PIDS", "PERFORMANCE",
                 "SUPPORTED_CLOCKS", "PAGE_RETIREMENT", "ACCOUNTING", "ENCODER_STATS", "SUPPORTED_GPU_TARGET_TEMP",
                 "VOLTAGE", "FBC_STATS", "ROW_REMAPPER", "GSP_FIRMWARE_VERSION", "POWER_SMOOTHING",
                 "POWER_PROFILES"}


def parse_display(spec: Optional[str]) -> Optional[set]:
    if spec is None:
        return None
    wanted = {part.strip().upper() for part in spec.split(",") if part.strip()}
    if not wanted or not wanted <= DISPLAY_TYPES:
        raise Exit(f"Invalid display type \"{spec}\". {HELP_HINT}\n", RC_INVALID)
    return wanted


def render_query(host: Host, gpus: list, display: Optional[set]) -> str:
    lines = ["", "==============NVSMI LOG==============", "",
             q_line(0, "Timestamp", time.asctime()), q_line(0, "Driver Version", host.driver),
             q_line(0, "CUDA Version", host.cuda), "", q_line(0, "Attached GPUs", len(host.gpus))]
    for g in gpus:
        lines.append(f"GPU {g.bus_id}")
        for section, types, in_full in Q_SECTIONS:
            if (in_full and display is None) or (display and display & set(types)):
                lines += [q_line(*line) for line in section(g)]
        lines.append("")
    return "\n".join(lines) + "\n"


# --- the summary table, -L, topo, nvlink, --version -------------------------------------------


def table_row(cells: list) -> str:
    return "|" + "|".join(cells) + "|"


def spread(left: str, right: str, width: int) -> str:
    return left + " " * max(1, width - len(left) - len(right)) + right


def render_table(host: Host, gpus: list) -> str:
    rule = "+" + "-" * 89 + "+"
    grid = "+" + "-" * 41 + "+" + "-" * 24 + "+" + "-" * 22 + "+"
    lines = [
        time.asctime() + "       ", rule,
        f"| NVIDIA-SMI {host.driver:<23}Driver Version: {host.driver:<15}CUDA Version: {host.cuda:<9}|", grid,
        "| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |",
        "| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |",
        "|                                         |                        |               MIG M. |",
        "|=========================================+========================+======================|",
    ]
    for g in gpus:
        m = g.model
        ecc = {"Enabled": str(g.record["ecc_volatile"]), "Disabled": "Off"}.get(m.ecc_mode, "N/A")
        fan = "  0%" if m.fan else " N/A"
        used = memory_used(g)
        lines += [
            table_row([spread(f"{g.index:>4}  {m.name}", "On  " if g.persistent else "Off ", 41),
                       f"{g.bus_id + ' Off':>23} ", f"{ecc:>21} "]),
            table_row([spread(f"{fan}  {g.temperature:>3}C    {m.idle_pstate}",
                              f"{int(g.power_draw)}W / {int(g.power_limit):>4}W ", 41),
                       f"{used:>8}MiB / {m.memory_mib:>6}MiB ", f"{0:>7}%{'Default':>13} "]),
            table_row([" " * 41, " " * 24, f"{'Disabled' if m.mig else 'N/A':>21} "]),
            grid,
        ]
    return "\n".join(lines) + "\n\n" + PROCESSES_BOX


def render_list(gpus: list) -> str:
    return "".join(f"GPU {g.index}: {g.model.name} (UUID: {g.uuid})\n" for g in gpus)


def numa_node(host: Host, index: int) -> int:
    return index * host.state["numa_nodes"] // max(1, len(host.gpus))


def cpu_affinity(host: Host, node: int) -> str:
    per_node = max(1, host.state["cpus"] // host.state["numa_nodes"])
    return f"{node * per_node}-{(node + 1) * per_node - 1}"


def nvlinks(a: Gpu, b: Gpu) -> int:
    """How many NVLinks bond two GPUs (0: none)."""
    if a.model is not b.model or not a.model.nvlink:
        return 0
    if a.model.nvlink == "all":
        return a.model.nvlink_links
    i, j = a.record["slot"], b.record["slot"]
    return DGX1_LINKS[i][j] if i < 8 and j < 8 else 0


@dataclass
class TopoEnd:
    """One row (and column) of topo -m: a GPU or a NIC, and where it sits."""

    label: str  # GPU0.., NIC0..
    numa: int
    switch: Optional[int]  # the slot of the GPU whose PCIe switch it is behind (a GPU: its own)
    tail: tuple  # its CPU Affinity, NUMA Affinity, (nvidia-smi's extra tab) and GPU NUMA ID cells
    gpu: Optional[Gpu] = None
    name: str = ""  # a NIC's device name, for the NIC Legend


def topo_ends(host: Host) -> list:
    ends = []
    for g in host.gpus:
        node = numa_node(host, g.index)
        ends.append(TopoEnd(f"GPU{g.index}", node, g.record["slot"], (cpu_affinity(host, node), str(node), "", "N/A"),
                            gpu=g))
    numa_of_slot = {end.switch: end.numa for end in ends}
    for k, nic in enumerate(host.nics):
        numa = nic["numa"] if nic.get("numa") is not None else numa_of_slot.get(nic.get("near_gpu"), 0)
        # A NIC row's affinity cells are empty, every tab still printed (the della H100 capture).
        ends.append(TopoEnd(f"NIC{k}", numa, nic.get("near_gpu"), ("", "", "", ""), name=nic["name"]))
    return ends


def topo_cell(host: Host, a: TopoEnd, b: TopoEnd) -> str:
    if a is b:
        return " X "
    links = nvlinks(a.gpu, b.gpu) if a.gpu is not None and b.gpu is not None else 0
    if links:
        return f"NV{links}"
    if a.switch is not None and a.switch == b.switch:  # two GPUs never share one: each has its own slot
        return "PIX"
    if host.state["numa_nodes"] == 1:
        return "PHB"
    return "NODE" if a.numa == b.numa else "SYS"


def render_topo(host: Host) -> str:
    ends = topo_ends(host)
    header = [end.label for end in ends] + ["CPU Affinity", "NUMA Affinity", "GPU NUMA ID"]
    lines = ["\t\x1b[4m" + "\t".join(header) + "\x1b[0m"]
    lines += ["\t".join([a.label] + [topo_cell(host, a, b) for b in ends] + list(a.tail)) for a in ends]
    nics = [f"  {end.label}: {end.name}\n" for end in ends if end.gpu is None]
    return "\n".join(lines) + "\n" + TOPO_LEGEND + ("\nNIC Legend:\n\n" + "".join(nics) if nics else "")


def render_nvlink_status(gpus: list) -> str:
    """Link speeds of GPUs bonded to a peer; GPUs without NVLink peers print nothing, as on the capture."""
    out = []
    for g in gpus:
        if any(nvlinks(g, other) for other in gpus if other is not g):
            out.append(f"GPU {g.index}: {g.model.name} (UUID: {g.uuid})\n")
            out += [f"\t Link {k}: {g.model.nvlink_speed}\n" for k in range(g.model.nvlink_links)]
    return "".join(out)


def render_version(host: Host) -> str:
    nvml = ".".join(host.driver.split(".")[:2])
    return (f"NVIDIA-SMI version  : {host.driver}\nNVML version        : {nvml}\n"
            f"DRIVER version      : {host.driver}\nCUDA Version        : {host.cuda}\n")


# --- setters --------------------------------------------------------------------------------


@dataclass
class Outcome:
    """What a setter did to one GPU: ok, warn (moves on) or error (stops); lines to print; exit code."""

    kind: str
    lines: list
    rc: int = RC_OK


def ok(*lines: str) -> Outcome:
    return Outcome("ok", list(lines))


def warn(line: str, rc: int = RC_NOT_SUPPORTED) -> Outcome:
    return Outcome("warn", [line, MOVING_ON], rc)


def error(line: str, rc: int) -> Outcome:
    return Outcome("error", [line], rc)


@dataclass(frozen=True)
class Setter:
    option: str
    parse: Callable  # the option's value -> what plan() takes; raises ValueError on nonsense
    supported: Callable  # Model -> bool
    unsupported: str  # the warning where not supported
    denied: str  # the message for a user who is not root
    plan: Callable  # (host, gpu, value) -> Outcome (nothing to do / refused) or a callable that applies it
    volatile: bool  # lost when the driver unloads: warn when the GPU has no persistence


def parse_bool(value: str) -> bool:
    choices = {"0": False, "DISABLED": False, "1": True, "ENABLED": True}
    if value.upper() not in choices:
        raise ValueError(value)
    return choices[value.upper()]


def parse_pair(value: str) -> tuple:
    parts = [int(part) for part in value.split(",")]
    if len(parts) != 2:
        raise ValueError(value)
    return parts[0], parts[1]


def parse_range(value: str) -> tuple:
    """MIN,MAX or one value for both."""
    parts = [int(part) for part in value.split(",")]
    if len(parts) == 1:
        parts *= 2
    if len(parts) != 2 or parts[0] < 0 or parts[0] > parts[1]:
        raise ValueError(value)
    return parts[0], parts[1]


def parse_clock(value: str) -> int:
    clock = int(value)
    if clock <= 0:
        raise ValueError(value)
    return clock


def parse_watts(value: str) -> float:
    watts_value = float(value)
    if watts_value != watts_value or watts_value < 0:  # NaN or negative
        raise ValueError(value)
    return watts_value


def no_value(value) -> None:
    return None


def plan_persistence(host: Host, g: Gpu, want: bool):
    if g.persistent == want:
        return ok(f"Persistence mode is already {enabled(want)} for GPU {g.bus_id}.")

    def apply() -> Outcome:
        if want and host.daemon:  # the daemon holds the GPU: ask it
            g.record["daemon_pm"] = True
            return ok(f"Enabled persistence mode via daemon for GPU {g.bus_id}.")
        if want:  # legacy persistence: works, and the 580 driver logs that it is deprecated
            g.record["legacy_pm"] = True
            kmsg(host.state, PM_DEPRECATED)
            return ok(f"Enabled persistence mode for GPU {g.bus_id}.")
        g.record["legacy_pm"] = False
        if host.daemon:
            g.record["daemon_pm"] = False
        return ok(f"Disabled persistence mode for GPU {g.bus_id}.")
    return apply


def plan_power_limit(host: Host, g: Gpu, value: float):
    m = g.model
    if not m.power_min <= value <= m.power_max:
        return error(f"Provided power limit {value:.2f} W is not a valid power limit which should be between "
                     f"{m.power_min:.2f} W and {m.power_max:.2f} W for GPU {g.bus_id}", RC_INVALID)

    def apply() -> Outcome:
        before = g.power_limit
        g.record["power_limit"] = value
        return ok(f"Power limit for GPU {g.bus_id} was set to {value:.2f} W from {before:.2f} W.")
    return apply


def plan_app_clocks(host: Host, g: Gpu, pair: tuple):
    memory, graphics = pair
    if graphics not in g.model.graphics_clocks(memory):
        return warn(f'Specified clock combination "(MEM {memory}, SM {graphics})" is not supported for GPU '
                    f"{g.bus_id}. Run 'nvidia-smi -q -d SUPPORTED_CLOCKS' to see list of supported clock "
                    "combinations", RC_INVALID)
    return setting(g, "app_clocks", [memory, graphics],
                   f'Applications clocks set to "(MEM {memory}, SM {graphics})" for GPU {g.bus_id}')


def plan_locked_gpu(host: Host, g: Gpu, bounds: tuple):
    return setting(g, "locked_gpu", list(bounds),
                   f'GPU clocks set to "(gpuClkMin {bounds[0]}, gpuClkMax {bounds[1]})" for GPU {g.bus_id}')


def plan_locked_mem(host: Host, g: Gpu, bounds: tuple):
    return setting(g, "locked_mem", list(bounds),
                   f'Memory clocks set to "(memClkMin {bounds[0]}, memClkMax {bounds[1]})" for GPU {g.bus_id}')


def plan_deferred_mem(host: Host, g: Gpu, clock: int):
    if clock not in g.model.memory_clocks():
        return warn(f"Specified memory clock {clock} MHz is not supported for GPU {g.bus_id}. Run "
                    "'nvidia-smi -q -d SUPPORTED_CLOCKS' to see list of supported clock combinations", RC_INVALID)
    return setting(g, "deferred_mem", clock,
                   f'Deferred memory clocks set to "(memClkMin {clock}, memClkMax {clock})" for GPU {g.bus_id}')


def plan_reset(key: str):
    def plan(host: Host, g: Gpu, value) -> Callable:
        return setting(g, key, None)
    return plan


def setting(g: Gpu, key: str, value, *lines: str) -> Callable:
    def apply() -> Outcome:
        g.record[key] = value
        return ok(*lines)
    return apply


def permission(what: str) -> str:
    return f"Failed to {what} for GPU {{bus}}: Insufficient Permissions"


def not_supported(what: str) -> str:
    return f"Setting {what} is not supported for GPU {{bus}}."


APP_CLOCKS_DENIED = "The current user does not have permission to change clocks for GPU {bus}."
PM_DENIED = "Unable to set persistence mode for GPU {bus}: Insufficient Permissions"
POWER_UNSUPPORTED = "Changing power management limit is not supported for GPU: {bus}."
SETTERS = {s.option: s for s in (
    Setter("pm", parse_bool, lambda m: True, "", PM_DENIED, plan_persistence, volatile=False),
    Setter("pl", parse_watts, lambda m: True, POWER_UNSUPPORTED, permission("set power management limit"),
           plan_power_limit, volatile=True),
    Setter("ac", parse_pair, lambda m: m.app_clocks, not_supported("applications clocks"), APP_CLOCKS_DENIED,
           plan_app_clocks, volatile=True),
    Setter("rac", no_value, lambda m: m.app_clocks, not_supported("applications clocks"), APP_CLOCKS_DENIED,
           plan_reset("app_clocks"), volatile=False),
    Setter("lgc", parse_range, lambda m: m.locked_gpu_clocks, not_supported("locked GPU clocks"),
           permission("set locked GPU clocks"), plan_locked_gpu, volatile=True),
    Setter("rgc", no_value, lambda m: m.locked_gpu_clocks, not_supported("locked GPU clocks"),
           permission("reset locked GPU clocks"), plan_reset("locked_gpu"), volatile=False),
    Setter("lmc", parse_range, lambda m: m.locked_mem_clocks, not_supported("locked memory clocks"),
           permission("set locked memory clocks"), plan_locked_mem, volatile=True),
    Setter("rmc", no_value, lambda m: m.locked_mem_clocks, not_supported("locked memory clocks"),
           permission("reset locked memory clocks"), plan_reset("locked_mem"), volatile=False),
    Setter("lmcd", parse_clock, lambda m: m.deferred_mem_clocks, not_supported("deferred memory clocks"),
           permission("set deferred memory clocks"), plan_deferred_mem, volatile=False),
    Setter("rmcd", no_value, lambda m: m.deferred_mem_clocks, not_supported("deferred memory clocks"),
           permission("reset deferred memory clocks"), plan_reset("deferred_mem"), volatile=False),
)}


# -pl --scope 1 (TOTAL_MODULE) is for Grace Hopper: refused on every model here.
MODULE_POWER = Setter("pl", no_value, lambda m: False, POWER_UNSUPPORTED, "", plan_power_limit, volatile=False)


def run_setter(host: Host, gpus: list, setter: Setter, value, error_on_warning: bool) -> tuple:
    """Each GPU in turn; a warning moves on, an error stops. Returns (output, rc)."""
    out, warned = [], RC_OK
    for g in gpus:
        outcome = one_gpu(host, g, setter, value)
        out += outcome.lines
        if outcome.kind == "error":
            return "\n".join(out + [TERMINATING]) + "\n", outcome.rc
        if outcome.kind == "warn":
            warned = warned or outcome.rc
        elif setter.volatile and not g.persistent:
            out.append(PERSISTENCE_WARNING.format(bus=g.bus_id))
    return "\n".join(out + [ALL_DONE]) + "\n", warned if error_on_warning else RC_OK


def one_gpu(host: Host, g: Gpu, setter: Setter, value) -> Outcome:
    if not setter.supported(g.model):
        return warn(setter.unsupported.format(bus=g.bus_id))
    planned = setter.plan(host, g, value)
    if isinstance(planned, Outcome):  # nothing to do, or refused before any permission check
        return planned
    if effective_uid() != 0:
        return error(setter.denied.format(bus=g.bus_id), RC_NO_PERMISSION)
    return planned()


# --- nvidia-smi's command line ----------------------------------------------------------------

SMI_OPTIONS = {  # name: (spellings, takes a value)
    "help": (("-h", "--help"), False),
    "version": (("--version",), False),
    "list": (("-L", "--list-gpus"), False),
    "query": (("-q", "--query"), False),
    "xml": (("-x", "--xml-format"), False),
    "display": (("-d", "--display"), True),
    "id": (("-i", "--id"), True),
    "filename": (("-f", "--filename"), True),
    "query_gpu": (("--query-gpu",), True),
    "query_supported_clocks": (("--query-supported-clocks",), True),
    "query_remapped_rows": (("--query-remapped-rows",), True),
    "query_compute_apps": (("--query-compute-apps",), True),
    "format": (("--format",), True),
    "eow": (("-eow", "--error-on-warning"), False),
    "mode": (("-m", "--mode"), True),
    "scope": (("-sc", "--scope"), True),
    "pm": (("-pm", "--persistence-mode"), True),
    "pl": (("-pl", "--power-limit"), True),
    "ac": (("-ac", "--applications-clocks"), True),
    "rac": (("-rac", "--reset-applications-clocks"), False),
    "lgc": (("-lgc", "--lock-gpu-clocks"), True),
    "rgc": (("-rgc", "--reset-gpu-clocks"), False),
    "lmc": (("-lmc", "--lock-memory-clocks"), True),
    "rmc": (("-rmc", "--reset-memory-clocks"), False),
    "lmcd": (("-lmcd", "--lock-memory-clocks-deferred"), True),
    "rmcd": (("-rmcd", "--reset-memory-clocks-deferred"), False),
}
SPELLINGS = {spelling: name for name, (spellings, _) in SMI_OPTIONS.items() for spelling in spellings}
# Real options and subcommands the simulator does not model: say so rather than pretend.
UNSIMULATED = {"-B", "--list-excluded-gpus", "-col", "--columns", "-l", "--loop", "-lms", "--loop-ms", "-u", "--unit",
               "--dtd", "--debug", "-e", "--ecc-config", "-p", "--reset-ecc-errors", "-c", "--compute-mode", "--gom",
               "-r", "--gpu-reset", "-vm", "--virt-mode", "-cc", "--cuda-clocks", "-am", "--accounting-mode", "-caa",
               "--clear-accounted-apps", "--auto-boost-default", "--auto-boost-permission", "-mig",
               "--multi-instance-gpu", "-gtt", "--gpu-target-temp", "-den", "--dram-encryption", "--set-hostname",
               "--get-hostname", "-t", "--toggle-led", "--help-query-gpu", "--help-query-supported-clocks",
               "--query-accounted-apps", "--query-retired-pages", "--help-query-remapped-rows",
               "--help-query-compute-apps", "--help-query-retired-pages", "--help-query-accounted-apps",
               "dmon", "daemon", "replay", "pmon", "drain", "c2c", "clocks", "encodersessions", "fbcsessions",
               "vgpu", "mig", "compute-policy", "boost-slider", "power-hint", "base-clocks", "conf-compute", "gpm",
               "pci", "power-smoothing", "power-profiles", "prm"}


def parse_smi_args(argv: list) -> dict:
    opts: dict = {}
    args = list(argv)
    while args:
        arg = args.pop(0)
        name, _, inline = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        if name in UNSIMULATED or arg in UNSIMULATED:
            raise SimError(f"nvidia-smi {name} is not simulated")
        if name not in SPELLINGS:
            raise Exit(f"ERROR: Option {arg} is not recognized. {HELP_HINT}\n", RC_INVALID)
        key = SPELLINGS[name]
        if SMI_OPTIONS[key][1]:
            if inline == "" and "=" not in arg:
                if not args:
                    raise Exit(f"ERROR: Option {name} is missing its value. {HELP_HINT}\n", RC_INVALID)
                inline = args.pop(0)
            opts[key] = inline
        else:
            opts[key] = True
    return opts


def select_gpus(host: Host, spec: Optional[str]) -> list:
    """-i: indexes, UUIDs, PCI bus ids or serials, comma separated; none found: 'No devices were found'."""
    if not host.gpus:
        raise Exit(NO_DEVICES, RC_NOT_FOUND)
    if spec is None:
        return host.gpus
    chosen = []
    for item in (part.strip() for part in spec.split(",")):
        match = next((g for g in host.gpus if matches(g, item)), None)
        if match is None:
            raise Exit(NO_DEVICES, RC_NOT_FOUND)
        if match not in chosen:
            chosen.append(match)
    return chosen


def matches(g: Gpu, item: str) -> bool:
    if item.isdigit():
        return int(item) == g.index
    if g.lost:
        return False  # its UUID and serial cannot be read without a handle
    if item.upper().startswith("GPU-"):
        return item.lower() == g.uuid.lower()
    if item == g.record["serial"]:
        return True
    return normal_bus_id(item) == g.bus_id.upper()


def normal_bus_id(text: str) -> str:
    """00:06.0, 0000:00:06.0 and 00000000:00:06.0 all name the same GPU."""
    parts = text.upper().split(":")
    if len(parts) == 2:
        parts = ["0"] + parts
    if len(parts) != 3:
        return ""
    return f"{parts[0][-8:]:0>8}:{parts[1]}:{parts[2]}"


def smi_action(opts: dict) -> str:
    """The one thing this run does; two setters or two queries at once are refused, as by nvidia-smi."""
    actions = [key for key in ("query_gpu", "query_supported_clocks", "query_remapped_rows", "query_compute_apps",
                               "query", "list", "version", *SETTERS) if key in opts]
    if len(actions) > 1:
        raise Exit(INVALID_COMBINATION, RC_INVALID)
    return actions[0] if actions else "table"


def smi_run(host: Host, opts: dict, action: str, value) -> tuple:
    """(output, rc) of one nvidia-smi run against the simulated GPUs."""
    if action == "version":
        return render_version(host), RC_OK
    gpus = select_gpus(host, opts.get("id"))
    lost = [g for g in gpus if g.lost]
    if lost:  # each GPU without a handle is an error line before what the others print; the exit says so
        errors = "".join(g.handle_error() for g in lost)
        readable = [g for g in gpus if not g.lost]
        if not readable or action in ("table", "query"):  # these stop at the first GPU they cannot open
            return errors, RC_GPU_LOST
        text, _ = smi_run_on(host, opts, action, value, readable)
        return errors + text, RC_GPU_LOST
    return smi_run_on(host, opts, action, value, gpus)


def smi_run_on(host: Host, opts: dict, action: str, value, gpus: list) -> tuple:
    queries = {"query_gpu": query_gpus, "query_supported_clocks": query_supported_clocks,
               "query_remapped_rows": query_remapped_rows, "query_compute_apps": query_compute_apps}
    if action in queries:
        return queries[action](gpus, opts[action], opts.get("format")), RC_OK
    if action == "query":
        if opts.get("xml"):
            if "display" in opts:
                raise Exit(XML_WITH_DISPLAY, RC_INVALID)
            raise SimError("nvidia-smi -q -x (XML) is not simulated")
        return render_query(host, gpus, parse_display(opts.get("display"))), RC_OK
    if action == "list":
        return render_list(gpus), RC_OK
    if action in SETTERS:
        setter = SETTERS[action]
        if action == "pl" and opts.get("scope", "0") not in ("0", "GPU"):
            setter = MODULE_POWER
        return run_setter(host, gpus, setter, value, bool(opts.get("eow")))
    return render_table(host, gpus), RC_OK


def parse_setter_value(opts: dict, action: str):
    raw = None if opts[action] is True else opts[action]  # True: a flag such as -rac
    try:
        return SETTERS[action].parse(raw)
    except (ValueError, TypeError):
        raise Exit(f'ERROR: Invalid value "{opts[action]}" for option -{action}. {HELP_HINT}\n', RC_INVALID)


def smi_subcommand(host: Host, argv: list) -> tuple:
    """topo -m and nvlink -s; other subcommands are not simulated."""
    command, rest = argv[0], argv[1:]
    if command == "topo" and rest in (["-m"], ["--matrix"]):
        if not host.gpus:
            raise Exit(NO_DEVICES, RC_NOT_FOUND)
        return render_topo(host), RC_OK
    if command == "nvlink" and rest in (["-s"], ["--status"]):
        if not host.gpus:
            raise Exit(NO_DEVICES, RC_NOT_FOUND)
        return render_nvlink_status(host.gpus), RC_OK
    raise SimError(f"nvidia-smi {' '.join(argv)} is not simulated")


def smi_main(argv: list) -> int:
    try:
        text, rc, target = smi_output(argv)
    except Exit as stop:
        text, rc, target = stop.text, stop.rc, None
    if target:
        with open(target, "w") as fh:
            fh.write(text)
    else:
        sys.stdout.write(text)
    return rc


def smi_output(argv: list) -> tuple:
    subcommand = bool(argv) and argv[0] in ("topo", "nvlink")
    opts = {} if subcommand else parse_smi_args(argv)
    if opts.get("help"):
        return help_text(SMI_HELP_Z, load_config()), RC_OK, None
    action = None if subcommand else smi_action(opts)
    value = parse_setter_value(opts, action) if action in SETTERS else None
    config = load_config()
    if config is None:
        raise Exit(NO_DRIVER, RC_NO_DRIVER)
    with open_state(config) as state:
        init_nvml(state, config)
        host = Host(state)
        unload_idle_gpus(state, host.daemon)  # the driver let go of them since the last client
        if subcommand:
            text, rc = smi_subcommand(host, argv)
        else:
            text, rc = smi_run(host, opts, action, value)
        unload_idle_gpus(state, host.daemon)  # and lets go again as this client exits
    return text, rc, opts.get("filename")


def init_nvml(state: dict, config: dict) -> None:
    """What nvidia-smi's NVML needs before anything else: a loaded driver of its own version. (No driver on disk
    while one is loaded, its package purged since the boot, leaves nothing to compare: a real nvidia-smi went with
    the package.)"""
    loaded, library = state["driver_version"], installed_driver(config)
    if loaded is None:
        raise Exit(NO_DRIVER, RC_NO_DRIVER)
    if library is not None and library != loaded:
        raise Exit(VERSION_MISMATCH.format(nvml=".".join(library.split(".")[:2])), RC_VERSION_MISMATCH)


# --- the help texts: verbatim captures of driver 580.159.04 -------------------------------------
# zlib + base64 of tests/fixtures/real/h100-80gb-hbm3/help.txt and persistenced-help.txt, so that
# no editor can strip their trailing spaces; the version in them follows the configured driver.

SMI_HELP_Z = (
    "eNq1G2lv4zb2e34FsV92BmvZyWwL7M42BTy24hHqq7KS2W5RBLRE28ToKkk5SX/9vkdSsuQ4sjKHMcg4Evnum8z8zht7Q7J6kool"
    "ZEZTumUJSxXxUsXEhoaMOA7Z//ivy/7Vj//uX/5wcTG/W808kotszyMmSZKlXGWCp1vC000mEqp4lhL4RgImY0poGhHJYhYq8mtB"
    "I5GRiO15yGT/ItgxElFFCZcAkElAzCIAQxhXOyYIJXlM4VfFHhUBgDQl/51NicHSI3tOiVRRVpiXZMNj1rf00VhmByIl2zNBY5Ic"
    "GMxyeIKkSk1ruKPpFplQSJMmEGBTBQAv5pli8Jwq/XJTpCHuozFXTyTbEIMQWGCPeSaBAbUTWbHd6dXzOyB45KwpvLiI+VpQ8dQn"
    "K8bsWy1+wMdiJIg8sLXkgA1JSjLBGjKla2QVIfYvlk9qB48eBM1hnyQqM6go7NG80z3lMV2DRAhBOcPWHAV1oPcizRTZFlRQEDuS"
    "nZE1I2safn6gIpIkzJIcEAOI/1jYaaSpXvM0AlFJjaxaf3FYDzLbKZW/HwwqzvopaILTPiwamK/OQRmOFYyT7pN4UO7Nn3LezzWf"
    "/Uxs9e/V3tjJnwYXqyLPM4FGA6qOilDJ9xcOuSnimNhXFwQ+DhnCE2OO5cIeqlcoVPkDWJtm7BeWx2h2ItyBEkJVCFbbb633ywFM"
    "fG/8hdsn7CYTYJIBV+AEr4XhkClPOIrpuVQmbKMhvxamVYRMOPl9sQy8xfyK/D70J1d//FE+eKcfvIMH/T6YhMa56+FPZ8finBx9"
    "lhBEFCkkGEXT7MHs2CNXFoT5OA54tMTXz0GUb14EMvVWATE0rt5bwqaGsJhL5WzzQtagjrmEOPQEEQbfogtNlrfoH2kKwjCeg2KS"
    "OoqWnH6oAWSPYVxELLKQnwMsFxjIGPKa8Fa3s9nQ/+2I6J9S8HOxLdCH5M9Naa522QMgkEWSgGd1JTrM4h4QDf8VSSq/AiDykBSx"
    "4haWDdoWz+95DHKgKYL5w6LmRl48uj42DBIAk0wh8pyFfMNDRN032zZmG8b+lCasvnmabZGoahvQiMt6BAI/phcI6SkuMDnEwout"
    "2rIsv35moBkEyCJVPCYjJeJ/jAjkhANwyUAYmL8gde5prHn99dZ9pjbnT4Pjz4KBIJuf0jSAQUxqt5BctR23CK4w0ApcSk4YAb5o"
    "8gzAe0C6EnxdKEzEX6SAkr7vpIhHA+8RQr2xnYYiIFYxXQyYvNZvhIZIRc9Y+LRjKZEgD4xsANRu7BGWrIGecTC2eCODNzKKuD6l"
    "nCyNn2xNo+uVKsy8JzN3tvB/612QDp/bwJt6/xuiafSIOxr1SODOlq4/DG59t0eWi0+u3yOj6WL0SzeAo8VseRvgVm+8gp+uf7Pw"
    "Z8P5CB6tbpfLhR+443sNcNUN4nI4ce99N/B8d+bOgx4ZjkaL23ngzSdA8ny0GLv+/SoYBh3hHagAA7oPID24wT1y3SN3i2kA2Hrk"
    "5sPIgOwE0V98AgJnw+UShTVZLe9vPH/2aei793euvwLZdmMUhX2/mi0WwUfNnHmw9Bc33tQ9T8pNTKEgCsGOIURAkQM1EpiGzqDw"
    "W0IJ62/7WskacP8swBVN8hhtVRfIGlBCHwcJTwd0v8VyU5d5gkE2RlRnAWJJaU2qZng6MWqLINbiiXrKy5jQ9hlnTKZ/V+QhE58N"
    "fU6BIcF5JBsUxveJpwgxkT0L0Unk9WsgJjyGjHsC7MqduqPAu3NPBmyok7IHqbNbSGMshSBY5VRiJMaqP+YhxN4yl0MlBQWv4kxX"
    "5TrIl9E7S1ktcJsEgDXBM+F6z8r+KuO1BgCgzlZXNeCNZqLfwC3LAtoJ4yz8rDP+1PJRvSPm3Zegfwa/hRbsHyAdOdDRVJVHSUtY"
    "CAFFDoRdCs3XXrsYLkZhQysp2RdR18DYQhkNw6zA3rRGW0lZ9e7bkHSE6gRRbZ9gB3HBlBXwBfu7gxLBkvaYtXeZVE32IIZwARhz"
    "qLzlkeBtK5wwoOKJmBW6Fd5R0MKaQVK127+E2ybmFg0IlmCjGzkCHfElHylXEVz1ZfTU0RzRY1wYulaIyCCMyosNFdenEOjIL1kO"
    "PTaqoIwQtp7Jcj1/eN8hQYVyD/1aeAQPolcBcnsDKX48DKDueNsBVJrtGI0ghjlEfua5mWlwITGAQXiyKUvX7Gah7AQUq0wJMKMM"
    "k0Juejn9DMWYQo8iOATPTsm4+hgGv13P8J1L1m+Z675bqhu7d97IJbPF2LvxRqYIaKa737WQG6kqT3rIGY6awIZZGjInySItsRVI"
    "ufac4PP35HIw9lbDD1N33CNXA3euvxpYzEiJhSEE4HTDtwe+gmy7jRmWSWXgaoWUG0g4OVQaHhMiE1pOPj7TgPQzoqOqRGhQZwLT"
    "UxehDScT350MA9d2vwZemRZKDonlEkTmmmGhjfQQKyD1045eDIy4N8PbaaD5+O9oeruCguM++Oi7wzF5M3aXvgv6cMdvz9fS7wZQ"
    "mX70PngBiuWfNXDwfOSuVo1+aJslzxwEGUKPWJRzUDJDxXXyz8vBcDq9x67lalD1HO8GUyjFx0sjSmEx54VRT90zBd9uwYXMcwiH"
    "GIE6lje6vC6kmTYYAHY3+fjJDGxx8iC5KoxazsLUyewhK2LIkOjZD+A0APnPguMkFWrucIdhUbB1lqkOGfgpxzAHhQpQuSliwqFE"
    "gKBYrGMcnNZNckfPU5eFuvLpkFyNwdem2jicfT7h1dU6T8+Cw9QYUihizPx+pwVUyt7kCFogoq6UKaN1uxuzNXtUgh7mVz14AUgB"
    "Bz0PM2IbWsSK3NhhPJnioNmienMz9d/2IZhAESQLgHcW3AfILHpvDxlE610XZQOzT8y4kQvViAjoQ8BKuNPWdwevCxrzv17jS+CD"
    "Uu/eN3cjGlTWPwd3Nmn9MLhbTYZnAd6dgIM1qkaCzameXICIUUwPO3beDnD8JIko0hR7Uay0yA76Q7HnMhNlltqGJu2Fn7XDm1Jf"
    "y2ll85EkP0HnOsmLEb7rQSdbfv/ZdheEyg6Kwk9OuSBvdD999ePlZQ9/vDV+DGYBzmo6NTD6LSOdIOo6V2IlSpAWM4Y1dGFGNWdS"
    "s49/9bvNOJhS5iQJJKdtGnIZJEgWNTKG5bsTSH3yQj8zwjYbPEgTbEtFFEOXoeNLinBreupGp5figRBahZ4koONB4Ey3RUxFJQ8j"
    "BF2HdQJq9PJTqd073PgzOOMiN2dm8RMWNNowzbCkE9RDWQNegadPIQZ6W5zhuR7As8aYmMRz5KmkaYxoH5oGzObPLLeb+IA1Hmko"
    "WFZAKrSJzziDqUkOMLtFSVllM+sUdqZehjtTD1fF4cHtTH928Lym381YUvld+f2r/O7HK/A7/PGt/W5m+swvdb3vadKl4EqTtupO"
    "aupuaOE1Gq+zfVbp0UmlO7CcYalw3S1IVQaSWL6sXAA5/t83s4QYzw3xrLhTlMLgxswZcYpH9oonxpo5nmlxxTE1dSlmqlkG/KvV"
    "L2uoqtI4o3j6rGOiYOVviPMzEynTwaCIWTckvin0IHJW1R2qNDqt0krGr9FtuedIyVZYFicNddSqNxSVM9d9WYPobQXNdzyUX+XD"
    "7y7Bh//1zIVBXX+XXYNy5Z5QTEB3XNUJdT5M0XA4sBO05jEnGH6NbBt4OnhPHmsx59kDE4627esTDkEfeVIkRK+qXxmxzpCSB6pU"
    "hywRQMbWI+LMJr+q2AUaZAi1uiVLGu3rR9dtOctO43BCb1OX3oNtrT7TuxoEi2A4vYdO9XbqkjcTgTd4PmZ4R4QsoPZ7axtdgzAs"
    "Ilqv1vCz2IO16kszmW7RVIbuUUpzdDsedh4He8C5habzZK+e2XZ8i3OUDbZaLA2RQyxIKxPSmOr6PY8PGURrO8w87U2jw5WGjcgS"
    "Lcm7LFY4ShO8y5y2ChM0gnTKJTQuIBeccu3B7LddQFwOfHcVLHz3vjYFWNy5vu+N7fiBmk7DjoCB3EMV46Z4lQdVEnGpvw6rVabZ"
    "aJuThJRqdceMiqMJ8/meGzdJ3Q9qj6vG3UtvXN1UWBdQl4rmISy0h5kDTbNUjrWeaz10qDsnriF6DXgbaPoJvffAyPn2WBxY7RGG"
    "A+GwzAb6RhczHQ/dKD2zO5/wYwq0GIpCiM8pDrqlvjnSzFsN/sC7Emg1wUrPJ199lgSNeepoWxpg4sFLFEpksXaXulCSTm3k5eB2"
    "jsble6PAaP/wmy2K+VYXxfpCBk/BHXCCB9Xp9QnLmuEqcF6zCn22zbhem123SpWDIaVHtI5iiRmXliMpO7oN4DlOMwphgp3pYsHi"
    "IrYVDBTMYsmLb+G99uCfpdibRIImDkQk8aSj9nVtLjn2hzMQWPmqy4zyleKprAuTI57U1ObSpfOUjyHrywzaH1VOZDrP0doQb2uI"
    "7cNJZ8QX1Zy+THlfebuHZQ+oEz0wc8BnHqjQ2UEzgSffsA196S8mMjtWQ1Oxy6Sm6HbuBW3jbkcZ2pRWshOzGo0oc30HB/Rpxos6"
    "1/quq4efw9kH1/9WXJuDCTyM/rj4hBdSjuhsu91iLr7Z8gC3Hl+aO03ftz4Aef1VJENyz9y/sQdqEVsX21PnaZoo65o6u8O6xi2/"
    "EwT3CYAdG8HMqrvKJqhGydH9wed3fWT9MrDOdzKESK1vZpRX2s65299qdyU1Smf3t5M3fK0EIspeJMwvUk0FXrvdCkjFkVa1vYVd"
    "FTzYEJRw7Hl0x9NjXl5qgNIIS1WoWjdMB+E+mR8fKH/iaYQnpWsqoERWHY73GrIw9J2RhmD6VsrpG1TVSQCuGeiJcmiCVXUkpazq"
    "tixl5tgU2kiD+utF8ip+LSdt/C6Nrp5Zat7FUq2iv5Wp5ueUEyyWi+li8pshUWV51tGZBvaOKG6Js+1Tv4FXA2rDC2nYmxO8Iuau"
    "rCML/DOBdtwDKKZMJ4VlhNmhI7o5oTbdHo9QXE16zNI2guZ3U2/+iyEl3QOEz91iil1bh9bAbN+3oR69Gxm84buQdI1lsOllpAio"
    "FaO+PmiRVpeGTl1+MDUthidzJcUMmF5GbIC14bY3DsnKXa1MZkRMkBEyvKfAdAkuW1m3a0m1+EVyjqG20XXzYXRE02YdnqTnFE24"
    "+zw9dYhttOi/MsCbPoaQ/anrZceE7E1l/QJmDaIN5cybGGS6z3jphmX5xzi22TFuB1trI5YmXoTWaonm6JlAFPJGNgqVZ/e2nTxn"
    "keWVLVyNk4CmQTZhvUgKVhgfFotVQFZTaOZ9Q4lpDWXM0dzO+obp98zqIzIagFqJ0Nc7yUdvHrzXSUOPuXZYGT77uFLxRAc/VL0J"
    "fvpPL5q4ayDa2R+u3DIyaOapZM4L0eFXzTCixVXlNKnJcm17K97RYn4DIp8H3nBa2kNpCOmmvMnRITThRRRoAHFEXer92Bhq8Fpp"
    "Qs5qV6+h9YAGZOF788l7cyyyzZOXxy3PSNP6YULjMPdrqj+4w3K6SSWCbjeRkWcripCfyxdlfII9LwcHhNNa0WjTWiXQae4O5Yw2"
    "K1k+PCMBY52H1S/TcgT2PF0QlLBJkHWycvvsnGLwKgUeP1j6qm1nyKvWtVLnzyxJ4mVbOTgSLMczYax3j6MHAmjBtIwZOqG0f5B4"
    "2Pjm6i0G5gL8AW9nHvZHUOcD/VET0P8Byd9kvg=="
)
PERSISTENCED_HELP_Z = (
    "eNqtVk1v4zYQvedXDPayCWA72aQB2gI5uHGaGuhuDW+cHooeaGkkEaFILUnZ8b/vDEnZSqykxaIBFtlQ5Myb9+brRG9kLsW4Qeuk"
    "86gzzH8G2PCfRsP1jxeTT9c/TS5+ODkBeKgQvjzOZ/MpLA73YSawNnrCN6bgjVFQGAu1kNrTP6lL2Fv3kFtJxsF54XEErsFMFjIT"
    "Su3Cq9YhrHfgD55+l7p9Ts+Cj1vT7KwsKw+nt2dwefHpanx5cXnd3b81tjFWeBkgnQzEB3+Zhj+7v9nceDOC8TgFTH/zz8IS9gCi"
    "9VJJv9sTInQO+Cx9QDKu+GmFqnnxrnWiRJCa4qkDjhAZW8tMXbMFJTVCAvHK5GNCszYOk9Vbo701ykFltlC3WfXCtnTQsFvMJ/DL"
    "DnIsRKv8CIYC30qlwGjiOjwBtNbYiGArLEvlSEBwO6dMGfXQ+EwakXXADennRiAcbJHs0G9S0fq2CQZc1frcbDVo42WGbgJfg7g7"
    "TgBfEcxCiTJCyATrPISQvAvlTMKXTPUwUcAhdcBboZ0MDFIaMSmMq0INPXtQmxyZIdRircg8RZRLF/4/Cqh7TAoFNTrWziU3+9gO"
    "8rSw+nq3/DL9fMc6URT2pjtIai1b0nSYfF/FnKJXjLKWzoUMMMXhPFUE3U9l0JkHYcu2JgkmVIcUUrhdt85DJTYIWyuJFZERXYEv"
    "fnq+Efbctvp8CE4uLelq7G4C8yIKtD+C3BAJxD5H7t5LJuE91o1nj5lFFkZ6Fo8Tno4qocuoP9KpCeACcGa1tIb4nc/cAUGsCVaM"
    "nZdU8/od53ynD4C94bGv+SxqV8L98o/VohMvuL/ZH/1n+SLsAf3ihyMB9x56ClK8axPsHYJmSvh+TKv9qcWOh/7lEL8XTxwqEryQ"
    "7SH9c/QMTXe0dywzQ2T4e7nmgo3MylpQhuzNvpu8r2PpxX/8mZCE2v9/pO8ARu37JsbcFTgDtDk6Tlnwb400NAcXc+Ko33TNhvsn"
    "DTaytIkNcUUcfhx0+5GDoPtk4sicKYrXpnr9KYXXbuq3Qhz69B1hrh4/H2PrmumbsQ457wU7aJRtubahKc5jZyBk+JMTffDtoddT"
    "f4f7xYpmjQ6NjCZkHMKL2/n47pnKhpKEqt3LmlaYK1BmO27MtttNJrDEAm3XStNyMaX+qpC2CwIWF5N7K5pKZg5mcbFZ3k1nVOqU"
    "kA07JNRv+DtdPsyuzmARXH4WmuZOrI07xs/VOxhgLXZApkgyml0g8lym2cWx1rSIUW3GBWSNbMRi5HEU5ndsEZqGbNMoWrvSBkI9"
    "hsYEt4yUTikZsqIcN8JXN4vpw28pZ3gJPHymVWZtuR/EiRQGOG85rWbreOiaicAntBoVh9Iq5MvfWqTX3PvqwAHH4Tg0fkRDn0o8"
    "DbyeJ4vfWppVoc0M5G16kNqKp2XljZZeoQ0glDFPaUnrOTolFJlwYaSlLCok7wyeZZVUGLTunL105irTqpwYpqWCd1p+tCbCkFp0"
    "TuT+ypuxIa/UpoXkyjnaFkfQKGS3DmNHG4JOZDX8rhsaH1aua/hD11dxjf1ANrOAM3XtFzv2cCoT6H8AdQFD6A=="
)


def help_text(blob: str, config: Optional[dict]) -> str:
    """The help of the installed programs: their version is the installed driver's."""
    text = zlib.decompress(base64.b64decode(blob)).decode()
    return text.replace(DEFAULT_DRIVER, installed_driver(config or {}) or DEFAULT_DRIVER)


# --- nvidia-persistenced ----------------------------------------------------------------------


def parse_persistenced_args(argv: list) -> dict:
    opts = {"persistence": True, "verbose": False, "user": None}
    args = list(argv)
    with_value = {"-u": "user", "--user": "user", "-g": "group", "--group": "group",
                  "--nvidia-cfg-path": "cfg_path"}
    flags = {"-V": ("verbose", True), "--verbose": ("verbose", True),
             "--persistence-mode": ("persistence", True), "--no-persistence-mode": ("persistence", False),
             "--uvm-persistence-mode": ("uvm", True), "--no-uvm-persistence-mode": ("uvm", False),
             "-h": ("help", True), "--help": ("help", True), "-v": ("version", True), "--version": ("version", True)}
    while args:
        arg = args.pop(0)
        name, eq, inline = arg.partition("=")
        if name in with_value:
            if not eq:
                if not args:
                    raise Exit(f"nvidia-persistenced: option {name} requires an argument.\n", 1)
                inline = args.pop(0)
            opts[with_value[name]] = inline
        elif arg in flags:
            key, value = flags[arg]
            opts[key] = value
        else:
            raise Exit(f"nvidia-persistenced: Unrecognized option: {arg}\n", 1)
    return opts


def persistenced_main(argv: list) -> int:
    try:
        opts = parse_persistenced_args(argv)
        config = load_config()
        if opts.get("help"):
            sys.stdout.write(help_text(PERSISTENCED_HELP_Z, config))
            return 0
        if opts.get("version"):
            sys.stdout.write(help_text(PERSISTENCED_HELP_Z, config).split("\n\n\n")[0] + "\n\n")
            return 0
        refusal = persistenced_refusal(opts, config)
        if refusal:
            if config is not None:
                with open_state(config) as state:
                    kmsg(state, refusal, f"nvidia-persistenced[{os.getpid()}]")
            raise Exit(PERSISTENCED_FAILED, 1)
        return daemonize(opts, config)
    except Exit as stop:
        sys.stderr.write(stop.text)
        return stop.rc


def persistenced_refusal(opts: dict, config: Optional[dict]) -> Optional[str]:
    """Why the daemon would not start (its syslog line), or None."""
    if config is None or not driver_loaded(config):
        return "Failed to query NVIDIA devices. Please ensure that the NVIDIA device files (/dev/nvidia*) exist"
    if effective_uid() != 0:
        return "Failed to open PID file: Permission denied"
    if live_daemon_pid():
        return "Failed to lock PID file: Resource temporarily unavailable"
    if opts.get("user"):
        import pwd
        try:
            pwd.getpwnam(opts["user"])
        except KeyError:
            return f"Failed to find user '{opts['user']}'"
    return None


def driver_loaded(config: dict) -> bool:
    with open_state(config) as state:
        return state["driver_version"] is not None


def daemonize(opts: dict, config: dict) -> int:
    """Double fork; the caller returns once the pid file is written (systemd Type=forking)."""
    ready_r, ready_w = os.pipe()
    if os.fork():
        os.close(ready_w)
        with os.fdopen(ready_r, "rb") as ready:
            started = ready.read(1) == b"1"
        if not started:
            sys.stderr.write(PERSISTENCED_FAILED)
        return 0 if started else 1
    os.close(ready_r)
    os.setsid()
    if os.fork():
        os._exit(0)
    try:
        detach_stdio()
        set_process_name(b"nvidia-persiste")
        serve(opts, config, ready_w)
    finally:
        os._exit(0)


def detach_stdio() -> None:
    # The daemon must not hold its caller's pipes open (subprocess.run would wait forever).
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.close(devnull)


def set_process_name(name: bytes) -> None:
    """comm as the real daemon's, so pgrep and the lab's process list see nvidia-persistenced."""
    with contextlib.suppress(Exception):
        import ctypes
        ctypes.CDLL(None).prctl(15, ctypes.c_char_p(name), 0, 0, 0)  # PR_SET_NAME


def serve(opts: dict, config: dict, ready_w: int) -> None:
    pid = os.getpid()
    rundir = env_path("NVIDIA_SIM_RUNDIR")
    try:
        os.makedirs(rundir, exist_ok=True)
        with open(pidfile_path(), "w") as fh:
            fh.write(f"{pid}\n")
        register_daemon(config, pid, opts)
    except OSError:
        os.write(ready_w, b"0")
        return
    signal.signal(signal.SIGTERM, lambda *_: shutdown(config, pid, opts))
    signal.signal(signal.SIGINT, lambda *_: shutdown(config, pid, opts))
    os.write(ready_w, b"1")
    os.close(ready_w)
    while True:
        signal.pause()


def register_daemon(config: dict, pid: int, opts: dict) -> None:
    with open_state(config) as state:
        state["daemon"] = {"pid": pid, "persistence": opts["persistence"]}
        for record in state["gpus"]:
            record["daemon_pm"] = None
        source = f"nvidia-persistenced[{pid}]"
        kmsg(state, f"Started ({pid})", source)
        if opts["verbose"]:
            for record in state["gpus"]:
                kmsg(state, f"device {record['bus_id'][4:].lower()} - persistence mode "
                            f"{'enabled' if opts['persistence'] else 'disabled'}.", source)


def shutdown(config: dict, pid: int, opts: dict) -> None:
    with contextlib.suppress(OSError):
        with open(pidfile_path()) as fh:
            mine = fh.read().strip() == str(pid)
        if mine:
            os.unlink(pidfile_path())
    with contextlib.suppress(Exception):
        with open_state(config) as state:
            if (state.get("daemon") or {}).get("pid") == pid:
                state["daemon"] = None
                for record in state["gpus"]:
                    record["daemon_pm"] = None
            kmsg(state, f"Shutdown ({pid})", f"nvidia-persistenced[{pid}]")
    os._exit(0)


# --- dmesg -------------------------------------------------------------------------------------
# util-linux dmesg reading the simulated kernel's ring buffer. Its messages are util-linux 2.38's (getopt's
# for options it does not know; its --help lists the ones it does).

DMESG_DENIED = "dmesg: read kernel buffer failed: Operation not permitted\n"  # kernel.dmesg_restrict=1
DMESG_TRY_HELP = "Try 'dmesg --help' for more information.\n"
DMESG_VERSION = "dmesg from util-linux 2.39.3\n"  # Ubuntu 24.04's
# The options simulated: (short, long) -> what they do ("": nothing to do here). The others util-linux knows
# are refused as not simulated; the rest as util-linux refuses them.
DMESG_FLAGS = {("-T", "--ctime"): "ctime", ("-t", "--notime"): "notime", ("-k", "--kernel"): "",
               ("-P", "--nopager"): "", ("-V", "--version"): "version"}
DMESG_UNSIMULATED_FLAGS = ("-C", "--clear", "-c", "--read-clear", "-D", "--console-off", "-E", "--console-on",
                           "-H", "--human", "-J", "--json", "-L", "--color", "-p", "--force-prefix", "-r", "--raw",
                           "--noescape", "-S", "--syslog", "-u", "--userspace", "-w", "--follow", "-W",
                           "--follow-new", "-x", "--decode", "-d", "--show-delta", "-e", "--reltime", "-h", "--help")
DMESG_UNSIMULATED_VALUES = ("-F", "--file", "-f", "--facility", "-l", "--level", "-n", "--console-level", "-s",
                            "--buffer-size", "--time-format", "--since", "--until")


def parse_dmesg_args(argv: list) -> set:
    """The simulated options given; getopt's refusal of an unknown one, exit 1."""
    wanted = set()
    by_name = {name: action for names, action in DMESG_FLAGS.items() for name in names}
    for arg in argv:
        if arg.startswith("--"):
            names = [arg.split("=", 1)[0]]
        elif arg.startswith("-") and len(arg) > 1:
            names = [f"-{letter}" for letter in arg[1:]]  # -kT is -k -T
        else:
            raise Exit(f"dmesg: bad usage\n{DMESG_TRY_HELP}", 1)
        for name in names:
            if name in DMESG_UNSIMULATED_FLAGS or name in DMESG_UNSIMULATED_VALUES:
                raise SimError(f"dmesg {name} is not simulated")
            if name not in by_name:
                refusal = f"unrecognized option '{arg}'" if name.startswith("--") else f"invalid option -- '{name[1]}'"
                raise Exit(f"dmesg: {refusal}\n{DMESG_TRY_HELP}", 1)
            if name != arg and name.startswith("--"):
                raise Exit(f"dmesg: option '{name}' doesn't allow an argument\n{DMESG_TRY_HELP}", 1)
            wanted.add(by_name[name])
    return wanted


def dmesg_boot_time(lines: list) -> float:
    """When the simulated machine booted: the state's boot_time, else the ring's last write less its uptime."""
    state = load_state(env_path("NVIDIA_SIM_STATE"))
    if state and "boot_time" in state:
        return float(state["boot_time"])
    try:
        last = os.stat(ring_path()).st_mtime
    except OSError:
        return time.time()
    return last - (ring_uptime(lines[-1]) if lines else 0.0)


def ring_uptime(line: str) -> float:
    return float(line[1:line.index("]")])


def ctime(when: float) -> str:
    """As util-linux's -T prints a time: 'Mon Nov 23 09:49:50 2026' (ctime(3), the day padded with a space)."""
    t = time.localtime(when)
    return f"{time.strftime('%a %b', t)} {t.tm_mday:2d} {time.strftime('%H:%M:%S %Y', t)}"


def dmesg_main(argv: list) -> int:
    try:
        wanted = parse_dmesg_args(argv)
        if "version" in wanted:
            sys.stdout.write(DMESG_VERSION)
            return 0
        if effective_uid() != 0:
            raise Exit(DMESG_DENIED, 1)
        try:
            with open(ring_path()) as fh:
                lines = fh.read().splitlines()
        except FileNotFoundError:
            lines = []
        if "notime" in wanted:
            lines = [line[line.index("] ") + 2:] for line in lines]
        elif "ctime" in wanted:
            booted = dmesg_boot_time(lines)
            lines = [f"[{ctime(booted + ring_uptime(line))}] {line[line.index('] ') + 2:]}" for line in lines]
        sys.stdout.write("".join(line + "\n" for line in lines))
        return 0
    except Exit as stop:
        sys.stderr.write(stop.text)
        return stop.rc


# --- gpusim's own commands --------------------------------------------------------------------


def require_config() -> dict:
    config = load_config()
    if config is None:
        raise SimError(f"no config at {env_path('NVIDIA_SIM_CONFIG')}")
    return config


def cmd_init(args: list) -> int:
    """Fresh state from the config; with --config FILE, FILE first becomes the config."""
    if args[:1] == ["--config"] and len(args) == 2:
        install_config(args[1])
    elif args:
        raise SimError("usage: gpusim init [--config FILE]")
    config = require_config()
    with open_state(config, fresh=True) as state:
        boot(state, config)  # a new boot_time forces a save even when nothing else differs
    return 0


def install_config(source: str) -> None:
    with open(source) as fh:
        write_config(fh.read())


def write_config(text: str) -> None:
    target = env_path("NVIDIA_SIM_CONFIG")
    os.makedirs(os.path.dirname(target) or ".", exist_ok=True)
    with open(target + ".new", "w") as fh:
        fh.write(text)
    os.replace(target + ".new", target)
    load_config()  # refuse a config the simulator cannot use, now rather than at the next nvidia-smi


def cmd_set_driver(args: list) -> int:
    """Driver VERSION installed and loaded at once, with no reboot between (a test's shortcut): nvidia-smi reports
    it (and its CUDA version) from now on."""
    if len(args) != 1 or not is_version(args[0]):
        raise SimError("usage: gpusim set-driver VERSION (digits and dots, e.g. 570.195.03)")
    config = load_config()
    if config is None:
        return 0  # no GPUs configured here: no driver to report
    config["driver_version"] = args[0]
    write_config(json.dumps(config, indent=2) + "\n")
    library = env_path("NVIDIA_SIM_LIBRARY")
    if os.path.exists(library):
        with open(library, "w") as fh:
            fh.write(args[0] + "\n")
    with open_state(config) as state:
        load_driver(state, config)
        write_proc_driver(state)
    return 0


def cmd_reboot(args: list) -> int:
    config = load_config()
    if config is None:
        empty_ring()
        write_proc_driver(None)
        return 0  # no driver, no GPUs: nothing else to power cycle
    with open_state(config) as state:
        for record in state["gpus"]:
            reset_volatile(record)
            # a GPU that fell off the bus is back (a gone one stays gone)
            record.update(legacy_pm=False, daemon_pm=None, off_bus=False, deferred_active=record["deferred_mem"])
            # the driver reloads: volatile ECC counts start over, a pending retirement or remap takes effect;
            # forced clock event reasons are the hardware's (a braking PSU, poor cooling): they stay
            record.update(ecc_volatile=0, retired_pending=False, remap_pending=False)
        state["daemon"] = None
        loaded = boot(state, config)
        for record in state["gpus"] if loaded else []:  # the clock event counters count from the driver's load
            record["reasons_since"] = {bit: loaded for bit in record["reasons_since"]}
    if live_daemon_pid() is None:
        with contextlib.suppress(OSError):
            os.unlink(pidfile_path())  # a stale pid file from before the power cut
    return 0


def find_record(state: dict, spec: str) -> dict:
    for record in state["gpus"]:
        if spec == str(record["slot"]) or spec.lower() == record["uuid"].lower() \
                or normal_bus_id(spec) == record["bus_id"].upper():
            return record
    raise SimError(f"no GPU {spec!r}; slots 0..{len(state['gpus']) - 1}")


FAULTS = ("off-bus", "gone", "pcie-degraded", "ecc", "power-brake", "thermal", "pcie-errors", "clear")
FAULT_USAGE = ("usage: gpusim fault GPU off-bus|gone|pcie-degraded|ecc|power-brake|thermal|pcie-errors|clear "
               "[--width N] [--gen N] [--remap-failure]")
FAULT_OPTIONS = {"pcie-degraded": {"--width": True, "--gen": True}, "ecc": {"--remap-failure": False}}
# The clock event reasons a hardware fault holds active: HW Slowdown with its cause [NVML bits, nvml.h].
FORCED_REASONS = {"power-brake": REASON_HW_SLOWDOWN | REASON_HW_POWER_BRAKE,
                  "thermal": REASON_HW_SLOWDOWN | REASON_HW_THERMAL}


def parse_fault_options(kind: str, args: list) -> dict:
    """--width N / --gen N (pcie-degraded), --remap-failure (ecc); anything else is refused."""
    allowed, options, rest = FAULT_OPTIONS.get(kind, {}), {}, list(args)
    while rest:
        name = rest.pop(0)
        if name not in allowed or (allowed[name] and not rest):
            raise SimError(f"unknown fault {' '.join([kind, *args])!r}: off-bus, gone, pcie-degraded "
                           "[--width N] [--gen N], ecc [--remap-failure], power-brake, thermal, pcie-errors, clear")
        options[name] = rest.pop(0) if allowed[name] else True
    return options


def cmd_fault(args: list) -> int:
    if len(args) < 2:
        raise SimError(FAULT_USAGE)
    spec, kind = args[0], args[1]
    if kind not in FAULTS:
        parse_fault_options("", args[1:])  # refuses, naming the kinds
    extra = parse_fault_options(kind, args[2:])
    with open_state(require_config()) as state:
        record = find_record(state, spec)
        model = MODELS[record["model"]]
        if kind == "off-bus":
            fall_off_bus(state, record)
        elif kind == "gone":
            record.update(gone=True, off_bus=False)
            device = model.device_id  # "0x268410DE": device 2684 of vendor 10de
            kmsg(state, f"NVRM: The NVIDIA GPU {record['bus_id'][4:].lower()} (PCI ID: 10de:{device[2:6].lower()}) "
                        "installed in this system has fallen off the bus and is not responding to commands.")
            kmsg(state, "NVRM: The NVIDIA probe routine failed for 1 device(s).")
        elif kind == "pcie-degraded":
            width = int(extra.get("--width", 8 if "--gen" not in extra else model.pcie_width))
            record["link"] = {"gen": int(extra.get("--gen", model.pcie_gen)), "width": width}
        elif kind == "ecc":
            uncorrectable_ecc_error(state, record, bool(extra.get("--remap-failure")))
        elif kind in FORCED_REASONS:
            force_reasons(record, FORCED_REASONS[kind])
        elif kind == "pcie-errors":
            aer_corrected_error(state, record)
        else:  # a repaired card; its lifetime ECC count is in its InfoROM and stays
            record.update(healthy(), off_bus=False, gone=False, link=None, ecc_aggregate=record["ecc_aggregate"])
    return 0


def fall_off_bus(state: dict, record: dict) -> None:
    record["off_bus"] = True
    kmsg(state, f"NVRM: Xid (PCI:{pci_short(record['bus_id'])}): 79, pid='<unknown>', name=<unknown>, "
                "GPU has fallen off the bus.")
    kmsg(state, f"NVRM: GPU {record['bus_id'][4:].lower()}: GPU has fallen off the bus.")


# An Xid line as the 5xx drivers print one the hardware raised, no process to blame ([XID79], [H100-DBE] and
# [DBE-1146] in gpu_models.md).
XID = "NVRM: Xid (PCI:{pci}): {xid}, pid='<unknown>', name=<unknown>, {text}"
# Frame buffer partitions and subpartitions an Xid 48 may name, per architecture (inferred: real lines show
# partition 4, 5, 7 / subpartition 0, 1 on page-retirement GPUs, partition 16 / subpartition 3 on an H100).
FB_PARTITIONS = {"Volta": (8, 2), "Hopper": (20, 4)}


def uncorrectable_ecc_error(state: dict, record: dict, remap_failure: bool) -> None:
    """One double bit error in device memory: Xid 48, then the page retirement or row remap it causes (Xid 63),
    or the row remap that failed (Xid 64). Sources: gpu_models.md, "Kernel log lines"."""
    model = MODELS[record["model"]]
    if model.ecc_mode != "Enabled":
        raise SimError(f"GPU {record['slot']} ({model.name}) has ECC {(model.ecc_mode or 'not supported').lower()}: "
                       "it cannot report an uncorrectable ECC error")
    if record["gone"] or record["off_bus"]:
        raise SimError(f"GPU {record['slot']} is off the bus: the driver cannot hear of its ECC errors")
    if remap_failure and not model.remap_banks:
        raise SimError(f"--remap-failure: GPU {record['slot']} ({model.name}) retires pages, it has no row remapper")
    # where: stable per GPU and error, 32-byte aligned within the frame buffer, as in the real lines
    digest = hashlib.sha256(f"{record['uuid']}/{record['ecc_aggregate']}".encode()).digest()
    address = int.from_bytes(digest[:8], "big") % (model.memory_mib << 20) & ~0x1F
    partitions, subpartitions = FB_PARTITIONS.get(model.architecture, (8, 2))
    pci = pci_short(record["bus_id"])
    record["ecc_volatile"] += 1
    record["ecc_aggregate"] += 1
    kmsg(state, XID.format(pci=pci, xid=48, text="An uncorrectable double bit error (DBE) has been detected on GPU "
                           f"in the framebuffer at physAddr 0x{address:x} partition {digest[8] % partitions}, "
                           f"subpartition {digest[9] % subpartitions}."))
    if remap_failure:
        record["remap_failure"] = True
        kmsg(state, XID.format(pci=pci, xid=64, text=f"Row Remapper Error: (0x{address:016x}) - "
                               "All reserved rows for bank are remapped"))
    elif model.remap_banks:
        record.update(remap_unc=record["remap_unc"] + 1, remap_pending=True)
        kmsg(state, XID.format(pci=pci, xid=63, text=f"Row Remapper: New row (0x{address:016x}) marked for "
                               "remapping, reset gpu to activate."))
    elif model.retired_pages:
        record.update(retired_dbe=record["retired_dbe"] + 1, retired_pending=True)
        kmsg(state, XID.format(pci=pci, xid=63, text="Dynamic Page Retirement: New page retired, reboot to "
                               f"activate (0x{address >> 12:016x})."))


def force_reasons(record: dict, bits: int) -> None:
    """A hardware condition holds clock event reasons active; the GPU was at work, so it is not idle."""
    now = time.time()
    for bit in (REASON_HW_SLOWDOWN, REASON_HW_THERMAL, REASON_HW_POWER_BRAKE):
        if bits & bit and not record["forced_reasons"] & bit:
            record["reasons_since"][f"0x{bit:x}"] = now
    record["forced_reasons"] |= bits


def root_port(record: dict) -> str:
    """The PCIe root port above a GPU: stable, one per slot (00:01.0 for slot 0, 00:02.0 for slot 1, ...)."""
    domain = record["bus_id"].split(":")[0][-4:].lower()
    return f"{domain}:00:{1 + record['slot'] % 31:02x}.0"


def aer_corrected_error(state: dict, record: dict) -> None:
    """A corrected receiver error on the GPU's link, as the kernel's AER driver reports it (drivers/pci/pcie/
    aer.c: aer_print_port_info, aer_print_error, __aer_print_error's "   [%2d] %-22s%s"): 5.x kernel wording,
    with the "AER: " prefix on every line (a real 5.4 Ubuntu dmesg; see gpu_models.md)."""
    gpu = record["bus_id"][4:].lower()
    device = MODELS[record["model"]].device_id[2:6].lower()
    kmsg(state, f"pcieport {root_port(record)}: AER: Corrected error received: {gpu}")
    kmsg(state, f"nvidia {gpu}: AER: PCIe Bus Error: severity=Corrected, type=Physical Layer, (Receiver ID)")
    kmsg(state, f"nvidia {gpu}: AER:   device [10de:{device}] error status/mask=00000001/0000e000")
    kmsg(state, f"nvidia {gpu}: AER:    [ 0] {'RxErr':<22}")


WRAPPER = """#!{python} -S
# {name}: the GPU simulator, written by `gpusim install`. It imports the gpusim package from
# {path!r} (a directory holding it, or a zipapp of it).
import sys
sys.path.insert(0, {path!r})
import gpusim
sys.exit(gpusim.main(sys.argv))
"""


def cmd_install(args: list) -> int:
    """DIR/nvidia-smi, DIR/nvidia-persistenced and DIR/dmesg: executable wrappers around this package, imported
    from where this run imported it (the directory holding it, or the zipapp)."""
    if len(args) != 1:
        raise SimError("usage: gpusim install DIR")
    os.makedirs(args[0], exist_ok=True)
    for name in PROGRAMS:
        path = os.path.join(args[0], name)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        with open(path, "w") as fh:
            fh.write(WRAPPER.format(python=sys.executable, name=name, path=package_home()))
        os.chmod(path, 0o755)
    return 0


def package_home() -> str:
    """The sys.path entry this package was imported from: the directory holding it, or a zipapp of it."""
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cmd_show(args: list) -> int:
    with open_state(require_config()) as state:
        sync_daemon(state)
        sys.stdout.write(json.dumps(state, indent=2, sort_keys=True) + "\n")
    return 0


COMMANDS = {"init": cmd_init, "reboot": cmd_reboot, "fault": cmd_fault, "set-driver": cmd_set_driver,
            "install": cmd_install, "show": cmd_show}
PROGRAMS = {"nvidia-smi": smi_main, "nvidia-persistenced": persistenced_main, "dmesg": dmesg_main}


def main(argv: list) -> int:
    program, args = os.path.basename(argv[0]), argv[1:]
    try:
        if program in PROGRAMS:
            return PROGRAMS[program](args)
        if args and args[0] in PROGRAMS:
            return PROGRAMS[args[0]](args[1:])
        if args and args[0] in COMMANDS:
            return COMMANDS[args[0]](args[1:])
        sys.stderr.write(__doc__)
        return RC_INVALID
    except SimError as exc:
        sys.stderr.write(f"gpusim: {exc}\n")
        return RC_SIM
