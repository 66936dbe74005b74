"""Installed Debian packages and running daemons: two sections of the facts batch, each snippet beside its parser.

A daemon is "stale" when a configuration file it reads changed after it started: the start time comes from
/proc: field 22 of /proc/PID/stat (clock ticks after boot) against /proc/uptime, both read with the time now, so
the age is exact (btime, the boot time /proc/stat gives in whole seconds, drifts from the wall clock over a
long uptime and would make a fresh restart look older than the file it read). So a run that wrote a file
and failed before restarting the daemon is caught by the next run, with nothing remembered in between.
"""

from __future__ import annotations

from dataclasses import dataclass

from provision.core.text import number

# The process names provision restarts when their files or packages change; a name is its comm, which the kernel
# cuts at 15 characters: nv-fabricmanager (NVIDIA Fabric Manager) is "nv-fabricmanage".
DAEMONS = ("munged", "slurmd", "slurmctld", "nv-fabricmanage")

# "clock TICKS UPTIME NOW", then "proc NAME PID USER STARTTIME_TICKS" per process.
# One pass over /proc with the shell's own `read` (pgrep, once per daemon, scanned every process again and
# forked for it); a process's name is its comm, as pgrep -x matches it (the names here are under 15 characters).
DAEMONS_SNIPPET = (
    "u=; read -r u _ 2>/dev/null </proc/uptime; echo \"clock $(getconf CLK_TCK) ${u:--} $(date +%s.%N)\"; "
    "for p in /proc/[0-9]*; do c=; read -r c 2>/dev/null <\"$p/comm\" || continue; "
    f"case $c in {'|'.join(DAEMONS)}) ;; *) continue;; esac; "
    "s=; read -r s 2>/dev/null <\"$p/stat\" || continue; set -- ${s##*) }; shift 19; "
    "echo \"proc $c ${p#/proc/} $(stat -c %U \"$p\") $1\"; done; true"
)


def parse_daemons(text: str) -> dict[str, list[DaemonProcess]]:
    """process name -> its running processes, each with its owner and start time (seconds since the epoch)."""
    ticks = uptime = now = None
    running: dict[str, list[DaemonProcess]] = {name: [] for name in DAEMONS}
    for line in text.splitlines():
        words = line.split()
        if words[:1] == ["clock"] and len(words) == 4 and words[1].isdigit():
            ticks, uptime, now = int(words[1]), number(words[2]), number(words[3])
        elif words[:1] == ["proc"] and len(words) == 5 and words[1] in running and words[2].isdigit():
            started = (now - (uptime - int(words[4]) / ticks)
                       if ticks and uptime is not None and now is not None and words[4].isdigit() else None)
            running[words[1]].append(DaemonProcess(int(words[2]), words[3], started))
    return running


@dataclass
class DaemonProcess:
    """One running process of a daemon provision manages (capabilities/system/daemons.py)."""

    pid: int
    user: str
    started: float | None  # seconds since the epoch; None when /proc did not say
