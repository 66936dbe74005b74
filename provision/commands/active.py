"""verify --active: on every host read, in parallel, one active run (capabilities/active/run.py: refused where
GPU processes or Slurm jobs are on it), then iperf3 on the ports NCCL will use between the loaded nodes of each
training group (fabric.py), then the group's all-reduce through its own torchrun wrapper (collective.py), then
the host read again, so the passive checks judge the node as the load left it. A host lost during the run is
reported unreachable by that read; the others go on.

Stopped (the first Ctrl-C or SIGTERM: engine.stop), every node's load, or all-reduce, is told to stop at once
(run.stop_script, sent again until its run has answered), what was sampled comes back and is judged, an all-reduce
stopped is not tested; no port test or all-reduce starts after it. A load not yet started is not started.

A node lost mid-load (the connection closed or silent: Lost) is judged on the samples it sent until then, the loss
its finding (or under the supply's, where the samples show one that took it down): lost_verdicts."""

from __future__ import annotations

import os
import secrets
import shlex
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import replace
from functools import partial
from types import SimpleNamespace
from typing import TYPE_CHECKING, Callable, Iterator

from provision.capabilities.active import checks, collective, during, fabric, history, run
from provision.capabilities.launcher.tasks import allreduce_path, processes_per_node, wrapper_path
from provision.capabilities.nccl.interfaces import select
from provision.capabilities.clusters import launcher_group
from provision.capabilities.active.judge import CHECK, target_of
from provision.capabilities.active.settings import ActiveSettings
from provision.core.checks import CheckFailed
from provision.core.connection import LocalConnection, Lost
from provision.core.results import signal_name
from provision.core.run import Engine, HostState
from provision.core.stopping import Stop
from provision.verify import FAIL, Verdict, failures

if TYPE_CHECKING:  # types only
    from provision.capabilities.active.judge import Target
    from provision.capabilities.nccl.facts import Interface
    from provision.core.checks import Finding

SLURM_BUSY = {"ALLOCATED", "MIXED", "COMPLETING"}  # a job runs, or is ending, on the node
SLACK_S = 180  # the run's timeout beyond the load's seconds: connecting, sampling, the ramp down


def load_each(engine: Engine, states: list[HostState], seconds: float, forks: int) -> dict[str, run.ActiveRun]:
    """Host name -> its active run; every state re-read afterwards (state.facts as the load left the node)."""
    ready = [s for s in states if s.facts is not None and s.conn is not None]
    before = {s.host.name: s.facts for s in ready if s.facts is not None}
    token = f"{os.getpid()}-{secrets.token_hex(6)}"  # this run's name on the nodes (run.stop_script finds it)
    with ThreadPoolExecutor(max_workers=max(1, min(forks, len(ready) or 1))) as pool:
        runs = loads(pool, ready, seconds, engine.stop, token)
        # stopped: no port test or all-reduce starts after it, and each node that has them says so
        if _stopped_before(engine.stop, ready, runs, "the ports and all-reduces"):
            carried = fabric.measured(measure_fabric(ready, runs, seconds))
            for host, ports in carried.items():
                runs[host].ports.update(ports)
            if _stopped_before(engine.stop, ready, runs, "the all-reduces"):
                all_reduce(ready, runs, carried, engine.stop, token)
        reread = list(pool.map(lambda s: engine.read_into(s, lock=False), ready))
    for state, answered in zip(ready, reread):
        found = runs[state.host.name]
        if not answered:  # lost during the run: reported unreachable, with why, not judged on what it was
            state.facts = None
            continue
        if state.facts is not None and not found.refused:
            found.during = during.new_events(before[state.host.name].kernel_log, state.facts.kernel_log)
            found.grown = during.grown(before[state.host.name], state.facts)
        found.history_key = history.key(state.host.name, before[state.host.name].system.machine_id)
        found.last_good = history.last_good(found.history_key)
    return runs


def remember_good(runs: dict[str, run.ActiveRun], passed: set[str]) -> None:
    """Each host that passed with its load run to the end: this run is its last good one (history.py)."""
    for host, found in runs.items():
        rates = history.rates(found.load)
        if host in passed and rates and not found.refused:
            history.record(found.history_key or history.key(host), rates)


def _stopped_before(stop: Stop, states: list[HostState], runs: dict[str, run.ActiveRun], what: str) -> bool:
    """True to go on; stopped, each node with an nccl block has `what` named as not tested, and False."""
    if not stop:
        return True
    for state in states:
        if state.host.settings.nccl:
            runs[state.host.name].fabric_notes.append(
                f"{what} not tested: the run was stopped ({signal_name(stop.signum or 0)}) before them")
    return False


STOP_EVERY_S = 2.0  # a stop sent again while a node's run has not answered (it may have been starting)
POLL_S = 0.2  # how soon a stop is seen while the loads run


def loads(pool: ThreadPoolExecutor, states: list[HostState], seconds: float, stop: Stop, token: str = ""
          ) -> dict[str, run.ActiveRun]:
    """Every node's load (one), watched for a stop: then each run still going is told to stop (stop_script) until
    it answers with what it sampled, and those not started never start."""
    token = token or f"{os.getpid()}-{secrets.token_hex(6)}"
    futures = {s.host.name: pool.submit(one, s, seconds, token) for s in states} if not stop else {}
    going = [s for s in states if s.host.name in futures]
    with watched(stop, token, lambda: [s for s in going if not futures[s.host.name].done()
                                       and not futures[s.host.name].cancel()]):
        while not all(f.done() for f in futures.values()):
            wait(list(futures.values()), timeout=POLL_S)
    return {s.host.name: _result(futures.get(s.host.name), seconds, stop) for s in states}


@contextmanager
def watched(stop: Stop, token: str, going: Callable[[], list[HostState]]) -> Iterator[None]:
    """While the body runs on the nodes: once stopped, each node going() names is told to stop (stop_script), again
    every STOP_EVERY_S until the body ends (a run may have been starting when first told)."""
    done = threading.Event()

    def watch() -> None:
        while not done.wait(POLL_S):
            if not stop:
                continue
            for state in going():  # its own thread: a host that does not answer holds up no other
                threading.Thread(target=stop_load, args=(state, token), daemon=True).start()
            done.wait(STOP_EVERY_S)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()
        watcher.join()


def _result(future: Future[run.ActiveRun] | None, seconds: float, stop: Stop) -> run.ActiveRun:
    if future is None or future.cancelled():
        said = signal_name(stop.signum or 0)
        return run.ActiveRun(seconds, refused=f"the run was stopped ({said}) before its load started", stopped=said)
    found = future.result()  # a run that ended before the stop reached it ran to its end: not stopped
    if found.stopped:  # the node's shell heard SIGTERM from stop_script; the run was stopped by this signal
        found.stopped = signal_name(stop.signum or 0)
    return found


def stop_load(state: HostState, token: str) -> None:
    """Tell the node's run to stop (run.stop_script); a host that cannot be told ends its run itself once this
    run is gone (the node script's watchdog)."""
    assert state.conn is not None
    try:
        state.conn.run(["sh", "-c", run.stop_script(token)], timeout=15)
    except Exception:  # lost: its run's own re-read says so
        pass


def one(state: HostState, seconds: float, token: str = "") -> run.ActiveRun:
    facts, settings = state.facts, state.host.settings
    assert facts is not None and state.conn is not None
    targets = [target_of(gpu) for gpu in facts.nvidia.gpus]
    slurm = facts.slurm_node
    if slurm is not None and SLURM_BUSY & set(slurm.states):
        others = _jobs_beside_own(state, slurm.name)
        if others != "":
            return run.ActiveRun(seconds, targets, refused=f"Slurm has jobs on it (State={'+'.join(slurm.states)}"
                                                           f"{'; ' + others if others else ''})")
    if not targets:
        return run.ActiveRun(seconds, targets, refused="no GPU was read (the checks above say why)")
    active = settings.active or ActiveSettings()
    python = run.python_for(active.python, settings.launcher.torchrun if settings.launcher else None)
    argv, stdin = run.load_argv(active.load_command, python, seconds, active.dcgm_diag)
    try:
        result = state.conn.run(["sh", "-c", run.node_script(argv, active.interval_ms, token)], stdin=stdin,
                                timeout=run.load_seconds(seconds, active.dcgm_diag) + SLACK_S)
    except Lost as exc:  # mid-run: judged on the samples it sent until then (lost_verdicts)
        return _lost(exc, seconds, targets, active, bool(settings.nccl))
    except Exception as exc:  # the host lost mid-run: its re-read says unreachable; this says when
        return run.ActiveRun(seconds, targets, error=f"the run was cut off: {exc}")
    found = run.parse(result.stdout, seconds, targets, active.dcgm_diag)
    found.power_budget = active.power_budget_watts
    if found.error and result.stderr.strip():
        found.error += f" ({result.stderr.strip().splitlines()[-1]})"
    return found


def _lost(lost: Lost, seconds: float, targets: list[Target], active: ActiveSettings, ports: bool) -> run.ActiveRun:
    """A run whose connection went mid-load: what it sampled until then, to be judged; with no sample, the run
    was cut off (its re-read says unreachable), as a run that never started."""
    found = run.parse(lost.stdout, seconds, targets, active.dcgm_diag)
    if not found.samples:
        return run.ActiveRun(seconds, targets, error=f"the run was cut off: {lost}")
    found.error, found.power_budget = "", active.power_budget_watts
    found.lost = f"lost at +{found.seconds:g} s of the {seconds:g} s load (its last sample came then): {lost}"
    if ports:
        found.fabric_notes.append("not tested: the node was lost under load")
    return found


def lost_verdicts(runs: dict[str, run.ActiveRun], checked: dict[str, Verdict]) -> dict[str, Verdict]:
    """Host -> the verdict of each node lost mid-load that the checks could not judge (no facts after it): the
    load's check on the samples it sent (checks.py: the loss, under the supply's finding where the samples show
    one); the passive checks are not run on what was read before the load."""
    verdicts = {}
    for host, found in runs.items():
        if not found.lost or host in checked:
            continue
        verdict = Verdict(host, FAIL, message=found.lost)
        judged = SimpleNamespace(active=found, notes=verdict.notes)  # what the check reads of a node
        try:
            checks.check_gpus_hold_up_under_load(judged)
        except CheckFailed as failed:
            verdict.failures = failures(CHECK, failed.findings)
        verdicts[host] = verdict
    return verdicts


def _jobs_beside_own(state: HostState, node: str) -> str | None:
    """Inside its own Slurm job (the sbatch script for active runs: verify runs --local in the allocation), what
    squeue says of other jobs on the node: "" for none, else their ids or why squeue could not say. None where
    verify does not run inside a job on this node: every job on it is another's."""
    own = os.environ.get("SLURM_JOB_ID", "")
    if not own or not isinstance(state.conn, LocalConnection) or not node:
        return None
    # %A: the job id, one per element of an array, as SLURM_JOB_ID is
    listed = state.conn.run(["squeue", "--noheader", "--nodelist", node, "--format", "%A"], timeout=30)
    if listed.rc != 0:
        return f"squeue could not say which: {(listed.stderr or listed.stdout).strip()[:200]}"
    others = sorted(set(listed.stdout.split()) - {own})
    return f"jobs {', '.join(others)} beside this one" if others else ""


FABRIC_SECONDS = 10  # each port test, at most (--duration when shorter)
MARK = "@@provision-iperf "


def measure_fabric(states: list[HostState], runs: dict[str, run.ActiveRun], seconds: float
                   ) -> list[fabric.PortResult]:
    """iperf3 on every port NCCL will use, in a ring over each training group's loaded nodes (fabric.py); the
    findings and notes go to each node's run; the results come back."""
    members = loaded_groups(states, runs)
    groups = {group: [s.host.name for s in hosts] for group, hosts in members.items()}
    by_name = {s.host.name: s for hosts in members.values() for s in hosts}
    used = {name: used_ports(state) for name, state in by_name.items()}
    expected = {name: (s.host.settings.active or ActiveSettings()).expected_port_mbps for name, s in by_name.items()}
    planned = fabric.plan(groups, used, expected)
    for host, notes in planned.notes.items():
        runs[host].fabric_notes += notes
    if not planned.tests:
        return []
    secs = min(FABRIC_SECONDS, seconds)
    servers: dict[str, list[fabric.PortTest]] = {}
    clients: dict[str, list[fabric.PortTest]] = {}
    for test in planned.tests:
        servers.setdefault(test.server, []).append(test)
        clients.setdefault(test.client, []).append(test)
    missing = {}
    with ThreadPoolExecutor(max_workers=max(1, len(by_name))) as pool:
        started = dict(zip(servers, pool.map(lambda h: _serve(by_name[h], servers[h], secs), servers)))
        missing = {h: why for h, why in started.items() if why}
        ran = dict(zip(clients, pool.map(
            lambda h: _measure(by_name[h], [t for t in clients[h] if t.server not in missing], secs), clients)))
    results = [r for host_results in ran.values() for r in host_results]
    results += [fabric.PortResult(t, error=f"{t.server}: {missing[t.server]}") for t in planned.tests
                if t.server in missing]
    for host, findings in fabric.judge(results).items():
        runs[host].fabric += findings
    return results


def _serve(state: HostState, tests: list[fabric.PortTest], seconds: float) -> str:
    """One iperf3 server per test on this host, daemonized, each for one client; "" or why they could not start."""
    lines = ["command -v iperf3 >/dev/null || { echo 'iperf3 is not installed (apt install iperf3)'; exit 3; }"]
    lines += [shlex.join(["iperf3", "-s", "-1", "-D", "-B", t.server_address, "-p", str(t.port),
                          "--idle-timeout", str(int(seconds) + 60)]) + " || exit 1" for t in tests]
    assert state.conn is not None
    try:
        done = state.conn.run(["sh", "-c", "\n".join(lines)], timeout=60)
    except Exception as exc:
        return f"could not start iperf3: {exc}"
    return "" if done.rc == 0 else (done.stdout.strip() or done.stderr.strip() or f"iperf3 -s exited {done.rc}")


def _measure(state: HostState, tests: list[fabric.PortTest], seconds: float) -> list[fabric.PortResult]:
    """This host's client tests, at once (each on its own port), after a moment for the servers to listen."""
    if not tests:
        return []
    lines = ["command -v iperf3 >/dev/null || { echo 'iperf3 is not installed (apt install iperf3)'; exit 3; }",
             "d=$(mktemp -d) || exit 1", "trap 'rm -rf \"$d\"' EXIT", "sleep 1"]
    lines += [shlex.join(["iperf3", "-c", t.server_address, "-B", t.client_address, "-p", str(t.port),
                          "-t", f"{seconds:g}", "-J"]) + f' >"$d/{t.port}" 2>&1 &' for t in tests]
    lines.append("wait")
    lines += [f"echo '{MARK}{t.port}'; cat \"$d/{t.port}\"" for t in tests]
    assert state.conn is not None
    try:
        done = state.conn.run(["sh", "-c", "\n".join(lines)], timeout=seconds + 90)
    except Exception as exc:
        return [fabric.PortResult(t, error=f"the test was cut off: {exc}") for t in tests]
    if done.rc == 3:
        return [fabric.PortResult(t, error=f"{t.client}: {done.stdout.strip()}") for t in tests]
    outputs: dict[str, list[str]] = {}
    current = None
    for line in done.stdout.splitlines():
        if line.startswith(MARK):
            current = line[len(MARK):].strip()
            outputs[current] = []
        elif current is not None:
            outputs[current].append(line)
    results = []
    for t in tests:
        mbps, error = fabric.iperf3_mbps("\n".join(outputs.get(str(t.port), [])))
        results.append(fabric.PortResult(t, mbps, error))
    return results


ALLREDUCE_ARGS = ["--mib", "4", "--iterations", "5", "--timeout", "120"]


def loaded_groups(states: list[HostState], runs: dict[str, run.ActiveRun], launcher: bool = False
                  ) -> dict[str, list[HostState]]:
    """Training group -> its nodes that were loaded (and have an nccl block, and with launcher: a launcher)."""
    groups: dict[str, list[HostState]] = {}
    for state in states:
        found = runs.get(state.host.name)
        if (state.facts is None or state.conn is None or found is None or found.refused or found.error or found.lost
                or not state.host.settings.nccl or (launcher and not state.host.settings.launcher)):
            continue
        groups.setdefault(launcher_group(state.host), []).append(state)
    return groups


def used_ports(state: HostState) -> list[Interface]:
    nccl = state.host.settings.nccl
    interfaces = state.facts.interfaces if state.facts is not None else None
    return select(nccl.socket_ifname if nccl else None, interfaces).used if interfaces is not None else []


def all_reduce(states: list[HostState], runs: dict[str, run.ActiveRun], carried: dict[str, dict[str, float]],
               stop: Stop, token: str) -> None:
    """Each training group's loaded nodes with a launcher (collective.py): every node's own all-reduce where it
    starts two processes or more; then the group's at once where it has two nodes or more, and pairwise along
    a ring of them when that falls short. Findings go to the nodes' runs. Stopped: each node's all-reduce is told
    to stop (run.stop_script, its token), one the stop cut short is not tested, and none starts after it."""
    for group, members in loaded_groups(states, runs, launcher=True).items():
        if not _stopped_before(stop, members, runs, "the all-reduces"):
            return
        with watched(stop, token, partial(list, members)):
            _group_all_reduce(group, members, runs, carried, stop, token)


def _group_all_reduce(group: str, members: list[HostState], runs: dict[str, run.ActiveRun],
                      carried: dict[str, dict[str, float]], stop: Stop, token: str) -> None:
    # what the port tests filed under each node (fabric.py): a slow port or link follows into what it paces
    ported = {s.host.name: next((f for f in runs[s.host.name].fabric if f.about), None) for s in members}
    wrappers = {s.host.name: wrapper_path(s.host) for s in members}
    with ThreadPoolExecutor(max_workers=len(members)) as pool:  # each node on its own: all at once
        within = _untested_if_stopped(stop, runs, [r for r in pool.map(lambda s: _within(s, token), members) if r])
    for mine in within:
        _carried(runs, mine, f"within {mine.hosts[0]}")
    for host, own in collective.node_findings(within, wrappers).items():
        runs[host].fabric.append(own)
    if len(members) < 2 or not _stopped_before(stop, members, runs, f"the all-reduce across {group}"):
        return
    used = {s.host.name: used_ports(s) for s in members}
    setting = {s.host.name: (s.host.settings.active or ActiveSettings()).expected_port_mbps for s in members}
    across = _untested_if_stopped(stop, runs, [_across(group, members, used, setting, carried, token)])
    if not across:
        return
    result = across[0]
    _carried(runs, result, f"across {group}")
    paired = _pairwise(group, members, used, setting, carried, stop, token, runs) if result.short() else {}
    for host, finding in paired.items():
        leads = ported[host]
        runs[host].fabric.append(replace(finding, because=_following(leads)) if leads else finding)
    said = collective.finding(result, wrappers[members[0].host.name])
    if not said:
        return
    # filed under the node whose port the tests named, else the node the pairs named, else the first
    port = next(((h, f) for h, f in ported.items() if f), None)
    node = next((h for h, f in paired.items() if f.about == (h,)), None)
    if port:
        runs[port[0]].fabric.append(replace(said, because=_following(port[1])))
    elif node:
        runs[node].fabric.append(replace(said, because=(f"{collective.CHECK}:{node}",)))
    else:
        runs[members[0].host.name].fabric.append(said)


def _untested_if_stopped(stop: Stop, runs: dict[str, run.ActiveRun], results: list[collective.Collective]
                         ) -> list[collective.Collective]:
    """The all-reduces to judge: after a stop, one that did not complete was cut short by it (its own node's, or
    a peer's, told to stop first) and is not tested, said on each of its nodes; one that completed is judged."""
    if not stop:
        return results
    said = signal_name(stop.signum or 0)
    for result in (r for r in results if r.error):
        for host in result.hosts:
            runs[host].fabric_notes.append(f"the all-reduce of {result.group} not tested: stopped by {said} during it")
    return [r for r in results if not r.error]


def _carried(runs: dict[str, run.ActiveRun], result: collective.Collective, what: str) -> None:
    """The bus bandwidth an all-reduce reached, on each of its nodes' runs (the figures a verdict reports)."""
    if result.busbw_gbs is not None:
        for host in result.hosts:
            runs[host].allreduce[what] = result.busbw_gbs


def _following(port) -> tuple[str, ...]:
    return (*fabric.LEADS, *(f"{collective.CHECK}:{a}" for a in port.about))


def _within(state: HostState, token: str) -> collective.Collective | None:
    """This node's own all-reduce (its processes only, rendezvous on itself), where it starts two or more."""
    assert state.facts is not None
    nproc, _ = processes_per_node(state.host, state.facts)
    if nproc is None or not nproc.isdigit() or int(nproc) < 2:
        return None
    model = state.facts.nvidia.gpus[0].name if state.facts.nvidia.gpus else "no GPU"
    name = state.host.name
    result = collective.Collective(name, [name], None, "", kind=f"{nproc} processes on {model}")
    env = {"PROVISION_NNODES": "1", "PROVISION_NODE_RANK": "0", "PROVISION_RDZV_HOST": "127.0.0.1",
           "PROVISION_RDZV_ID": f"provision-active-{name}-{time.time_ns()}"}
    return collective.read({name: _run_allreduce(state, env, token)}, result)


def _across(group: str, members: list[HostState], used, setting, carried, token: str) -> collective.Collective:
    """These nodes' all-reduce, all at once through the wrapper, held to what their ports carry."""
    gbs, rule = collective.expected({s.host.name: used[s.host.name] for s in members}, setting, carried)
    result = collective.Collective(group, [s.host.name for s in members], gbs, rule)
    rendezvous = {"PROVISION_NNODES": str(len(members)), "PROVISION_RDZV_HOST": members[0].host.address,
                  "PROVISION_RDZV_ID": f"provision-active-{group}-{time.time_ns()}"}
    with ThreadPoolExecutor(max_workers=len(members)) as pool:
        outputs = pool.map(lambda k: _run_allreduce(members[k], {**rendezvous, "PROVISION_NODE_RANK": str(k)}, token),
                           range(len(members)))
        return collective.read(dict(zip(result.hosts, outputs)), result)


def _pairwise(group: str, members: list[HostState], used, setting, carried, stop: Stop, token: str,
              runs: dict[str, run.ActiveRun]) -> dict[str, Finding]:
    """The ring's pairs of the group (three nodes or more), a round of disjoint pairs at a time: host -> finding.
    Stopped: no round starts after it, and a pair it cut short is not tested."""
    by_name = {s.host.name: s for s in members}
    results: list[collective.Collective] = []
    for pairs in collective.rounds(list(by_name)):
        if not _stopped_before(stop, members, runs, f"the pairwise all-reduces of {group}"):
            break
        with ThreadPoolExecutor(max_workers=len(pairs)) as pool:
            results += pool.map(lambda pair: _across(f"{group}: {pair[0]} and {pair[1]}",
                                                     [by_name[pair[0]], by_name[pair[1]]], used, setting, carried,
                                                     token), pairs)
    return collective.pair_findings(_untested_if_stopped(stop, runs, results))


def _run_allreduce(state: HostState, rendezvous: dict[str, str], token: str) -> str:
    wrapper, program = wrapper_path(state.host), allreduce_path(state.host)
    ports = used_ports(state)
    env = {**rendezvous, "GLOO_SOCKET_IFNAME": ",".join(p.name for p in ports)} if ports else dict(rendezvous)
    check = (f"[ -x {shlex.quote(wrapper)} ] && [ -x {shlex.quote(program)} ] || "
             f"{{ echo {shlex.quote(f'{wrapper} or {program} is not there: provision apply writes them')}; exit 3; }}")
    assert state.conn is not None
    try:
        done = state.conn.run(["sh", "-c", run.allreduce_script(check, [wrapper, program, *ALLREDUCE_ARGS], env,
                                                                token)], timeout=300)
    except Exception as exc:
        return f"the all-reduce was cut off: {exc}"
    return done.stdout + done.stderr
