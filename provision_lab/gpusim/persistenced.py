"""nvidia-persistenced: the daemon that holds the GPUs (persistence), as the simulated programs see it."""

from __future__ import annotations

import contextlib
import os
import signal
import sys

from .env import effective_uid, env_path, pidfile_path
from .errors import Exit
from .helptext import PERSISTENCED_HELP_Z, help_text
from .kernel import kmsg
from .state import live_daemon_pid, load_config, open_state

PERSISTENCED_FAILED = "nvidia-persistenced failed to initialize. Check syslog for more details.\n"


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
        assert config is not None  # no config: persistenced_refusal refused
        return daemonize(opts, config)
    except Exit as stop:
        sys.stderr.write(stop.text)
        return stop.rc


def persistenced_refusal(opts: dict, config: dict | None) -> str | None:
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
