"""provision verify: read each host once, run the capabilities' checks over them (verify/), and, asked to,
drain the failed Slurm nodes or resume those verify drained that now pass (commands/drain.py).

With --active, a node whose load, ports or all-reduce did not run is "not tested" where nothing failed (never a
pass), each part named with why, and every verdict carries what was measured (capabilities/active/outcome.py).
The first Ctrl-C or SIGTERM stops the loads (commands/active.py), judges what was measured and reports (exit 128
+ the signal); a second abandons the run at once, and each node's run ends itself when its controller is gone."""

from __future__ import annotations

import os
import signal
import sys
import tempfile
from pathlib import Path

from provision.capabilities.active import outcome
from provision.capabilities.active.run import ActiveRun
from provision.commands import active as active_run
from provision.commands.via_slurm import fan_out
from provision.commands.drain import slurm_actions, tell_slurm
from provision.commands.run import Target, engine_for
from provision.core.connection import SSHOptions
from provision.core.errors import InputError
from provision.core.localfiles import not_written, write_atomically
from provision.core.plan import Task
from provision.core.results import EXIT_STOPPED_BASE
from provision.core.run import RunOptions
from provision.core.stopping import Stop
from provision.output import junit, prometheus as prometheus_file, verify_json
from provision.verify import NOT_TESTED, PASS, UNREACHABLE, Node, Verdict, run_checks
from provision.verify.backend import testinfra_host
from provision.verify.switch import unknown_names


def verify(target: Target, tasks: list[Task], options: RunOptions, ssh: SSHOptions, junitxml: str | None = None,
           drain: bool = False, resume: bool = False, active: float | None = None,
           via_slurm: list[str] | None = None, prometheus: str | None = None,
           stop: Stop | None = None) -> tuple[list[Verdict], list[dict[str, str]], list[str], int | None]:
    """A verdict per selected host (unreachable ones too), what was told to Slurm, why the JUnit XML or the
    Prometheus textfile was not written (empty: they were, or none was asked for), and the signal that stopped the
    run (None: none did). active:
    seconds of load on each host before it is judged (commands/active.py). via_slurm: the arguments of `provision
    verify` on each compute node that verifies itself through srun (commands/via_slurm.py); None: every host over
    SSH. stop: the Stop of a command that verifies as one of its steps (recover), which a signal now stops too.
    A check switched off by a name that is no check of verify is an InputError before any host is read."""
    problems = unknown_names(target.hosts, tasks, target.inventory_path)
    if problems:
        raise InputError(problems)
    with tempfile.TemporaryDirectory(prefix="provision-verify-") as scratch:
        # pytest writes its JUnit XML here, and it goes into place whole afterwards: a file that cannot be written
        # at the end (the disk filled, its directory went) costs that file, never the verdicts
        xml = os.path.join(scratch, "junit.xml") if junitxml else None
        verdicts, told, stopped = _verify(target, tasks, options, ssh, xml, drain, resume, active, via_slurm, stop)
        unwritten = []
        if junitxml and xml and os.path.exists(xml):  # none when no host was checked, as before
            data = junit.regroup(Path(xml).read_bytes(), verdicts)  # consequences under their cause
            unwritten.append(not_written("--junitxml", junitxml, lambda: write_atomically(junitxml, data)))
    if prometheus:
        unwritten.append(not_written("--prometheus", prometheus, lambda: prometheus_file.write(prometheus, verdicts)))
    return verdicts, told, [why for why in unwritten if why], stopped


def settle(verdict: Verdict, found: ActiveRun | None) -> None:
    """An active run's parts left untested and its figures into the node's verdict: "not tested" where it would
    pass (a failure stays a failure, its untested parts named all the same)."""
    if found is None:
        return
    verdict.not_tested = outcome.untested(found)
    verdict.figures = outcome.figures(found)
    if verdict.not_tested and verdict.status == PASS:
        verdict.status = NOT_TESTED


STOPPING = "the loads stop, what was measured is judged and reported"  # what a first signal does to verify


def _verify(target: Target, tasks: list[Task], options: RunOptions, ssh: SSHOptions, junitxml: str | None,
            drain: bool, resume: bool, active: float | None,
            via_slurm: list[str] | None, stop: Stop | None = None,
            ) -> tuple[list[Verdict], list[dict[str, str]], int | None]:
    engine = engine_for(target, tasks, options, ssh, stop=stop)
    engine.stop.said = STOPPING
    srun, hosts = (fan_out(target, ssh, "verify", via_slurm, engine.owner.run, options.notice)
                   if via_slurm is not None else (None, target.hosts))
    states = []
    checked: dict[str, Verdict] = {}
    told: list[dict[str, str]] = []
    try:
        with engine.stop.catching():
            try:
                states = engine.read_facts(hosts, keep_open=True)
                runs = active_run.load_each(engine, states, active, options.forks) if active is not None else {}
                nodes = [Node(s.host.name, s.host, s.facts, tasks, testinfra_host(s.host.name, s.conn),
                              target.inventory_path, active=runs.get(s.host.name))
                         for s in states if s.facts is not None and s.conn is not None]
                checked = run_checks(nodes, junitxml) if nodes or srun is None else {}
                checked.update(active_run.lost_verdicts(runs, checked))  # judged on what they sent until lost
                for host, verdict in checked.items():
                    settle(verdict, runs.get(host))
                active_run.remember_good(runs, {host for host, v in checked.items() if v.status == PASS})
                told = tell_slurm(slurm_actions(states, checked, drain, resume), states) if drain or resume else []
            except KeyboardInterrupt:  # the second signal: at once, not after closing each connection in turn
                abandon(engine.stop.signum, options)
            finally:
                engine.close(states)
            for node in srun.wait(engine.stop, options.notice) if srun else []:
                verdicts, said = (verify_json.from_json(node.data) if node.data is not None
                                  else ([Verdict(node.host, UNREACHABLE, node.words)], []))
                checked.update((v.host, v) for v in verdicts)
                told += said
    except KeyboardInterrupt:  # the second signal while srun runs: nothing more is waited for
        abandon(engine.stop.signum, options)
    unread = {s.host.name: s.result.message if s.result else "" for s in states}
    return [checked.get(h.name) or Verdict(h.name, UNREACHABLE, unread.get(h.name, "no verdict"))
            for h in target.hosts], told, engine.stop.signum


def abandon(signum: int | None, options: RunOptions) -> None:
    """Exit 128 + the signal at once: what each node still runs ends itself once this process is gone (the node
    script's watchdog sees its connection close), its temporary files with it."""
    options.notice("Abandoned: no verdict; each node stops its load by itself as the connection closes.")
    sys.stdout.flush()
    sys.stderr.flush()
    # at once: the workers still inside a command would otherwise be waited for at the interpreter's exit
    os._exit(EXIT_STOPPED_BASE + (signum or signal.SIGINT))
