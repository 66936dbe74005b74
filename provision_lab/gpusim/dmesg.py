"""dmesg: util-linux dmesg reading the simulated kernel's ring buffer."""

from __future__ import annotations

import os
import sys
import time

from .env import effective_uid, env_path, ring_path
from .errors import Exit, SimError
from .state import load_state

# Its messages are util-linux 2.38's (getopt's for options it does not know; its --help lists the ones it does).

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
