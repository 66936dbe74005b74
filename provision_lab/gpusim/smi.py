"""nvidia-smi: its command line, and each run against the simulated GPUs."""

from __future__ import annotations

import sys
import time

from .errors import (Exit, HELP_HINT, INVALID_COMBINATION, NO_DEVICES, NO_DRIVER, RC_GPU_LOST, RC_INVALID, RC_NOT_FOUND,
                     RC_NO_DRIVER, RC_NO_PERMISSION, RC_OK, RC_VERSION_MISMATCH, SimError)
from .fields import query_compute_apps, query_gpus, query_remapped_rows, query_supported_clocks
from .gpu import Gpu, Host, normal_bus_id
from .helptext import SMI_HELP_Z, help_text
from .env import effective_uid
from .kernel import installed_driver
from .migcaps import make_instance_devices
from .migsmi import mig_main, parse_mig_args
from .reset import run_reset
from .nvlink import parse_nvlink_args, render_nvlink
from .report import parse_display, render_query
from .setters import MODULE_POWER, SETTERS, run_setter
from .state import load_config, open_state, unload_idle_gpus
from .table import render_list, render_table, render_version
from .topo import render_topo
from .xmlreport import render_xml

# The library (nvidia-smi's NVML) is not the loaded kernel module's version: a driver installed, no reboot yet.
# Since the 5xx drivers the library's version follows, as its first two components ("550.144", "570.124").
VERSION_MISMATCH = "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: {nvml}\n"
RESET_DENIED = "Unable to reset GPU {bus}: Insufficient Permissions\n"
XML_WITH_DISPLAY = ("Invalid combination of input arguments: --display/-d flags can not be combined with "
                    "-x/--xml-format flags.\n")

# --- the command line ---------------------------------------------------------------------------------

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
    "e": (("-e", "--ecc-config"), True),
    "c": (("-c", "--compute-mode"), True),
    "mig": (("-mig", "--multi-instance-gpu"), True),
    "reset": (("-r", "--gpu-reset"), False),
    "loop": (("-l", "--loop"), True),  # seconds; with --query-gpu only (others: not simulated)
    "loop_ms": (("-lms", "--loop-ms"), True),
}
SUBCOMMANDS = ("topo", "nvlink", "mig")
SPELLINGS = {spelling: name for name, (spellings, _) in SMI_OPTIONS.items() for spelling in spellings}
# Real options and subcommands the simulator does not model: say so rather than pretend.
UNSIMULATED = {"-B", "--list-excluded-gpus", "-col", "--columns", "-u", "--unit",
               "--dtd", "--debug", "-p", "--reset-ecc-errors", "--gom", "-vm", "--virt-mode", "-cc", "--cuda-clocks",
               "-am", "--accounting-mode", "-caa", "--clear-accounted-apps", "--auto-boost-default",
               "--auto-boost-permission", "-gtt", "--gpu-target-temp", "-den", "--dram-encryption", "--set-hostname",
               "--get-hostname", "-t", "--toggle-led", "--help-query-gpu", "--help-query-supported-clocks",
               "--query-accounted-apps", "--query-retired-pages", "--help-query-remapped-rows",
               "--help-query-compute-apps", "--help-query-retired-pages", "--help-query-accounted-apps",
               "dmon", "daemon", "replay", "pmon", "drain", "c2c", "clocks", "encodersessions", "fbcsessions",
               "vgpu", "compute-policy", "boost-slider", "power-hint", "base-clocks", "conf-compute", "gpm",
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


def select_gpus(host: Host, spec: str | None) -> list:
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


def smi_action(opts: dict) -> str:
    """The one thing this run does; two setters or two queries at once are refused, as by nvidia-smi."""
    actions = [key for key in ("query_gpu", "query_supported_clocks", "query_remapped_rows", "query_compute_apps",
                               "query", "list", "version", "reset", *SETTERS) if key in opts]
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
            return render_xml(host, gpus), RC_OK
        return render_query(host, gpus, parse_display(opts.get("display"))), RC_OK
    if action == "list":
        return render_list(gpus), RC_OK
    if action == "reset":
        if effective_uid() != 0:
            raise Exit(RESET_DENIED.format(bus=gpus[0].bus_id), RC_NO_PERMISSION)
        return run_reset(host, gpus)
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
    """topo -m, nvlink -s or -e [-i ID], and mig (migsmi.py); other subcommands are not simulated."""
    command, rest = argv[0], argv[1:]
    if command == "topo" and rest in (["-m"], ["--matrix"]):
        if not host.gpus:
            raise Exit(NO_DEVICES, RC_NOT_FOUND)
        return render_topo(host), RC_OK
    if command == "mig":
        spec = parse_mig_args(rest).get("id")
        answer = mig_main(host, select_gpus(host, spec), rest)
        make_instance_devices([g.record for g in host.gpus])  # new instances' /dev/nvidia-caps files (migcaps.py)
        return answer
    if command == "nvlink":
        view, spec = parse_nvlink_args(rest)
        gpus = select_gpus(host, spec)
        lost = [g for g in gpus if g.lost]  # an error line each, as the other views print them, and exit 15
        text = "".join(g.handle_error() for g in lost) + render_nvlink(view, [g for g in gpus if not g.lost],
                                                                       host.gpus)
        return text, RC_GPU_LOST if lost else RC_OK
    raise SimError(f"nvidia-smi {' '.join(argv)} is not simulated")


def loop_seconds(argv: list) -> float | None:
    """-l SECONDS or -lms MS: the interval of a looping --query-gpu; None when not looping."""
    if argv and argv[0] in SUBCOMMANDS:
        return None
    opts = parse_smi_args(argv)
    if "loop" not in opts and "loop_ms" not in opts:
        return None
    if "query_gpu" not in opts:
        raise SimError("nvidia-smi -l/-lms is simulated with --query-gpu only")
    try:
        seconds = float(opts["loop"]) if "loop" in opts else float(opts["loop_ms"]) / 1000
    except ValueError:
        raise Exit(f"ERROR: Invalid value for the loop interval. {HELP_HINT}\n", RC_INVALID) from None
    return max(seconds, 0.01)


def smi_loop(argv: list, seconds: float) -> int:
    """A query each interval until killed, as nvidia-smi -lms does: the CSV header once, then the rows; a GPU
    that falls off the bus meanwhile prints its error line in place of its row."""
    header = None if "noheader" not in " ".join(argv) else ""  # "": nothing to drop
    while True:
        try:
            text, _, _ = smi_output(argv)
        except Exit as stop:
            text = stop.text
        lines = text.splitlines(keepends=True)
        if header is None:
            header = next((line for line in lines if not line.startswith("Unable to determine")), "")
        else:
            lines = [line for line in lines if line != header]
        sys.stdout.write("".join(lines))
        sys.stdout.flush()
        time.sleep(seconds)


def smi_main(argv: list) -> int:
    try:
        seconds = loop_seconds(argv)
        if seconds is not None:
            return smi_loop(argv, seconds)
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
    subcommand = bool(argv) and argv[0] in SUBCOMMANDS
    opts = {} if subcommand else parse_smi_args(argv)
    if opts.get("help"):
        return help_text(SMI_HELP_Z, load_config()), RC_OK, None
    action = "" if subcommand else smi_action(opts)  # a subcommand is no action of nvidia-smi's own
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
