"""Reboot the hosts whose driver waits for a boot, N at a time, and wait for each to come back.

A rolling reboot: hosts in inventory order, `serial` at a time, so a cluster never goes down at once. Each host
gets a marker in /run (a tmpfs: a boot empties it) and a detached reboot; it is back when SSH answers and the
marker is gone. A host that does not come back within the timeout stops the rollout: the hosts after it are
not rebooted, and the report says which.

Never the machine running provision: not a `local` host, and not one whose /etc/machine-id is this machine's
(SSH to localhost, or to this machine by another name).

A Slurm compute node is not rebooted over SSH: its reboot is handed to Slurm, which reboots it when its jobs end
(commands/slurm_rollout.py); this rollout takes the hosts Slurm does not know.
"""

from __future__ import annotations

import secrets
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Callable

from provision.capabilities import registry
from provision.core.connection import Connection, Unreachable
from provision.core.errors import ProvisionError
from provision.capabilities.slurm.facts import SLURM_NODE_SNIPPET, parse_slurm_node
from provision.commands.reboot_outcome import (FAILED, LEFT_TO_SLURM, NOT_BACK, NOT_RESUMED, NOT_STARTED,  # noqa: F401
                                               REBOOTED, REFUSED, RebootOutcome, RebootTarget, refusal,
                                               this_machine_id)
from provision.commands import slurm_rollout
from provision.inventory.model import Host
from provision.core.results import UNREACHABLE, HostResult

if TYPE_CHECKING:  # types only
    from provision.verify import Verdict

MARKER = "/run/provision/reboot-marker"
# $1: the marker's token. Detached (setsid, no tty, no stdio) so the SSH command returns before the host goes.
REBOOT_SCRIPT = (
    f"mkdir -p /run/provision && printf '%s\\n' \"$1\" > {MARKER} && chmod 0644 {MARKER} && "
    "setsid sh -c 'sleep 1; if [ -d /run/systemd/system ]; then systemctl reboot; else reboot; fi' "
    ">/dev/null 2>&1 </dev/null &"
)

@dataclass
class Rollout:
    connect: Callable[[Host], Connection]  # a fresh connection, privileged where needed (sudo)
    prepare: Callable[[Connection, Host], None] = lambda conn, host: None  # e.g. the sudo settings of the host
    # Why this host must not go down now, asked on its connection just before (a Slurm node with jobs), or ''.
    busy: Callable[[Connection, Host], str] = lambda conn, host: ""
    serial: int = 1
    timeout: float = 600.0  # seconds for one host to go down and come back
    poll: float = 0.5  # seconds between SSH probes (a new connection each, cheap): short enough to see it down
    notice: Callable[[str], None] = lambda message: None
    local_run: bool = False
    started: float = field(default_factory=time.monotonic)

    def run(self, targets: list[RebootTarget]) -> list[RebootOutcome]:
        own_id = this_machine_id()
        outcomes = [RebootOutcome(t.host.name, t.reasons) for t in targets]
        todo = []
        for target, outcome in zip(targets, outcomes):
            why = refusal(target, self.local_run, own_id)
            if why:
                outcome.status, outcome.message = REFUSED, why
            else:
                todo.append((target, outcome))
        for number, start in enumerate(range(0, len(todo), self.serial), 1):
            batch = todo[start:start + self.serial]
            self.notice(f"rebooting {', '.join(t.host.name for t, _ in batch)} "
                        f"(batch {number} of {-(-len(todo) // self.serial)}, {self.serial} at a time)")
            with ThreadPoolExecutor(max_workers=len(batch)) as pool:
                list(pool.map(lambda pair, n=number: self.reboot_one(pair[0], pair[1], n), batch))
            stuck = [o for _, o in batch if o.status not in (REBOOTED, REFUSED)]
            if stuck:
                names = ", ".join(o.host for o in stuck)
                why = "did not come back" if all(o.status == NOT_BACK for o in stuck) else "could not be rebooted"
                for _, later in todo[start + self.serial:]:
                    later.message = f"the rollout stopped: {names} {why}"
                break
        return outcomes

    def now(self) -> float:
        return round(time.monotonic() - self.started, 1)

    def reboot_one(self, target: RebootTarget, outcome: RebootOutcome, batch: int) -> None:
        outcome.batch = batch
        token = secrets.token_hex(8)
        try:
            conn = self.connect(target.host)
            conn.open()
            try:
                self.prepare(conn, target.host)
                why = self.busy(conn, target.host)
                if why:
                    outcome.status, outcome.message = REFUSED, why
                    return
                sent = conn.run(["sh", "-c", REBOOT_SCRIPT, "reboot", token], sudo=True, timeout=60)
            finally:
                conn.close()
        except ProvisionError as exc:  # unreachable, or a sudo that wants a password we were not given
            outcome.status, outcome.message = FAILED, f"could not send the reboot: {exc}"
            return
        if not sent.ok:
            outcome.status, outcome.message = FAILED, f"could not send the reboot: {sent.output.strip() or sent.rc}"
            return
        outcome.sent = self.now()
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            time.sleep(self.poll)
            state = self.probe(target.host, token)
            if state == "down" and outcome.down is None:
                outcome.down = self.now()
            elif state == "back":
                outcome.status, outcome.back = REBOOTED, self.now()
                self.notice(f"{target.host.name}: back after {outcome.seconds} s")
                return
        outcome.status = NOT_BACK
        outcome.message = (f"did not come back within {self.timeout:g} s" +
                           (f" (down at +{outcome.down} s)" if outcome.down is not None
                            else " (never went down: is the reboot command refused?)"))
        self.notice(f"{target.host.name}: {outcome.message}")

    def probe(self, host: Host, token: str) -> str:
        """'down' (no SSH), 'up' (the marker is still there: not rebooted yet) or 'back' (a new boot)."""
        try:
            conn = self.connect(host)
            conn.open()
            try:
                read = conn.run(["cat", MARKER], timeout=15)
            finally:
                conn.close()
        except Unreachable:
            return "down"
        return "up" if read.ok and token in read.stdout else "back"


BUSY_STATES = {"ALLOCATED", "MIXED", "COMPLETING"}  # slurmctld's words for a node with jobs on it


def slurm_jobs_on(conn: Connection, host: Host) -> str:
    """Why a Slurm compute node must not be rebooted now (jobs run on it), or '': a training job killed by a
    driver rollout is days lost. Asked of slurmctld from the node itself, as verify does."""
    slurm = host.settings.slurm
    if slurm is None or slurm.role_of(host.name) == "controller":
        return ""
    state = parse_slurm_node(conn.run(["sh", "-c", SLURM_NODE_SNIPPET], timeout=60).stdout)
    if state is None or not BUSY_STATES & set(state.states):
        return ""
    return (f"Slurm has jobs on it (State={'+'.join(state.states)}): drain it and let them finish "
            f"(scontrol update nodename={state.name} state=drain reason=\"driver upgrade\"), then --reboot again")


def reboot_and_converge(engine, serial: int, timeout: float,
                        check: Callable[[list[Host]], dict[str, Verdict]] | None = None,
                        ) -> tuple[list[RebootOutcome], list[HostResult]]:
    """After engine.run: reboot its hosts whose reboot is pending, then run the same tasks on those that came back
    (what only a loaded driver allows, the GPU tuning; a no-op for the rest). Slurm compute nodes are handed to
    Slurm (commands/slurm_rollout.py), with those an earlier run's rollout still holds, where `check` (verify
    with a short load) is given; the others reboot over SSH (a Rollout). Returns the outcomes, Slurm's first,
    and the second run's results."""
    pending = [s for s in engine.states if s.result and s.result.reboot_pending and s.facts]
    targets = [RebootTarget(s.host, s.result.reboot_pending, s.facts.system.machine_id,
                            registry.reboot_refusals(s.host, s.facts)) for s in pending]
    facts = {s.host.name: s.facts for s in pending}
    slurm_outcomes, slurm_after, targets = (slurm_rollout.run_over(engine, targets, serial, timeout, check,
                                                                   this_machine_id()) if check else ([], [], targets))

    def prepare(conn: Connection, host: Host) -> None:
        conn.privilege = engine.privilege(host, facts[host.name])

    rollout = Rollout(engine.connect, prepare, slurm_jobs_on, serial=serial, timeout=timeout,
                      notice=engine.options.notice, local_run=engine.options.local)
    outcomes = rollout.run(targets)
    back = [t.host for t, o in zip(targets, outcomes) if o.status == REBOOTED]
    after = engine.run(back) if back else []
    loaded = {s.host.name: s.facts.driver.loaded for s in engine.states if s.facts}
    for outcome in outcomes:
        outcome.loaded_after = loaded.get(outcome.host)
    return [*slurm_outcomes, *outcomes], [*slurm_after, *after]


def final_results(first: list[HostResult], outcomes: list[RebootOutcome], after: list[HostResult]) -> list[HostResult]:
    """Each host's result as the run ends: the second run's for the hosts rebooted, the first one's for the others,
    a host that did not come back unreachable, a Slurm node left drained after a failed verify failed."""
    again = {r.host: r for r in after}
    lost = {o.host: o for o in outcomes if o.status == NOT_BACK}
    drained = {o.host: o for o in outcomes if o.status == NOT_RESUMED}
    final = []
    for result in first:
        if result.host in drained:
            final.append(replace(again.get(result.host, result), status=FAILED,
                                 message=f"rebooted, and {drained[result.host].message}"))
        elif result.host in again:
            final.append(again[result.host])
        elif result.host in lost:
            final.append(replace(result, status=UNREACHABLE, message=f"rebooted, and {lost[result.host].message}"))
        else:
            final.append(result)
    return final
