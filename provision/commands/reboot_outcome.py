"""A reboot's target and outcome, whichever way it goes: over SSH (commands/reboot.py) or handed to Slurm
(commands/slurm_rollout.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from provision.inventory.model import Host

REBOOTED, NOT_BACK, REFUSED, FAILED, NOT_STARTED = "rebooted", "not back", "refused", "failed", "not rebooted"
LEFT_TO_SLURM = "left to Slurm"  # the run stopped waiting: Slurm reboots it when its jobs end, a later run picks it up
MACHINE_ID_FILES = (Path("/etc/machine-id"), Path("/var/lib/dbus/machine-id"))
NOT_RESUMED = "not resumed"  # a Slurm node back from its reboot that verify did not pass: left drained


@dataclass
class RebootTarget:
    host: Host
    reasons: list[str]
    machine_id: str = ""
    # Why it must not go down now, the capabilities' word on its facts (registry.reboot_refusals): the next boot's
    # kernel has no NVIDIA module, say. Refused with that, and the command that fixes it; the others go on.
    refusals: list[str] = field(default_factory=list)


@dataclass
class RebootOutcome:
    host: str
    reasons: list[str]
    status: str = NOT_STARTED  # rebooted | not back | refused | failed | not rebooted | not resumed | left to Slurm
    message: str = ""
    via: str = "ssh"  # ssh: rebooted by provision; slurm: handed to slurmctld (commands/slurm_rollout.py)
    batch: int = 0  # 1-based: the hosts rebooted together
    sent: float | None = None  # seconds from the rollout's start: the reboot was sent
    down: float | None = None  # SSH first refused, or Slurm issued the reboot (None: never seen down, a fast boot)
    back: float | None = None  # SSH answers and the marker is gone, or the node registered with slurmctld again
    loaded_after: str | None = None  # the driver loaded after the boot (filled in by the caller)

    @property
    def seconds(self) -> float | None:
        return round(self.back - self.sent, 1) if self.back is not None and self.sent is not None else None


def this_machine_id() -> str:
    for path in MACHINE_ID_FILES:
        try:
            return path.read_text().strip()
        except OSError:
            continue
    return ""


def refusal(target: RebootTarget, local_run: bool, own_id: str) -> str:
    """Why this host must not be rebooted by this run, or ''."""
    if target.refusals:
        return "; ".join(target.refusals)
    if local_run or target.host.connection == "local":
        return "this is the machine running provision (a local connection): reboot it yourself"
    if own_id and target.machine_id == own_id:
        return f"this is the machine running provision (machine-id {own_id[:8]}…): reboot it yourself"
    return ""
