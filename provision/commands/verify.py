"""provision verify: read each host once, run the capabilities' checks over them (verify/), and, asked to,
drain the failed Slurm nodes or resume those verify drained that now pass (commands/drain.py)."""

from __future__ import annotations

from provision.commands import active as active_run
from provision.commands.drain import slurm_actions, tell_slurm
from provision.commands.run import Target, engine_for
from provision.core.connection import SSHOptions
from provision.core.plan import Task
from provision.core.run import RunOptions
from provision.verify import PASS, UNREACHABLE, Node, Verdict, run_checks
from provision.verify.backend import testinfra_host


def verify(target: Target, tasks: list[Task], options: RunOptions, ssh: SSHOptions, junitxml: str | None = None,
           drain: bool = False, resume: bool = False, active: float | None = None) -> tuple[list[Verdict], list[dict]]:
    """A verdict per selected host (unreachable ones too), and what was told to Slurm. active: seconds of load
    on each host before it is judged (commands/active.py)."""
    engine = engine_for(target, tasks, options, ssh)
    states = []
    try:
        states = engine.read_facts(target.hosts, keep_open=True)
        runs = active_run.load_each(engine, states, active, options.forks) if active is not None else {}
        nodes = [Node(s.host.name, s.host, s.facts, tasks, testinfra_host(s.host.name, s.conn), target.inventory_path,
                      active=runs.get(s.host.name))
                 for s in states if s.facts is not None and s.conn is not None]
        checked = run_checks(nodes, junitxml)
        active_run.remember_good(runs, {host for host, v in checked.items() if v.status == PASS})
        told = tell_slurm(slurm_actions(states, checked, drain, resume), states) if drain or resume else []
    finally:
        engine.close(states)
    verdicts = [checked.get(s.host.name) or Verdict(s.host.name, UNREACHABLE, s.result.message if s.result else "")
                for s in states]
    return verdicts, told
