"""verify --active: on every host read, in parallel, one active run (capabilities/active/run.py: refused where
GPU processes or Slurm jobs are on it), then the host read again, so the passive checks judge the node as the
load left it. A host lost during the run is reported unreachable by that read; the others go on."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from provision.capabilities.active import during, history, run
from provision.capabilities.active.judge import target_of
from provision.capabilities.active.settings import ActiveSettings
from provision.core.run import Engine, HostState

SLURM_BUSY = {"ALLOCATED", "MIXED", "COMPLETING"}  # a job runs, or is ending, on the node
SLACK_S = 180  # the run's timeout beyond the load's seconds: connecting, sampling, the ramp down


def load_each(engine: Engine, states: list[HostState], seconds: float, forks: int) -> dict[str, run.ActiveRun]:
    """Host name -> its active run; every state re-read afterwards (state.facts as the load left the node)."""
    ready = [s for s in states if s.facts is not None and s.conn is not None]
    before = {s.host.name: s.facts.kernel_log for s in ready if s.facts is not None}
    with ThreadPoolExecutor(max_workers=max(1, min(forks, len(ready) or 1))) as pool:
        runs = dict(zip([s.host.name for s in ready], pool.map(lambda s: one(s, seconds), ready)))
        list(pool.map(lambda s: engine.read_into(s, lock=False), ready))
    for state in ready:
        found = runs[state.host.name]
        if state.facts is not None and not found.refused:
            found.during = during.new_events(before[state.host.name], state.facts.kernel_log)
        found.last_good = history.last_good(state.host.name)
    return runs


def remember_good(runs: dict[str, run.ActiveRun], passed: set[str]) -> None:
    """Each host that passed with its load run to the end: this run is its last good one (history.py)."""
    for host, found in runs.items():
        rates = history.rates(found.load)
        if host in passed and rates and not found.refused:
            history.record(host, rates)


def one(state: HostState, seconds: float) -> run.ActiveRun:
    facts, settings = state.facts, state.host.settings
    assert facts is not None and state.conn is not None
    targets = [target_of(gpu) for gpu in facts.nvidia.gpus]
    slurm = facts.slurm_node
    if slurm is not None and SLURM_BUSY & set(slurm.states):
        return run.ActiveRun(seconds, targets, refused=f"Slurm has jobs on it (State={'+'.join(slurm.states)})")
    if not targets:
        return run.ActiveRun(seconds, targets, refused="no GPU was read (the checks above say why)")
    active = settings.active or ActiveSettings()
    python = run.python_for(active.python, settings.launcher.torchrun if settings.launcher else None)
    argv, stdin = run.load_argv(active.load_command, python, seconds)
    try:
        result = state.conn.run(["sh", "-c", run.node_script(argv, active.interval_ms)], stdin=stdin,
                                timeout=seconds + SLACK_S)
    except Exception as exc:  # the host lost mid-run: its re-read says unreachable; this says when
        return run.ActiveRun(seconds, targets, error=f"the run was cut off: {exc}")
    found = run.parse(result.stdout, seconds, targets)
    if found.error and result.stderr.strip():
        found.error += f" ({result.stderr.strip().splitlines()[-1]})"
    return found
