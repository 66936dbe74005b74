"""Installed Debian packages and running daemons: two sections of the facts batch, each snippet beside its parser.

A daemon is "stale" when a configuration file it reads changed after it started: the start time comes from
/proc (field 22 of /proc/PID/stat, clock ticks after boot, plus the boot time), so a run that wrote a file
and failed before restarting the daemon is caught by the next run, with nothing remembered in between.
"""

from __future__ import annotations

import shlex

from provision.facts.model import DaemonProcess

DAEMONS = ("munged", "slurmd", "slurmctld")  # the process names provision restarts when their files change

# "clock TICKS BOOT_EPOCH NOW", then "proc NAME PID USER STARTTIME_TICKS" per process.
DAEMONS_SNIPPET = (
    "echo \"clock $(getconf CLK_TCK) $(sed -n 's/^btime //p' /proc/stat) $(date +%s)\"; "
    f"for n in {' '.join(DAEMONS)}; do for p in $(pgrep -x \"$n\" 2>/dev/null); do "
    "s=$(cat \"/proc/$p/stat\" 2>/dev/null) || continue; s=${s##*) }; "
    "echo \"proc $n $p $(stat -c %U \"/proc/$p\") $(echo \"$s\" | cut -d' ' -f20)\"; done; done; true"
)


def packages_snippet(names: list[str]) -> str:
    """"asked NAMES", then one line per package dpkg knows: NAME VERSION STATUS (ii: installed, hi: held)."""
    return (f"echo asked {shlex.join(names)}; "
            f"dpkg-query -W -f='${{Package}} ${{Version}} ${{db:Status-Abbrev}}\\n' {shlex.join(names)} "
            "2>/dev/null; true")


def parse_packages(text: str) -> dict[str, str | None]:
    """Each asked name -> its installed version, None when not installed (unknown, removed, config left)."""
    lines = text.splitlines()
    asked = lines[0].split()[1:] if lines and lines[0].startswith("asked") else []
    found: dict[str, str | None] = dict.fromkeys(asked)
    for line in lines[1:]:
        words = line.split()
        if len(words) >= 3 and words[0] in found and words[2][1:2] == "i":
            found[words[0]] = words[1]
    return found


def parse_daemons(text: str) -> dict[str, list[DaemonProcess]]:
    """process name -> its running processes, each with its owner and start time (seconds since the epoch)."""
    ticks = boot = None
    running: dict[str, list[DaemonProcess]] = {name: [] for name in DAEMONS}
    for line in text.splitlines():
        words = line.split()
        if words[:1] == ["clock"] and len(words) == 4 and words[1].isdigit() and words[2].isdigit():
            ticks, boot = int(words[1]), int(words[2])
        elif words[:1] == ["proc"] and len(words) == 5 and words[1] in running and words[2].isdigit():
            started = boot + int(words[4]) / ticks if ticks and boot is not None and words[4].isdigit() else None
            running[words[1]].append(DaemonProcess(int(words[2]), words[3], started))
    return running
