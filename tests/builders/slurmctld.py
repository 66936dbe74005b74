"""slurmctld as recover asks it through commands/slurm_reboot.SlurmReboots (commands/recover.py Ladder.controller):
one node, gpu-1, its state words and reason, and every command it was asked."""

from __future__ import annotations

from typing import Callable

from provision.capabilities.slurm import reboots
from provision.capabilities.slurm.facts import SlurmNodeState
from provision.core.connection import CommandResult


class Controller:
    """busy_for: how many more reads still show the node's jobs (then they end); on_read: called at each read, as
    something that happens while recover waits (a Ctrl-C)."""

    def __init__(self, *states: str, reason: str = "", busy_for: int = 0,
                 on_read: Callable[[Controller], None] = lambda ctld: None):
        self.node = SlurmNodeState("gpu-1", tuple(states), reason)
        self.asked: list[list[str]] = []
        self.busy_for = busy_for
        self.on_read = on_read

    def states(self) -> dict[str, SlurmNodeState]:
        self.on_read(self)
        if self.busy_for:
            self.busy_for -= 1
        elif "ALLOCATED" in self.node.states:
            self.node = SlurmNodeState("gpu-1", tuple(s for s in self.node.states if s != "ALLOCATED") or ("IDLE",),
                                       self.node.reason)
        return {"gpu-1": self.node}

    @staticmethod
    def node_of(host, states: dict[str, SlurmNodeState]) -> SlurmNodeState | None:
        return states.get(host.name)

    def scontrol(self, argv: list[str]) -> CommandResult:
        self.asked.append(argv)
        if "State=DRAIN" in argv:
            reason = next(a for a in argv if a.startswith("Reason="))[len("Reason="):]
            self.node = SlurmNodeState("gpu-1", (*self.node.states, "DRAIN"), reason)
        return CommandResult(argv, 0, "", "")

    def request(self, host, why: str) -> str:
        """Slurm's reboot asked: drained with provision's reboot reason, pending until the jobs end."""
        self.asked.append(["scontrol", "reboot", why])
        self.node = SlurmNodeState("gpu-1", (*self.node.states, "DRAIN", "REBOOT_REQUESTED"), reboots.reason_for(why))
        return ""

    def wait_back(self, hosts, timeout: float, stop: object = None, seen=None) -> dict[str, str]:
        """Each node's phase as it stands: the jobs never end while the wait is asked, so only a stop (or the
        deadline) ends it."""
        assert stop, "the wait for Slurm's reboot has no end but the deadline or a stop"
        return {h.name: reboots.phase_of(self.node) for h in hosts}

    def resume(self, host) -> str:
        self.asked.append(["resume", host.name])
        return ""

    def close(self) -> None:
        pass
