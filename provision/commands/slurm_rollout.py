"""`apply --reboot` on Slurm compute nodes: each reboot handed to Slurm (commands/slurm_reboot.py), --serial N
nodes at a time, so that a node reboots when its jobs end and nobody drains by hand; each node that comes back
is applied again, verified (with a short load), and only then returned to service.

The rollout's state is Slurm's own (the reason provision set, the node's reboot flags): a run that stops, or
gives up waiting, leaves the rest to Slurm, and a later `apply --reboot` picks up every node a reboot of
provision's still holds out of service, before it asks for new ones.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Callable

from provision.capabilities.slurm import reboots
from provision.capabilities.slurm.facts import SlurmNodeState
from provision.commands.reboot_outcome import (FAILED, LEFT_TO_SLURM, NOT_BACK, NOT_RESUMED, REBOOTED, REFUSED,
                                               RebootOutcome, RebootTarget, refusal)
from provision.commands import verify as verify_command
from provision.commands.run import Target
from provision.commands.slurm_reboot import SlurmReboots
from provision.core.connection import SSHOptions
from provision.core.plan import Task
from provision.core.run import RunOptions
from provision.core.errors import ProvisionError
from provision.core.stopping import Stop
from provision.core.results import HostResult
from provision.inventory.model import Host

if TYPE_CHECKING:  # types only
    from provision.verify import Verdict

ACTIVE_SECONDS = 10.0  # the load verify puts on a node before it returns to service: short, the node idles meanwhile


def through_slurm(host: Host) -> bool:
    """A compute node only (role compute): a controller that also runs jobs would take slurmctld down with it."""
    slurm = host.settings.slurm
    return slurm is not None and slurm.controller is not None and slurm.role_of(host.name) == "compute"


def picked_up(hosts: list[Host], states: dict[str, SlurmNodeState],
              pending: set[str]) -> list[RebootTarget]:
    """The hosts a reboot of provision's, asked by an earlier run, still holds (its node not pending a reboot now:
    its new driver is loaded already, or not yet asked)."""
    targets = []
    for host in hosts:
        state = SlurmReboots.node_of(host, states)
        if host.name not in pending and reboots.in_rollout(state) and state is not None:
            targets.append(RebootTarget(host, [f"picked up: {reboots.phase_of(state)} ({state.reason})"]))
    return targets


@dataclass
class SlurmRollout:
    slurm: SlurmReboots
    converge: Callable[[list[Host]], list[HostResult]]  # the same tasks again on the nodes back (engine.run)
    check: Callable[[list[Host]], dict[str, Verdict]]  # verify, with a short load: host name -> verdict
    serial: int = 1
    timeout: float = 600.0  # seconds for one node from its reboot issued to registered again
    stop: object = None  # truthy once the run is asked to stop (core/stopping.Stop)
    notice: Callable[[str], None] = lambda message: None
    started: float = field(default_factory=time.monotonic)
    after: list[HostResult] = field(default_factory=list)

    def now(self) -> float:
        return round(time.monotonic() - self.started, 1)

    def run(self, todo: list[tuple[RebootTarget, RebootOutcome]]) -> None:
        """Batch by batch, --serial at a time; a node that does not come back, or fails its verify, stops the
        rollout (the nodes after it are not asked, and say so)."""
        for number, start in enumerate(range(0, len(todo), self.serial), 1):
            batch = todo[start:start + self.serial]
            self.notice(f"Slurm reboots {', '.join(t.host.name for t, _ in batch)} when their jobs end "
                        f"(batch {number} of {-(-len(todo) // self.serial)}, {self.serial} at a time)")
            self.one_batch(batch, number)
            stuck = [o for _, o in batch if o.status not in (REBOOTED, REFUSED)]
            if stuck:
                names = ", ".join(f"{o.host} ({o.status})" for o in stuck)
                for _, later in todo[start + self.serial:]:
                    later.message = f"the rollout stopped: {names}"
                return

    def one_batch(self, batch: list[tuple[RebootTarget, RebootOutcome]], number: int) -> None:
        try:
            states = self.slurm.states()
        except ProvisionError as exc:
            for _, outcome in batch:
                outcome.status, outcome.message = FAILED, str(exc)
            return
        asked = []
        for target, outcome in batch:
            outcome.batch, outcome.via = number, "slurm"
            returned = reboots.phase_of(SlurmReboots.node_of(target.host, states)) == reboots.BACK  # picked up
            why = "" if returned else self.slurm.request(target.host, "; ".join(target.reasons), states)
            if why:
                refused = reboots.phase_of(SlurmReboots.node_of(target.host, states)) == reboots.NOT_OURS
                outcome.status, outcome.message = (REFUSED if refused else FAILED), why
            else:
                outcome.sent = self.now()
                asked.append((target, outcome))
        outcomes = {t.host.name: o for t, o in asked}
        phases = self.slurm.wait_back([t.host for t, _ in asked], self.timeout, self.stop,
                                      lambda host, phase: self.seen(outcomes[host.name], phase))
        back = [t.host for t, _ in asked if phases.get(t.host.name) == reboots.BACK and not self.stop]
        for target, outcome in asked:
            if target.host not in back:
                self.not_back(outcome, phases.get(target.host.name, reboots.UNKNOWN))
        if back:
            self.return_to_service(back, outcomes)

    def seen(self, outcome: RebootOutcome, phase: str) -> None:
        if phase == reboots.ISSUED and outcome.down is None:
            outcome.down = self.now()
        elif phase == reboots.BACK:
            outcome.back = self.now()
        self.notice(f"{outcome.host}: {phase} (+{self.now()} s)")

    def not_back(self, outcome: RebootOutcome, phase: str) -> None:
        if self.stop and phase != reboots.TIMED_OUT:  # a stopped run converges nothing more: all left to Slurm
            outcome.status = LEFT_TO_SLURM
            outcome.message = (f"the run stopped ({phase}): Slurm reboots it when its jobs end, and it stays drained "
                               "until `provision apply --reboot` picks it up")
        elif phase == reboots.TIMED_OUT:
            outcome.status, outcome.message = NOT_BACK, "Slurm's ResumeTimeout passed: drained again, left for you"
        else:
            outcome.status = NOT_BACK
            outcome.message = (f"still {phase} after {self.timeout:g} s; it stays drained in Slurm, and a later "
                               "`provision apply --reboot` picks it up")

    def return_to_service(self, back: list[Host], outcomes: dict[str, RebootOutcome]) -> None:
        """Apply the nodes back again, verify them under a short load, resume each that passes."""
        self.after += self.converge(back)
        verdicts = self.check(back)
        for host in back:
            outcome, verdict = outcomes[host.name], verdicts.get(host.name)
            if verdict is None or verdict.status != "pass":
                outcome.status = NOT_RESUMED
                outcome.message = f"left drained in Slurm: {judged(verdict)}"
                continue
            why = self.slurm.resume(host)
            outcome.status = REBOOTED if not why else NOT_RESUMED
            outcome.message = "verify passed: resumed in Slurm" if not why else why
            self.notice(f"{host.name}: {outcome.message}")


def judged(verdict: Verdict | None) -> str:
    """Why a node back from its reboot is not returned to service, in verify's words."""
    if verdict is None:
        return "verify gave no verdict"
    found = verdict.findings[0].failure if verdict.findings else None
    more = f" (+{len(verdict.findings) - 1} more)" if len(verdict.findings) > 1 else ""
    if found is not None:
        return f"verify failed: {found.check}: {found.found}{more}"
    untested = "; ".join(verdict.not_tested) if verdict.not_tested else verdict.message
    return f"verify says {verdict.status}: {untested}"


def run_over(engine, targets: list[RebootTarget], serial: int, timeout: float,
             check: Callable[[list[Host]], dict[str, Verdict]], own_id: str,
             ) -> tuple[list[RebootOutcome], list[HostResult], list[RebootTarget]]:
    """The Slurm part of `apply --reboot`: the targets on Slurm compute nodes slurmctld knows, and the selected
    nodes an earlier rollout still holds, through a SlurmRollout. Returns its outcomes (picked-up nodes first),
    the converge runs' results, and the targets left for the SSH rollout (not in Slurm, or Slurm not answering:
    that rollout still refuses a node with jobs)."""
    selected = [s.host for s in engine.states if through_slurm(s.host)]
    if not selected:
        return [], [], targets
    controller = next((h for h in engine.everyone or [] if h.name == selected[0].settings.slurm.controller), None)
    if controller is None:
        return [], [], targets
    slurm = SlurmReboots(controller, engine.connect, engine.options.notice)
    try:
        states = slurm.states()
    except ProvisionError as exc:
        engine.options.notice(f"Slurm: {exc}; the nodes reboot over SSH, never one with jobs")
        slurm.close()
        return [], [], targets
    ours = {h.name for h in selected if h.settings.slurm.controller == controller.name}
    known = [t for t in targets if t.host.name in ours and SlurmReboots.node_of(t.host, states) is not None]
    chosen = picked_up([h for h in selected if h.name in ours], states, {t.host.name for t in targets}) + known
    loaded: dict[str, str | None] = {}

    def converge(hosts: list[Host]) -> list[HostResult]:
        results = engine.run(hosts)
        loaded.update((s.host.name, s.facts.driver.loaded) for s in engine.states if s.facts)
        return results

    rollout = SlurmRollout(slurm, converge, check, serial, timeout, engine.stop, engine.options.notice)
    outcomes, todo = [], []
    for target in chosen:
        outcome = RebootOutcome(target.host.name, target.reasons, via="slurm")
        why = refusal(target, engine.options.local, own_id)
        if why:
            outcome.status, outcome.message = REFUSED, why
        else:
            todo.append((target, outcome))
        outcomes.append(outcome)
    try:
        rollout.run(todo)
    finally:
        slurm.close()
    for outcome in outcomes:
        outcome.loaded_after = loaded.get(outcome.host)
    return outcomes, rollout.after, [t for t in targets if t not in known]


def verifier(target: Target, tasks: list[Task], options: RunOptions, ssh: SSHOptions, stop: Stop | None = None,
             ) -> Callable[[list[Host]], dict[str, Verdict]]:
    """verify with a short load, as the rollout asks it of the nodes back from their reboot (and recover of a node
    whose cause showed under load, with its run's stop): host -> verdict."""
    def check(hosts: list[Host]) -> dict[str, Verdict]:
        back = Target(target.inventory_path, hosts, target.everyone, target.local)
        verdicts = verify_command.verify(back, tasks, replace(options, command="verify", reading="verify"), ssh,
                                         active=ACTIVE_SECONDS, stop=stop)[0]
        return {v.host: v for v in verdicts}
    return check
