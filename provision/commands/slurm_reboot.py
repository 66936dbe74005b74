"""Reboots handed to Slurm (capabilities/slurm/reboots.py): every scontrol runs on the cluster's controller,
privileged, so a node can be asked about while it is down. slurmctld reboots a node once its jobs have ended;
provision waits for it to register again and resumes it only after its own verify passed (the caller's).

Used by `apply --reboot` for Slurm compute nodes (commands/reboot.py) and by the recovery ladder."""

from __future__ import annotations

import time
from typing import Callable

from provision.capabilities.slurm import reboots
from provision.capabilities.slurm.facts import SlurmNodeState
from provision.core.connection import CommandResult, Connection, Unreachable
from provision.core.errors import ProvisionError
from provision.inventory.model import Host

SCONTROL_TIMEOUT = 60  # seconds: slurmctld answers within its MessageTimeout, or the controller is in trouble
LEFT_WAITING = (reboots.REQUESTED, reboots.ISSUED, reboots.DRAINED)  # phases a wait ends in only by time or stop


class SlurmReboots:
    """One Slurm cluster's reboots, asked of its controller (commands/via_slurm.controller_of gives it)."""

    def __init__(self, controller: Host, connect: Callable[[Host], Connection],
                 notice: Callable[[str], None] = lambda message: None, poll: float = 2.0):
        self.controller, self.connect, self.notice, self.poll = controller, connect, notice, poll
        self.conn: Connection | None = None

    def scontrol(self, argv: list[str]) -> CommandResult:
        """On the controller, as root; one connection, opened again once if it was lost."""
        for attempt in (1, 2):
            try:
                if self.conn is None:
                    self.conn = self.connect(self.controller)
                    self.conn.open()
                return self.conn.run(argv, sudo=True, timeout=SCONTROL_TIMEOUT)
            except Unreachable:
                self.close()
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")  # the loop returns or raises

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def states(self) -> dict[str, SlurmNodeState]:
        """Every node as slurmctld has it, under its NodeName and its NodeAddr."""
        listed = self.scontrol(reboots.SHOW_NODES)
        if not listed.ok:
            raise ProvisionError(f"scontrol show node on {self.controller.name}: {listed.output[-300:]}")
        return reboots.parse_nodes(listed.stdout)

    @staticmethod
    def node_of(host: Host, states: dict[str, SlurmNodeState]) -> SlurmNodeState | None:
        return states.get(host.address) or states.get(host.name)

    def request(self, host: Host, why: str, states: dict[str, SlurmNodeState] | None = None) -> str:
        """Hand HOST's reboot to Slurm: '' when asked (or provision's ask already stands), else why not. A node out
        of service for a reason that is not provision's is left alone: scontrol would overwrite that reason."""
        state = self.node_of(host, states if states is not None else self.states())
        phase = reboots.phase_of(state)
        if phase in (reboots.REQUESTED, reboots.ISSUED):
            return ""
        if state is None or phase == reboots.UNKNOWN:
            return f"slurmctld on {self.controller.name} lists no node at {host.address}"
        if phase == reboots.NOT_OURS:
            return (f"Slurm node {state.name} is {'+'.join(state.states)} for a reason that is not provision's "
                    f"({state.reason or 'none given'}): left alone")
        asked = self.scontrol(reboots.request_argv(state.name, why))
        return "" if asked.ok else f"scontrol reboot of {state.name} failed: {asked.output[-300:]}"

    def wait_back(self, hosts: list[Host], timeout: float, stop: object = None,
                  seen: Callable[[Host, str], None] = lambda host, phase: None) -> dict[str, str]:
        """Until each host is BACK (registered after its reboot, still drained) or TIMED_OUT; host name -> its last
        phase. `timeout` counts from the reboot being issued: the wait for a node's jobs to end has no limit but a
        stop (truthy once the run is asked to stop), which leaves the rest to Slurm and a later run. A node whose
        reboot timed out is drained again at once. `seen` hears each change of phase."""
        last: dict[str, str] = {}
        issued: dict[str, float] = {}
        while True:
            try:
                states = self.states()
            except ProvisionError as exc:  # the controller itself rebooting, say: asked again next time
                self.notice(f"Slurm: {exc}")
                states = {}
            for host in hosts:
                if last.get(host.name) in (reboots.BACK, reboots.TIMED_OUT) or not states:
                    continue
                state = self.node_of(host, states)
                phase = reboots.phase_of(state)
                if phase == reboots.ISSUED:
                    issued.setdefault(host.name, time.monotonic())
                if phase == reboots.TIMED_OUT and state is not None:
                    self.scontrol(reboots.drain_argv(state.name, state.reason))
                if phase != last.get(host.name):
                    last[host.name] = phase
                    seen(host, phase)
            waiting = [h for h in hosts if last.get(h.name) not in (reboots.BACK, reboots.TIMED_OUT)]
            late = [h for h in waiting if h.name in issued and time.monotonic() - issued[h.name] > timeout]
            if not waiting or stop or (late and len(late) == len(waiting)):
                return last
            time.sleep(self.poll)

    def resume(self, host: Host) -> str:
        """Back into service: '' when resumed; never a node out of service for a reason that is not provision's."""
        state = self.node_of(host, self.states())
        if state is None:
            return f"slurmctld on {self.controller.name} lists no node at {host.address}"
        if not state.out_of_service:
            return ""
        if not reboots.is_ours(state.reason):
            return f"Slurm node {state.name} is out of service for another reason ({state.reason}): left as it is"
        done = self.scontrol(reboots.resume_argv(state.name))
        return "" if done.ok else f"scontrol resume of {state.name} failed: {done.output[-300:]}"
