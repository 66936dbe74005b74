"""provision apply: converge the selected hosts to the inventory (two phases: core/run.py), then, asked to,
reboot the hosts whose new driver waits for a boot and apply them again (commands/reboot.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

from provision.commands.reboot import RebootOutcome, final_results, reboot_and_converge
from provision.commands.run import Target, engine_for, run_stoppable
from provision.core.connection import SSHOptions
from provision.core.plan import Task
from provision.core.results import HostResult
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
          reboot: bool = False, serial: int = 1, reboot_timeout: float = 600) -> Applied:
    engine = engine_for(target, tasks, options, ssh, log)
    results = run_stoppable(engine, target.hosts)
    applied = Applied(results, engine.stop.signum)
    if reboot and not options.check and not engine.stop.signum:
        applied.reboots, applied.after = reboot_and_converge(engine, serial, reboot_timeout)
    return applied
