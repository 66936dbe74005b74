"""provision apply: converge the selected hosts to the inventory (two phases: core/run.py), then, asked to,
reboot the hosts whose new driver waits for a boot and apply them again (commands/reboot.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

from provision.commands.reboot import RebootOutcome, final_results, reboot_and_converge
from provision.commands.run import Target, engine_for, run_stoppable
from provision.commands import via_slurm
from provision.commands.slurm_rollout import verifier
from provision.commands.playbook import selected_tasks, unapplied_blocks, with_flag_tasks
from provision.core.connection import SSHOptions
from provision.core.plan import Task
from provision.core.plan import FAILED
from provision.core.results import UNREACHABLE, HostResult, from_json, signal_name
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


def prepare(target: Target, playbook: str | None, templates: str | None, tags: str, skip_tags: str,
            flags: frozenset[str]) -> tuple[list[Task], list[str]]:
    """The tasks apply runs (the playbook's that --tags and --skip-tags select, and those the run's flags add),
    and a warning per inventory block the playbook leaves unapplied. The run's flags go on every selected host."""
    book, loaded, tasks = selected_tasks(playbook, templates, tags, skip_tags)
    target.flag(flags)
    return with_flag_tasks(tasks, flags), unapplied_blocks(loaded, target.hosts, book.name)


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
        with engine.stop.catching():  # a Slurm rollout waits on jobs: a signal leaves the rest to Slurm
            applied.reboots, applied.after = reboot_and_converge(engine, serial, reboot_timeout,
                                                                 verifier(target, tasks, options, ssh, engine.stop))
        applied.stopped = engine.stop.signum
    return applied


def through_slurm(engine, target: Target, ssh: SSHOptions, log: RunLog, arguments: list[str]) -> list[HostResult]:
    """The compute nodes that take a job through one srun on their controller (commands/via_slurm.py), the
    other hosts over SSH at the same time; the results in the inventory's order, one run log."""
    notice = engine.options.notice
    srun, ssh_hosts = via_slurm.fan_out(target, ssh, "apply", arguments, engine.owner.run, notice)
    with engine.stop.catching():  # a signal while only srun runs: passed on to the nodes, which stop as we do
        over_ssh = {r.host: r for r in run_stoppable(engine, ssh_hosts)} if ssh_hosts else {}
        said = srun.wait(engine.stop, notice) if srun else []
    nodes = {}
    for node in said:
        for result in (from_json(node.data) if node.data is not None else [HostResult(
                node.host, FAILED if node.ran else UNREACHABLE, message=node.words)]):
            nodes[result.host] = result
            for task in result.tasks:
                log.task(result.host, task, check=engine.options.check)
    results = [nodes.get(h.name) or over_ssh.get(h.name) or HostResult(h.name, UNREACHABLE, message="no result")
               for h in target.hosts]
    log.summary(results, check=engine.options.check, aborted=signal_name(engine.stop.signum) if engine.stop else "")
    return results


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
