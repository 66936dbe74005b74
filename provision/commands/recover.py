"""provision recover: over the nodes verify fails (or --limit), the recovery ladder (commands/recovery/ladder.py)
one step at a time, each followed by verify:

  apply    converge what drifted (the playbook, as `apply --limit NODE`)
  reset    drain in Slurm, wait for the node's jobs (--now: cancel them), stop what holds the GPUs, nvidia-smi -r
           (commands/recovery/gpureset.py), start them again, apply the GPU settings again
  reboot   drain, then Slurm's reboot once the jobs end (commands/slurm_reboot.py) on a Slurm node, else over SSH
           as `apply --reboot` does (commands/reboot.py)
  service  a person must act: the node stays drained; a card a reboot did not mend is recorded for replacement
           (commands/recovery/cards.py) and named in the report

A node whose cause showed under load (a finding of verify --active, or a drain of provision's that names one) is
verified again under a short load, as apply --reboot's Slurm rollout verifies a node back from its reboot
(commands/slurm_rollout.verifier), each time it passes idle: it is resumed only when that passes too.

A node that passes is resumed, where provision drained it; never one drained for another reason. Each step is
written to the run log with why it was chosen. --check reads and verifies and says the first step of each node,
touching nothing. The nodes go up the ladder side by side: one whose step fails or waits holds no other.

The first Ctrl-C or SIGTERM (core/stopping.py) starts no new step and no new verify: a step's commands in flight
end (an apply's batch, the reset with what it stopped started again, a reboot sent over SSH until it is back), a
wait for a node's jobs or for Slurm's reboot ends at once, and each node is left as its step left it, drained
where it was, and said so (exit 128 + the signal); a later recover reads it again and goes on. A second signal
abandons the run at once.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from provision.capabilities import registry
from provision.capabilities.slurm.facts import DRAIN_REASON_PREFIX, SlurmNodeState
from provision.capabilities.slurm.reboots import BACK, ISSUED, REQUESTED, is_ours, phase_of
from provision.commands.drain import REASON_CHARS, SlurmAction
from provision.commands.reboot import BUSY_STATES, REBOOTED, RebootTarget, Rollout
from provision.commands.recovery import cards, gpureset
from provision.commands.recovery.ladder import (DONE, LEFT, UNDER_LOAD, Step, Tried, after, gpus_to_reset,
                                                next_step, showed_under_load)
from provision.commands.run import Target, connector, engine_for
from provision.commands.slurm_reboot import SlurmReboots
from provision.commands.slurm_rollout import ACTIVE_SECONDS, judged, verifier
from provision.commands.via_slurm import controller_of
from provision.core import pci
from provision.core.checks import APPLY, REBOOT, RESET, SERVICE
from provision.core.connection import Connection, SSHOptions
from provision.core.errors import ProvisionError
from provision.core.plan import FAILED, Task
from provision.core.results import EXIT_STOPPED_BASE, NOT_STARTED, UNREACHABLE as HOST_UNREACHABLE, signal_name
from provision.core.run import Engine, RunOptions
from provision.core.runlog import RunLog
from provision.core.stopping import Stop
from provision.inventory.model import Host
from provision.verify import NOT_TESTED, PASS, UNREACHABLE, Node, Verdict, run_checks
from provision.verify.backend import testinfra_host

if TYPE_CHECKING:  # types only
    from provision.capabilities.host import HostFacts

# What became of a node
PASSES = "passes"  # verify found nothing: nothing done
RECOVERED = "recovered"  # a step cleared every cause; verify passed after it
PLANNED = "planned"  # --check: the step it would take
NEEDS_SERVICE = "needs service"  # drained: a person must act (a card to replace, a part the vendor mends)
WARNINGS_LEFT = "warnings left"  # only warnings apply did not mend: the node works, slower
STEP_FAILED = "step failed"  # a step could not be done (left drained where it was)
WAITING = "waiting"  # drained; its jobs still run: a later recover (or --now) goes on
NOT_OURS = "left alone"  # out of service for a reason that is not provision's
UNREACHED = "unreachable"
UNPROVEN = "not proven"  # passes idle, but its cause showed under load and no load could be run: not resumed
STOPPED = "stopped"  # Ctrl-C or SIGTERM: left as its step left it; a later recover goes on

STOPPING = ("the steps in flight end, none starts; a wait for jobs or for Slurm's reboot ends now, the node left as "
            "it is")  # what a first signal does to recover

MAX_PASSES = 6  # a ladder of four rungs, and a setting a reboot lost: past it, a node that still fails is a person's
GPU_TAG = "gpu"  # the tasks a reset's lost settings come back from (persistence, power, clocks, modes, MIG)
DRAIN_PREFIX = f"{DRAIN_REASON_PREFIX} recover"
LOADED = "verify --active"  # the proof under load, as a node's report and the run log name it


@dataclass
class StepDone:
    """One step taken on a node: what, why, what came of it."""

    action: str
    why: str
    said: str
    ok: bool


@dataclass
class Recovery:
    host: str
    status: str = PASSES
    message: str = ""
    steps: list[StepDone] = field(default_factory=list)
    plan: str = ""  # --check: the first step and why
    cards: list[cards.Card] = field(default_factory=list)


@dataclass
class Options:
    """What recover is told: --check, --now, how long to wait for jobs and for a reboot."""

    check: bool = False
    now: bool = False  # cancel the node's jobs rather than wait for them
    wait: float = 3600.0  # seconds for a node's jobs to end before it is left drained for a later run
    reboot_timeout: float = 1800.0
    poll: float = 5.0


class Deadline:
    """True once its time has passed, or once the run is asked to stop: how long recover waits for a node's jobs
    (and SlurmReboots.wait_back for its reboot)."""

    def __init__(self, seconds: float, stop: object = None):
        self.at = time.monotonic() + seconds
        self.stop = stop

    def __bool__(self) -> bool:
        return bool(self.stop) or time.monotonic() > self.at


@dataclass
class Ladder:
    """One recover run: the hosts' ladders side by side."""

    target: Target
    tasks: list[Task]
    options: RunOptions
    ssh: SSHOptions
    log: RunLog
    told: Options
    tried: dict[str, list[Tried]] = field(default_factory=dict)
    loaded: set[str] = field(default_factory=set)  # the nodes whose causes showed under load in this run
    stop: Stop = field(init=False)  # one for the whole run: every engine it makes stops with it

    def __post_init__(self) -> None:
        self.stop = Stop(self.options.notice)
        self.stop.said = STOPPING

    def engine(self, tasks: list[Task] | None = None) -> Engine:
        return engine_for(self.target, self.tasks if tasks is None else tasks, self.options, self.ssh, self.log,
                          self.stop)

    def notice(self, message: str) -> None:
        self.options.notice(message)

    def run(self) -> list[Recovery]:
        """Every host's ladder; stoppable (module doc): a KeyboardInterrupt, the second signal, goes through."""
        recoveries = {h.name: Recovery(h.name) for h in self.target.hosts}
        with self.stop.catching():
            self.passes(recoveries)
        return [recoveries[h.name] for h in self.target.hosts]

    def passes(self, recoveries: dict[str, Recovery]) -> None:
        hosts = list(self.target.hosts)
        for number in range(MAX_PASSES + 1):  # each pass takes every host one rung up at most, then verifies
            if not hosts:
                break
            looked = {} if self.stop else self.look(hosts)
            due = [h for h in hosts if not self.stop and self.due_under_load(h, *looked[h.name])]
            if due and self.told.check:
                for host in due:
                    recoveries[host.name].status, recoveries[host.name].plan = PLANNED, self.proof_why()
                hosts = [h for h in hosts if h not in due]
            elif due:
                proved = self.prove(due, recoveries)
                looked.update((h.name, (looked[h.name][0], proved[h.name])) for h in due)
            if self.stop:  # what was read while stopping may be partial: nothing is decided on it
                for host in hosts:
                    self.stopped(recoveries[host.name])
                break
            acting: list[tuple[Host, HostFacts, Step]] = []
            for host in hosts:
                facts, verdict = looked[host.name]
                step = self.decide(host, verdict, recoveries[host.name])
                if step is not None and facts is not None:
                    acting.append((host, facts, step))
            if number == MAX_PASSES:  # still climbing: a person looks
                for host, _, step in acting:
                    recovery = recoveries[host.name]
                    recovery.status = STEP_FAILED
                    recovery.message = f"still failing after {len(recovery.steps)} steps; next: {step.action}"
                break
            with ThreadPoolExecutor(max_workers=max(1, min(len(acting), self.options.forks))) as pool:
                done = list(pool.map(lambda job: self.take(job[0], job[1], job[2], recoveries[job[0].name]), acting))
            hosts = [host for (host, _, step), ok in zip(acting, done) if ok]
            for host, _, step in acting:
                self.tried.setdefault(host.name, []).append(after(step))

    def due_under_load(self, host: Host, facts: HostFacts | None, verdict: Verdict) -> bool:
        """Whether the node, passing idle, must pass under load before it returns to service: a cause of it showed
        under load in this run, or provision drained it in Slurm for one (verify --active --drain)."""
        if verdict.status != PASS or facts is None:
            return False
        node = facts.slurm_node
        drained = node is not None and node.out_of_service and is_ours(node.reason) and f"{UNDER_LOAD}:" in node.reason
        return drained or host.name in self.loaded

    def proof_why(self) -> str:
        return f"{LOADED} ({ACTIVE_SECONDS:g} s): its cause showed under load; it returns to service only if that passes"

    def prove(self, hosts: list[Host], recoveries: dict[str, Recovery]) -> dict[str, Verdict]:
        """verify under a short load, the rollout's own (slurm_rollout.verifier), stopped with this run: each
        node's verdict, recorded as a step of its own."""
        why = self.proof_why()
        for host in hosts:
            self.notice(f"{host.name}: {why}")
        verdicts = verifier(self.target, self.tasks, self.options, self.ssh, self.stop)(hosts)
        self.stop.said = STOPPING  # verify's own words while its loads ran
        proved = {}
        for host in hosts:
            verdict = proved[host.name] = verdicts.get(host.name) or Verdict(host.name, UNREACHABLE, "no verdict")
            said = "passed" if verdict.status == PASS else judged(verdict)
            recoveries[host.name].steps.append(StepDone(LOADED, why, said, verdict.status == PASS))
            self.log.step(host.name, LOADED, why, said, verdict.status == PASS)
            if showed_under_load(verdict):
                self.loaded.add(host.name)
        return proved

    def stopped(self, recovery: Recovery) -> None:
        """A node the stop reached between its steps (a step stopped in its middle says so itself)."""
        if recovery.status == STOPPED:
            return
        recovery.status = STOPPED
        last = recovery.steps[-1] if recovery.steps else None
        if last and last.action == LOADED:
            recovery.message = f"{self.halted()} during its {LOADED}: not resumed; a later recover loads it again"
            return
        recovery.message = (f"{self.halted()} after its {last.action}, before the verify after it: a later "
                            "recover verifies it and goes on" if last else f"{self.halted()} before its step: "
                            "not touched")

    def halted(self) -> str:
        return f"the run was stopped ({signal_name(self.stop.signum or 0)})"

    def look(self, hosts: list[Host]) -> dict[str, tuple[HostFacts | None, Verdict]]:
        """Read and verify the hosts (as `provision verify`); the facts and the verdict of each."""
        engine = self.engine()
        states = engine.read_facts(hosts, keep_open=True)
        try:
            nodes = [Node(s.host.name, s.host, s.facts, self.tasks, testinfra_host(s.host.name, s.conn),
                          self.target.inventory_path) for s in states if s.facts is not None and s.conn is not None]
            checked = run_checks(nodes) if nodes else {}
        finally:
            engine.close(states)
        return {s.host.name: (s.facts, checked.get(s.host.name) or Verdict(
            s.host.name, UNREACHABLE, s.result.message if s.result else "not read")) for s in states}

    def decide(self, host: Host, verdict: Verdict, recovery: Recovery) -> Step | None:
        """The node's next step, or None where its ladder ends here (said in `recovery`)."""
        if verdict.status == UNREACHABLE:
            recovery.status, recovery.message = UNREACHED, verdict.message
            return None
        if verdict.status == NOT_TESTED:  # the load did not run: nothing proves the cause gone, nor names a step
            recovery.status = UNPROVEN
            recovery.message = f"not resumed: {judged(verdict)}"
            return None
        slurm = None if self.told.check else self.slurm_node(host)
        if slurm is not None and phase_of(slurm) in (REQUESTED, ISSUED):  # asked by a run that stopped: a reset or
            recovery.status = WAITING  # a resume now would cross the reboot Slurm still owes it
            recovery.message = (f"Slurm node {slurm.name}: {phase_of(slurm)} ({slurm.reason}): Slurm reboots it once "
                                "its jobs end; recover again once it is back")
            return None
        step = next_step(verdict, self.tried.get(host.name, []))
        if step.action == DONE:
            recovery.status = RECOVERED if recovery.steps else PASSES
            recovery.message = "" if self.told.check else self.resume(host)
            return None
        if step.action == LEFT:
            recovery.status = WARNINGS_LEFT
            recovery.message = "; ".join(r.words() for r in step.reasons)
            return None
        if self.told.check:
            recovery.status, recovery.plan = PLANNED, f"{step.action}: {step.why()}"
            return None
        if slurm and slurm.out_of_service and not is_ours(slurm.reason):
            recovery.status = NOT_OURS
            recovery.message = (f"Slurm node {slurm.name} is out of service for another reason "
                                f"({slurm.reason or 'none given'}): not touched")
            return None
        return step

    def take(self, host: Host, facts: HostFacts, step: Step, recovery: Recovery) -> bool:
        """Do the step on the node; True when verify should look again (the step was done)."""
        if self.stop:
            self.stopped(recovery)
            return False
        why = step.why()
        self.notice(f"{host.name}: {step.action} ({why})")
        try:
            said, ok, status = self.do(host, facts, step)
        except ProvisionError as exc:
            said, ok, status = str(exc), False, STEP_FAILED
        recovery.steps.append(StepDone(step.action, why, said, ok))
        self.log.step(host.name, step.action, why, said, ok)
        self.notice(f"{host.name}: {said}")
        if not ok:
            recovery.status, recovery.message = status, said
        elif step.action == SERVICE:
            recovery.status, recovery.message = NEEDS_SERVICE, said
            return False
        return ok

    def do(self, host: Host, facts: HostFacts, step: Step) -> tuple[str, bool, str]:
        """(what came of it, whether it was done, the node's status where it was not)."""
        if step.drains:  # a person's node is only drained; a reset or reboot waits for its jobs too
            held, status = self.drain(host, step, wait=step.action != SERVICE)
            if held:
                return held, False, status
            if self.stop:
                return f"{self.halted()} before the {step.action}: left as it is", False, STOPPED
        if step.action == APPLY:
            return self.apply(host, self.tasks)
        if step.action == RESET:
            return self.reset(host, facts, step)
        if step.action == REBOOT:
            return self.reboot(host, facts, step)
        return self.mark_cards(host, facts, step), True, NEEDS_SERVICE

    # Slurm: drain, jobs, resume (asked of the controller, which answers while the node is down)

    def controller(self, host: Host) -> SlurmReboots | None:
        slurm = host.settings.slurm
        if slurm is None or not slurm.runs_jobs(host.name):
            return None
        return SlurmReboots(controller_of([host], self.target.everyone, self.target.inventory_path),
                            connector(self.target.local, self.ssh), self.notice)

    def slurm_node(self, host: Host) -> SlurmNodeState | None:
        reboots = self.controller(host)
        if reboots is None:
            return None
        try:
            return reboots.node_of(host, reboots.states())
        finally:
            reboots.close()

    def drain(self, host: Host, step: Step, wait: bool) -> tuple[str, str]:
        """Out of Slurm's service with provision's reason, its jobs ended (waited for, or cancelled with --now):
        ('', '') when done (or not a Slurm node), else why the step cannot go on and the node's status."""
        reboots = self.controller(host)
        if reboots is None:
            return "", ""
        try:
            node = reboots.node_of(host, reboots.states())
            if node is None:
                return f"slurmctld lists no node at {host.address}", STEP_FAILED
            if not node.out_of_service:
                reason = " ".join(f"{DRAIN_PREFIX} {step.action}: {step.why()}".split())[:REASON_CHARS]
                drained = reboots.scontrol(SlurmAction(host.name, node.name, "drain", reason).argv())
                if not drained.ok:
                    return f"could not drain {node.name}: {drained.output.strip()[-300:]}", STEP_FAILED
            if wait and self.told.now:
                reboots.scontrol(["scancel", f"--nodelist={node.name}"])
            deadline = Deadline(self.told.wait if wait else 0, self.stop)
            while wait:
                node = reboots.node_of(host, reboots.states())
                if node is None or not BUSY_STATES & set(node.states):
                    break
                if self.stop:
                    return (f"drained; {self.halted()} while its jobs still ran (State={'+'.join(node.states)}): "
                            "recover again to go on"), STOPPED
                if deadline:
                    return (f"drained; its jobs still run after {self.told.wait:g} s (State={'+'.join(node.states)}): "
                            "recover again once they end, or with --now"), WAITING
                time.sleep(self.told.poll)
            return "", ""
        finally:
            reboots.close()

    def resume(self, host: Host) -> str:
        """Back into Slurm's service where provision drained it; what was done."""
        reboots = self.controller(host)
        if reboots is None:
            return ""
        try:
            node = reboots.node_of(host, reboots.states())
            if node is None or not node.out_of_service:
                return ""
            if not is_ours(node.reason):
                return f"left out of service: Slurm node {node.name}'s reason is not provision's ({node.reason})"
            return reboots.resume(host) or f"resumed in Slurm (was: {node.reason})"
        finally:
            reboots.close()

    # The steps

    def apply(self, host: Host, tasks: list[Task]) -> tuple[str, bool, str]:
        result = self.engine(tasks).run([host])[0]
        failed = [t.name for t in result.tasks if t.status == FAILED]
        if self.stop and (result.status == NOT_STARTED or any(t.status == NOT_STARTED for t in result.tasks)):
            done = ", ".join(f"{count} {status}" for status, count in result.counts().items() if count)
            return f"apply cut short, {self.halted()}: {done or 'nothing done'}", False, STOPPED
        if result.status == HOST_UNREACHABLE or failed:
            return f"apply failed: {result.message or ', '.join(failed)}", False, STEP_FAILED
        return f"applied ({result.status})", True, ""

    def reset(self, host: Host, facts: HostFacts, step: Step) -> tuple[str, bool, str]:
        gpus = gpus_to_reset(step, facts.fabric is not None and facts.fabric.has_nvswitch)
        held = gpureset.holders(facts)
        engine = self.engine()
        conn = engine.connect(host)
        conn.open()
        try:
            conn.privilege = engine.privilege(host, facts)
            done = conn.run(["sh", "-c", gpureset.reset_script(gpus, held)], sudo=True, timeout=600)
        finally:
            conn.close()
        which = ", ".join(gpus) if gpus else "every GPU"
        said = " ".join(done.output.split())
        if not done.ok:
            return f"reset of {which} failed: {said[-400:]}", False, STEP_FAILED
        applied, ok, status = self.apply(host, [t for t in self.tasks if GPU_TAG in t.tags])
        return f"reset {which} ({said[-300:]}); GPU settings {applied}", ok, status

    def reboot(self, host: Host, facts: HostFacts, step: Step) -> tuple[str, bool, str]:
        reboots = self.controller(host)
        if reboots is not None:
            try:
                refused = reboots.request(host, f"recover: {step.why()}")
                if refused:
                    return refused, False, STEP_FAILED
                phase = reboots.wait_back([host], self.told.reboot_timeout, Deadline(
                    self.told.wait + self.told.reboot_timeout, self.stop)).get(host.name, "")
            finally:
                reboots.close()
            if phase != BACK and self.stop:
                return (f"asked of Slurm ({phase}); {self.halted()}: Slurm reboots it once its jobs end, it stays "
                        "drained, and a later recover verifies it"), False, STOPPED
            if phase != BACK:
                return f"Slurm's reboot did not end: {phase}", False, WAITING
            return "rebooted by Slurm (drained until verify passes)", True, ""
        engine = self.engine()
        target = RebootTarget(host, [step.why()], facts.system.machine_id, registry.reboot_refusals(host, facts))

        def prepare(conn: Connection, host: Host) -> None:
            conn.privilege = engine.privilege(host, facts)

        outcome = Rollout(engine.connect, prepare, timeout=self.told.reboot_timeout, notice=self.notice,
                          local_run=self.options.local).run([target])[0]
        if outcome.status != REBOOTED:
            return f"reboot {outcome.status}: {outcome.message}", False, STEP_FAILED
        return f"rebooted over SSH, back after {outcome.seconds} s", True, ""

    def mark_cards(self, host: Host, facts: HostFacts, step: Step) -> str:
        """The cards a reboot did not mend, recorded for replacement; what the report says."""
        when = datetime.now(timezone.utc).isoformat(timespec="seconds")
        said = []
        boards = self.serials(host, facts) if step.replace else {}
        for reason in step.replace:
            for slot in reason.about or ("",):
                card = card_of(host.name, slot, facts, boards, f"{reason.check}: {reason.found}")
                try:
                    said.append(cards.mark(card, when).words())
                except OSError as exc:
                    said.append(f"{card.words()} (not recorded: {exc.strerror or exc})")
        people = [r.words() for r in step.reasons if r.step == SERVICE and r not in step.replace]
        return "; ".join([*said, *(f"for a person: {p}" for p in people)]) or "drained for a person"

    def serials(self, host: Host, facts: HostFacts) -> dict[str, str]:
        """Slot -> board serial of each GPU nvidia-smi reads (none where it reads none)."""
        conn = connector(self.target.local, self.ssh)(host)
        try:
            conn.open()
            read = conn.run(SERIALS, timeout=60)
        except ProvisionError:
            return {}
        finally:
            conn.close()
        found = {}
        for line in read.stdout.splitlines() if read.ok else []:
            bus_id, _, serial = (part.strip() for part in line.partition(","))
            if serial and serial not in ("N/A", "[N/A]"):
                found[pci.slot(bus_id)] = serial
        return found


# The board serial nvidia-smi reads for each GPU (the field NVIDIA's RMA process asks for).
SERIALS = ["nvidia-smi", "--query-gpu=pci.bus_id,serial", "--format=csv,noheader"]


def card_of(host: str, slot: str, facts: HostFacts, serials: dict[str, str], failed: str) -> cards.Card:
    """The card in `slot`: its serial where nvidia-smi read one, else its UUID (the facts', or the last good
    run's record of the slot)."""
    uuid = next((g.uuid for g in facts.nvidia.gpus if pci.slot(g.bus_id) == pci.slot(slot)), "")
    if not uuid and facts.gpu_layout is not None:
        uuid = next((g.uuid for g in facts.gpu_layout if pci.slot(g.bus_id) == pci.slot(slot)), "")
    serial = serials.get(pci.slot(slot)) or uuid or f"{host}-{slot or 'unknown'}"
    return cards.Card(serial, host, slot, uuid, [failed])


def recover(target: Target, tasks: list[Task], options: RunOptions, ssh: SSHOptions, log: RunLog,
            told: Options) -> tuple[list[Recovery], int | None]:
    """Each selected host's recovery, in inventory order, and the signal that stopped the run (None: none did).
    A second signal exits 128 + the first's number at once."""
    ladder = Ladder(target, tasks, options, ssh, log, told)
    try:
        return ladder.run(), ladder.stop.signum
    except KeyboardInterrupt:
        options.notice("Abandoned: a step in flight may be partly done (a node drained, GPU holders stopped); "
                       "run provision recover again to read it and go on.")
        sys.stdout.flush()
        sys.stderr.flush()
        # at once: the workers still inside a command would otherwise be waited for at the interpreter's exit
        os._exit(EXIT_STOPPED_BASE + (ladder.stop.signum or signal.SIGINT))

