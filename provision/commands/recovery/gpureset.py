"""The reset step: what holds the GPUs (read from the facts), stopped; `nvidia-smi -r` on the GPUs the causes
name (every GPU on an NVSwitch board); what was stopped, started again. One script on the node, so what was
stopped is started again even when the reset fails.

Holders, as NVIDIA names them (../shared/reference node-lifecycle-reference.md 7.1): nvidia-persistenced keeps the
GPU open and the reset answers "is currently in use by another process" (gpu-operator#118); the fabric manager
guide stops DCGM and the fabric manager around a reset and starts them after, the fabric manager first. The GPU
settings a reset loses (clocks, power limits, compute mode) are the apply that follows the reset.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING

from provision.capabilities.dcgm.tasks import UNIT as DCGM_UNIT
from provision.capabilities.fabric.facts import PROCESS as FABRIC_PROCESS, UNIT as FABRIC_UNIT
from provision.capabilities.gpu.facts import PERSISTENCED_PIDFILE

if TYPE_CHECKING:  # types only
    from provision.capabilities.host import HostFacts

# Where no systemd runs (a container, the lab's nodes) each daemon is stopped and started by its own program.
FABRIC_CONFIG = "/usr/share/nvidia/nvswitch/fabricmanager.cfg"  # the packaged unit's ExecStart argument


@dataclass(frozen=True)
class Holder:
    """A daemon that holds the GPUs open, and how this node stops and starts it."""

    name: str
    why: str  # what the facts showed
    stop: str  # shell
    start: str  # shell


def holders(facts: HostFacts) -> list[Holder]:
    """What holds the GPUs on this node, in the order they are stopped (started again in reverse: the
    persistence daemon first, the fabric manager before DCGM)."""
    systemd = facts.system.systemd_running
    found = []
    if facts.dcgm.hostengine is not None:
        found.append(Holder("DCGM's host engine", f"dcgmi reached host engine {facts.dcgm.hostengine}",
                            *unit_or(systemd, DCGM_UNIT.name, "nv-hostengine --term", "nv-hostengine")))
    if facts.daemons.get(FABRIC_PROCESS):
        pids = " ".join(str(p.pid) for p in facts.daemons[FABRIC_PROCESS])
        found.append(Holder("the fabric manager", f"nv-fabricmanager runs (pid {pids})",
                            *unit_or(systemd, FABRIC_UNIT, f"kill {pids}",
                                     f"nv-fabricmanager -c {FABRIC_CONFIG}")))
    if facts.nvidia.persistenced_running:
        daemon = facts.nvidia.persistenced_path or "nvidia-persistenced"
        found.append(Holder("nvidia-persistenced", "it runs (its pid file)",
                            *unit_or(systemd, "nvidia-persistenced.service", PERSISTENCED_STOP,
                                     shlex.quote(daemon))))
    return found


# Its pid file names it; the reset must wait until it has let go of the GPUs.
PERSISTENCED_STOP = (f"read -r pid <{PERSISTENCED_PIDFILE} && kill \"$pid\" && "
                     "for _ in $(seq 50); do [ -d \"/proc/$pid\" ] || break; sleep 0.1; done")


def unit_or(systemd: bool, unit: str, stop: str, start: str) -> tuple[str, str]:
    """systemctl where systemd runs, else the daemon's own stop and start."""
    if systemd:
        return f"systemctl stop {shlex.quote(unit)}", f"systemctl start {shlex.quote(unit)}"
    return stop, start


def reset_script(gpus: tuple[str, ...], held_by: list[Holder]) -> str:
    """Stop the holders, reset the GPUs (all of them for ()), start the holders again; exits as the reset did.
    Each line it prints says what it did, for the step's log."""
    ids = ["-i", ",".join(gpus)] if gpus else []
    lines = ["rc=0"]
    for holder in held_by:
        lines.append(f"if {holder.stop}; then echo {shlex.quote('stopped ' + holder.name)}; "
                     f"else echo {shlex.quote('could not stop ' + holder.name)}; fi")
    lines.append(f"nvidia-smi -r {shlex.join(ids)} 2>&1 || rc=$?")
    for holder in reversed(held_by):
        lines.append(f"if {holder.start}; then echo {shlex.quote('started ' + holder.name)}; "
                     f"else echo {shlex.quote('could not start ' + holder.name)}; fi")
    lines.append("exit $rc")
    return "\n".join(lines)
