"""Installed Debian packages and running daemons: two sections of the facts batch, each snippet beside its parser.

A daemon is "stale" when a configuration file it reads changed after it started: the start time comes from
/proc: field 22 of /proc/PID/stat (clock ticks after boot) against /proc/uptime, both read with the time now, so
the age is exact (btime, the boot time /proc/stat gives in whole seconds, drifts from the wall clock over a
long uptime and would make a fresh restart look older than the file it read). So a run that wrote a file
and failed before restarting the daemon is caught by the next run, with nothing remembered in between.
"""

from __future__ import annotations

import re
import shlex

from provision.capabilities.host import DaemonProcess, SlurmNodeState

DAEMONS = ("munged", "slurmd", "slurmctld")  # the process names provision restarts when their files change

# "clock TICKS UPTIME NOW", then "proc NAME PID USER STARTTIME_TICKS" per process.
DAEMONS_SNIPPET = (
    "echo \"clock $(getconf CLK_TCK) $(cut -d' ' -f1 /proc/uptime) $(date +%s.%N)\"; "
    f"for n in {' '.join(DAEMONS)}; do for p in $(pgrep -x \"$n\" 2>/dev/null); do "
    "s=$(cat \"/proc/$p/stat\" 2>/dev/null) || continue; s=${s##*) }; "
    "echo \"proc $n $p $(stat -c %U \"/proc/$p\") $(echo \"$s\" | cut -d' ' -f20)\"; done; done; true"
)


# The node as slurmctld sees it (verify only): its own NodeName is its short hostname (slurm.conf by provision).
# `timeout`: a controller that does not answer must not hold the whole batch (scontrol waits MessageTimeout).
SLURM_NODE_SNIPPET = ("command -v scontrol >/dev/null || { echo no-scontrol; exit 0; }; "
                      "timeout 15 scontrol -o show node \"$(hostname -s)\" 2>&1")
DRAIN_REASON_PREFIX = "provision-verify:"  # a drain verify set, and so the one `verify --resume` may undo


def parse_slurm_node(text: str) -> SlurmNodeState | None:
    """`scontrol -o show node` of this node: its state words and reason; None where scontrol is not installed."""
    text = text.strip()
    if text == "no-scontrol":
        return None
    state = re.search(r"(?:^| )State=(\S+)", text)
    if not text.startswith("NodeName=") or state is None:
        return SlurmNodeState(error=text.splitlines()[-1] if text else "scontrol printed nothing")
    reason = re.search(r" Reason=(.*?)(?: \[[^]]*\])?(?= \w+=|$)", text)
    return SlurmNodeState(name=text.split()[0].removeprefix("NodeName="),
                          states=tuple(state.group(1).split("+")), reason=reason.group(1) if reason else "")


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


def parse_held(text: str) -> list[str]:
    """The asked packages that are installed and on hold (dpkg's selection "hold": the h of hi)."""
    return sorted(words[0] for words in (line.split() for line in text.splitlines()[1:])
                  if len(words) >= 3 and words[2][:2] == "hi")


def parse_daemons(text: str) -> dict[str, list[DaemonProcess]]:
    """process name -> its running processes, each with its owner and start time (seconds since the epoch)."""
    ticks = uptime = now = None
    running: dict[str, list[DaemonProcess]] = {name: [] for name in DAEMONS}
    for line in text.splitlines():
        words = line.split()
        if words[:1] == ["clock"] and len(words) == 4 and words[1].isdigit():
            ticks, uptime, now = int(words[1]), _number(words[2]), _number(words[3])
        elif words[:1] == ["proc"] and len(words) == 5 and words[1] in running and words[2].isdigit():
            known = ticks and uptime is not None and now is not None and words[4].isdigit()
            started = now - (uptime - int(words[4]) / ticks) if known else None
            running[words[1]].append(DaemonProcess(int(words[2]), words[3], started))
    return running


def _number(word: str) -> float | None:
    try:
        return float(word)
    except ValueError:
        return None
