"""provision apply: converge the selected hosts to the inventory (two phases: core/run.py), then, asked to,
reboot the hosts whose new driver waits for a boot and apply them again (commands/reboot.py)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from provision.commands.reboot import RebootOutcome, final_results, reboot_and_converge
from provision.commands.run import Target, connector, engine_for, run_stoppable
from provision.commands import via_slurm
from provision.core.connection import SSHOptions, Unreachable
from provision.core.plan import Task
from provision.inventory.model import Host
from provision.core.results import UNREACHABLE, HostResult, signal_name
from provision.core.run import RunOptions
from provision.core.runlog import RunLog


@dataclass
class Applied:
    results: list[HostResult]  # the first pass
    stopped: int | None  # the signal that stopped the run, if one did
    reboots: list[RebootOutcome] = field(default_factory=list)
    after: list[HostResult] = field(default_factory=list)  # the pass after the reboots

    @property
    def final(self) -> list[HostResult]:
        """Each host's last word: after its reboot where it had one."""
        return final_results(self.results, self.reboots, self.after)


def apply(target: Target, tasks: list[Task], options: RunOptions, ssh: SSHOptions, log: RunLog,
          reboot: bool = False, serial: int = 1, reboot_timeout: float = 600,
          via_slurm: list[str] | None = None) -> Applied:
    """via_slurm: the arguments of `provision apply` on each node (commands/via_slurm.py); None: over SSH."""
    engine = engine_for(target, tasks, options, ssh, log if via_slurm is None else SummaryLater(log))
    if via_slurm is not None:
        results = through_slurm(engine, target, ssh, log, via_slurm)
    else:
        results = run_stoppable(engine, target.hosts)
    applied = Applied(results, engine.stop.signum)
    if reboot and not options.check and not engine.stop.signum:
        applied.reboots, applied.after = reboot_and_converge(engine, serial, reboot_timeout)
    return applied


def through_slurm(engine, target: Target, ssh: SSHOptions, log: RunLog, arguments: list[str]) -> list[HostResult]:
    """The compute nodes that take a job through one srun on their controller, the other hosts over SSH at the
    same time; the results in the inventory's order. A controller that cannot be reached or asked sends
    every host over SSH, and says so."""
    controller = via_slurm.controller_of(target.hosts, target.everyone, target.inventory_path)  # bad input: refused before anything
    notice = engine.options.notice
    conn = connector(False, ssh)(controller)
    try:
        conn.open()
        listed = conn.run(via_slurm.SINFO, timeout=60)
        if not listed.ok:
            raise Unreachable(f"sinfo failed there: {listed.output[-300:]}")
    except Unreachable as exc:
        conn.close()
        notice(f"--via slurm: the controller {controller.name} cannot run srun ({exc}): every host over SSH")
        return run_stoppable(engine, target.hosts)
    plan = via_slurm.plan_fanout(target.hosts, controller, listed.stdout)
    ssh_hosts = [h for h in target.hosts if h.name in plan.over_ssh]
    notice(f"--via slurm: {len(plan.nodes)} node(s) through srun on {controller.name}"
           + "".join(f"; {name} over SSH ({why})" for name, why in plan.over_ssh.items()))
    srun: dict[str, HostResult] = {}
    job = f"provision-apply-{log.run_id}"
    worker = None
    if plan.nodes:
        def work():
            try:
                srun.update((r.host, r) for r in via_slurm.apply_through(conn, plan, target.everyone, arguments, job))
            finally:
                conn.close()
        worker = threading.Thread(target=work, name="srun", daemon=True)
        worker.start()
    else:
        conn.close()
    with engine.stop.catching():  # a signal while only srun runs: passed on to the nodes, which stop as we do
        over_ssh = {r.host: r for r in run_stoppable(engine, ssh_hosts)} if ssh_hosts else {}
        told = False
        while worker and worker.is_alive():
            if engine.stop and not told:
                told = True
                tell_stop(controller, ssh, job, engine.stop.signum or 15, notice)
            worker.join(0.2)
    for result in srun.values():
        for task in result.tasks:
            log.task(result.host, task, check=engine.options.check)
    results = [srun.get(h.name) or over_ssh.get(h.name) or HostResult(
        h.name, UNREACHABLE, message="srun gave no result (interrupted?)") for h in target.hosts]
    log.summary(results, check=engine.options.check, aborted=signal_name(engine.stop.signum) if engine.stop else "")
    return results


def tell_stop(controller: Host, ssh: SSHOptions, job: str, signum: int, notice) -> None:
    """The run's signal to the nodes' provision, through scancel on the controller (a connection of its own:
    the first one carries srun)."""
    conn = connector(False, ssh)(controller)
    try:
        conn.open()
        said = conn.run(via_slurm.cancel_argv(job, signum), sudo=True, timeout=30)
        notice(f"--via slurm: {signal_name(signum)} passed on to the nodes of {job}" if said.ok else
               f"--via slurm: scancel on {controller.name} failed ({said.output[-200:]}): the nodes finish their run")
    except Unreachable as exc:
        notice(f"--via slurm: {controller.name} unreachable to pass the stop on ({exc}): the nodes finish their run")
    finally:
        conn.close()


class SummaryLater(RunLog):
    """The run log for the SSH part of a --via slurm run: its tasks as they end; the one summary, of every
    host, is through_slurm's."""

    def __init__(self, log: RunLog):  # no super().__init__(): it would log a second start
        self.log = log

    def task(self, host: str, result, check: bool) -> None:
        self.log.task(host, result, check)

    def abort(self, why: str, detail: str = "") -> None:
        self.log.abort(why, detail)

    def summary(self, results, check: bool, aborted: str = "") -> None:
        pass
