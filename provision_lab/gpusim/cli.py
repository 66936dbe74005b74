"""gpusim: a faithful, stateful stand-in for nvidia-smi, nvidia-persistenced and dmesg (stdlib only, Python 3.9+).

Installed on lab nodes as /usr/bin/nvidia-smi (and /usr/bin/nvidia-persistenced): wrappers that import this
package from one zipapp file. What it prints, how it fails and what survives what follow real captures;
every model figure and its source is in gpu_models.md beside this package.

Usage (gpusim: `python -m provision_lab.gpusim`, `python provision_lab/gpusim`, `python gpusim.pyz`)
  nvidia-smi ARGS...                     when installed (copied or linked) under that name
  nvidia-persistenced ARGS...            likewise: daemonizes, writes its pid file
  nv-fabricmanager [-c FILE]             likewise, on an NVSwitch board (config "board"): at the loaded driver's
                                         version (its own: NVIDIA_SIM_FABRIC_MANAGER) registers the GPUs with
                                         the fabric (fabric.state Completed) and runs until killed; at another,
                                         logs the real mismatch line and exits 1
  dmesg [-T|--ctime] [-t|--notime] [-k|--kernel] [-P|--nopager]
                                         likewise: the simulated kernel's ring buffer (this boot's kernel
                                         lines, as `[   65.315783] message`); root only (kernel.dmesg_restrict=1)
  gpusim nvidia-smi|nvidia-persistenced|dmesg ARGS...
  gpusim init [--config FILE]            fresh state from the config (settings and faults forgotten);
                                         FILE, if given, first replaces the config; a boot (see reboot)
  gpusim reboot                          power cycle: the driver on disk (the installed one, see Driver) is
                                         the one that loads; persistence off, power limits and clocks back to
                                         defaults, pending -lmcd, ECC and MIG modes applied, MIG instances and
                                         compute mode gone (MIG mode too on Hopper: the driver alone kept it),
                                         fallen-off GPUs back; a degraded
                                         link stays degraded; volatile ECC and NVLink error counts back to 0,
                                         a pending page retirement or row remap takes effect; forced clock
                                         event reasons (power brake, thermal) and NVLink links down stay; the
                                         kernel ring buffer starts afresh with the driver's load line; kills
                                         no process
  gpusim fault GPU KIND [--width N] [--gen N] [--remap-failure] [--link L]
                                         GPU: slot number (0.. in config order), UUID or PCI bus id. KIND:
                                         off-bus: fallen off the bus while running (Xid 79): still counted,
                                         its handle fails, nvidia-smi says so and exits 15, the others keep
                                         their indexes; a reboot brings it back.
                                         gone: not enumerated at all (a dead card or riser, a pulled GPU):
                                         the others are renumbered; it stays gone across reboots until clear.
                                         init-failed: gone, and the driver says why at each load
                                         (RmInitAdapter failed, rm_init_adapter failed): until clear.
                                         pcie-degraded trains the link at x8 unless --width/--gen say otherwise.
                                         pcie-degraded-under-load: the same only while a load runs (a riser
                                         that retrains down under heavy traffic): at rest at its maximum.
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
                                         nvlink-down: NVLink link L (--link, default 0) no longer trains:
                                         nvlink -s says <inactive>, -e leaves it out; it stays across reboots
                                         until clear. nvlink-errors: link L counts 5 Replay, 1 Recovery and 5
                                         CRC Errors more (nvlink -e), back to 0 at a reboot. Both refused on a
                                         GPU without NVLink (GeForce).
                                         process: a process runs on the GPU (a python3 that sleeps, started
                                         detached): --query-compute-apps lists it while it runs; clear ends it.
                                         mig-instances-gone: the GPU's MIG instances are gone (as after a
                                         crash or a driver reload), MIG mode stays on; refused where it is off.
                                         reset-required, needs-reboot, failing-card: the driver asks for a GPU
                                         reset or a reboot (recovery.py: gpu_recovery_action, Xid 154); -r or a
                                         reboot ends the first, a reboot the second, clear only the third;
                                         reset-required --drain: Drain and Reset (its work may end first).
                                         clear: a repaired card: every fault above undone, its counts back to 0
                                         but the aggregate (lifetime) ECC count.
  gpusim set-driver VERSION              driver VERSION installed and loaded at once, without the reboot a real
                                         one needs (the config's, and the library file where there is one; the
                                         config's GPUs stay): a shortcut for tests; no config: nothing to do
  gpusim install DIR                     DIR/nvidia-smi, DIR/nvidia-persistenced and DIR/dmesg: wrappers that run
                                         this package (from where it was imported: a checkout or a zipapp)
  gpusim show                            the state as JSON
  gpusim load --seconds N                every GPU on the bus under load for N seconds (load_model.py: clocks,
                                         power with its transients, heat); the config's psu_watts browns out
                                         (load.py); prints provision's load program's JSON line
  gpusim psu WATTS|clear                 the node's supplies give its GPUs WATTS from now on (a weak PSU fitted
                                         on a running node; it stays across reboots); clear: the config's
                                         psu_watts again

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
  NVIDIA_SIM_FABRIC_MANAGER  nv-fabricmanager's own version, a file its package ships
                      (default /usr/lib/provision-lab/fabricmanager-version)
  NVIDIA_SIM_PROC_DRIVER  /proc/driver/nvidia, which the loaded driver makes: its version file, written at
                      each boot, gone while no driver is loaded (default /proc/driver/nvidia; where another
                      NVIDIA_SIM_* path is set, the state's path + ".proc-driver-nvidia", so that a test's
                      simulator never writes to /proc)
  NVIDIA_SIM_CAPS_DEV  /dev/nvidia-caps, the MIG capability devices (migcaps.py) beside the driver's
                      /proc/driver/nvidia-caps/mig-minors (default /dev/nvidia-caps; where another NVIDIA_SIM_*
                      path is set, the state's path + ".dev-nvidia-caps")

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
  "board": "hgx-h100-8" (with "gpus": [{"model": "h100-80gb-hbm3", "count": 8}]): an HGX baseboard, its GPUs
  on four NVSwitches (/proc/driver/nvidia-nvswitch/devices while a driver is loaded): fabric.state In Progress
  at each boot until nv-fabricmanager registers them.
  Models: v100-sxm2-16gb, rtx-3090, rtx-4090, h100-80gb-hbm3, h200. Per-GPU overrides (uuid, bus_id,
  vbios, serial, module_id, pdi) are one value when count is 1, else a list of count values.
  Without overrides UUIDs are derived from the hostname and slot, so nodes differ.
  nics: the RDMA NICs topo -m shows (NIC0.. in this order; none: GPUs only). near_gpu, optional: the slot
  of the GPU behind the same PCIe switch (PIX); numa: its NUMA node (default: near_gpu's, else 0).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys

from .dmesg import dmesg_main
from .fabric import fabric_manager_main
from .env import env_path, pidfile_path
from .errors import RC_INVALID, RC_SIM, SimError
from .faults import cmd_fault
from .load import cmd_load, cmd_psu
from .kernel import boot, empty_ring, is_version, load_driver, write_proc_driver
from .modes import apply_pending, driver_unloaded
from .persistenced import persistenced_main
from .recovery import after_boot as recovery_after_boot
from .smi import smi_main
from .state import live_daemon_pid, load_config, open_state, require_config, reset_volatile, sync_daemon

# --- gpusim's own commands --------------------------------------------------------------------


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
            # the driver reloads: volatile ECC and NVLink error counts start over, a pending retirement or remap
            # takes effect; forced clock event reasons and links down are the hardware's (a braking PSU, poor
            # cooling, a bad bridge): they stay
            record.update(ecc_volatile=0, retired_pending=False, remap_pending=False, nvlink_errors={})
            apply_pending(record)  # pending ECC and MIG modes take effect; MIG instances do not survive
            driver_unloaded(record)  # Hopper and later: MIG mode went with the driver
        state["daemon"] = None
        loaded = boot(state, config)
        recovery_after_boot(state, loaded)  # a failing card fails again
        for record in state["gpus"] if loaded else []:  # the clock event counters count from the driver's load
            record["reasons_since"] = {bit: loaded for bit in record["reasons_since"]}
    if live_daemon_pid() is None:
        with contextlib.suppress(OSError):
            os.unlink(pidfile_path())  # a stale pid file from before the power cut
    return 0


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
            "install": cmd_install, "show": cmd_show, "load": cmd_load, "psu": cmd_psu}
PROGRAMS = {"nvidia-smi": smi_main, "nvidia-persistenced": persistenced_main, "dmesg": dmesg_main,
            "nv-fabricmanager": fabric_manager_main}


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
