"""Run tasks over hosts: gather facts, plan everywhere, then apply, in parallel and bounded.

Two phases, so bad input never touches a host: first every host is read
(one batched command) and every task is planned; if any plan finds an input
error (a power limit outside a GPU's range, ...) the run stops with all of
them and nothing was changed. Then each host with something to change reads
itself again under the host lock (one command that takes the lock and
gathers, so another run's changes in between are seen) and applies its own
plan; one host failing never stops the others. A host with nothing to
change, and every host under --check, costs that first command alone.

A run never strands a host: its lock is given back as soon as the host is
done, a lease keeps it only while this process lives (hostlock.py), and the
first Ctrl-C or SIGTERM (stopping.py) lets the changes in flight finish and
starts nothing new; a second abandons them. A host lost in the middle of its
changes is unreachable, with what it changed before, not verified.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Callable

from provision.capabilities.driver import packages as driver
from provision.core import hostlock
from provision.core import remote
from provision.core.cluster import Cluster
from provision.core.connection import CommandResult, Connection, Privilege, Unreachable
from provision.core.errors import InputError, Problem, ProvisionError
from provision.capabilities.gpu import clock_cache
from provision.core import facts as gather
from provision.capabilities.host import HostFacts, UnitRef
from provision.inventory.model import Host
from provision.output.progress import Event
from provision.core.results import NOT_STARTED, UNREACHABLE, HostResult, TaskResult, signal_name, task_status
from provision.core.runlog import RunLog
from provision.core.stopping import Stop
from provision.core.plan import CHANGED, FAILED, SKIPPED, Change, Item, Plan, Task


@dataclass
class RunOptions:
    check: bool = False
    forks: int = 16
    lock_wait: float = 60.0  # seconds to wait for another run's lock on a host
    sudo_password: str | None = field(default=None, repr=False)
    command: str = "apply"
    progress: Callable[[Event], None] = lambda event: None  # where the run is (provision/output/progress.py)
    notice: Callable[[str], None] = lambda message: None  # said even on a pipe or with --json (on stderr)
    keep_backups: int = 3  # backups FILE.<time>~ kept per managed file
    # Settings made once a host's facts are read (the ad-hoc commands); None: the inventory's.
    adjust_host: Callable[[Host, HostFacts], Host] | None = None
    health: bool = False  # read the health sections too: kernel log, PCIe AER counters (verify)
    topology: bool = False  # read `nvidia-smi topo -m` too (facts, verify)
    local: bool = False  # every host is this machine (--local): no other host's facts can be read


@dataclass
class HostState:
    """A host between the two phases."""

    host: Host
    conn: Connection | None = None
    facts: HostFacts | None = None
    result: HostResult | None = None
    locked: bool = False  # this run holds the host's lock
    paths: list[str] = field(default_factory=list)  # files and units the tasks read, re-read after changes
    units: list[UnitRef] = field(default_factory=list)
    packages: list[str] = field(default_factory=list)  # Debian packages whose installed version the tasks read
    started: float = 0.0
    plans: list[tuple[Task, Plan]] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)  # input errors found once its facts were read


NOT_VERIFIED = "not verified: the host was lost before it was read again"


class HostLost(Exception):
    """The host stopped answering in the middle of a task's changes; `task` says what was done before."""

    def __init__(self, task: TaskResult, reason: str):
        super().__init__(reason)
        self.task, self.reason = task, reason


class Engine:
    def __init__(self, tasks: list[Task], options: RunOptions, connect: Callable[[Host], Connection],
                 log: RunLog | None = None, inventory_path: str = "", everyone: list[Host] | None = None):
        self.inventory_path = inventory_path
        self.everyone = everyone  # the whole inventory (a run may be limited to some of it); None: the run's hosts
        self.tasks = tasks
        self.options = options
        self.connect = connect
        self.log = log
        self._done = self._total = 0  # hosts done in the current phase, of how many
        self.states: list[HostState] = []  # the last run's hosts, with the facts read last
        self._lock = threading.Lock()
        self.owner = hostlock.Owner.this_run(options.command)  # the lock owner line of this run, on every host
        self.stop = Stop(options.notice)  # set by the first SIGINT/SIGTERM while in stop.catching()

    # -- phase 1: read and plan -------------------------------------------------

    def gather(self, state: HostState) -> None:
        """Connect and read facts. No lock: reading changes nothing (a run takes the lock only to change)."""
        state.started = time.monotonic()
        state.result = HostResult(state.host.name)
        if self.stop:
            state.result.status, state.result.message = NOT_STARTED, self.stop.words()
            return
        try:
            state.conn = self.connect(state.host)
            state.conn.open()
        except Unreachable as exc:
            state.result.status, state.result.message = UNREACHABLE, str(exc)
            return
        state.paths = sorted({p for task in self.tasks for p in task.file_paths(state.host)})
        state.units = sorted({u for task in self.tasks for u in task.unit_names(state.host)})
        state.packages = sorted({p for task in self.tasks for p in task.package_names(state.host)})
        self.read_into(state, lock=False)

    def read_into(self, state: HostState, lock: bool) -> bool:
        """Read the host's facts into state; with lock, take the host lock in the same command, waiting for it.
        A lock judged stale (its owner's process is gone, or its lease expired) is taken over with a notice.
        False when the host could not be read or locked (state.result says why)."""
        deadline, waited, stale = time.monotonic() + self.options.lock_wait, False, ""
        while True:
            take = hostlock.take_argv(self.owner, stale) if lock else None
            try:
                sections = self.read(state.conn, state.paths, state.units, take, packages=state.packages,
                                     health=self.options.health, topology=self.options.topology)
            except Unreachable as exc:
                state.result.status, state.result.message = UNREACHABLE, str(exc)
                return False
            held = sections.get("lock")
            if held is None:
                break
            word, line = hostlock.take_message(held.output)
            if word not in ("taken", "held") and not word.startswith("took over"):
                state.result.message = f"cannot take the host lock: {held.output.strip() or f'exit {held.rc}'}"
                return False
            holder = hostlock.Owner.parse(line)
            if held.rc == 0:
                state.locked = True
                if word.startswith("took over"):
                    why = ("its lease expired without a heartbeat" if "lease expired" in word
                           else holder.gone_here() if stale else "")
                    self.options.notice(f"{state.host.name}: took over the host lock of {holder.said}"
                                        + (f" ({why})" if why else ""))
                break
            if holder.gone_here() and line != stale:
                stale = line  # take it over at once: compare-and-swap on the host, against this exact line
                continue
            if time.monotonic() >= deadline:
                state.result.message = (
                    f"another run holds the lock on this host ({holder.said}); if none is running, "
                    f"`provision unlock {self.inventory_path or 'INVENTORY'} --limit {state.host.name}` removes it"
                )
                return False
            if not waited:
                self.options.notice(f"{state.host.name}: waiting up to {self.options.lock_wait:g} s for the host "
                                    f"lock, held by {holder.said}")
            waited = True
            time.sleep(1.0)
        state.facts = gather.parse_facts(sections)
        state.conn.privilege = self.privilege(state.host, state.facts)
        return True

    def privilege(self, host: Host, facts: HostFacts) -> Privilege:
        """How to run privileged commands on host: as root, through passwordless sudo, or with the password."""
        return Privilege(is_root=facts.system.uid == 0, sudo_nopasswd=facts.system.sudo_nopasswd,
                         sudo_password=self.options.sudo_password, become=host.become)

    @staticmethod
    def read(conn: Connection, paths: list[str], units: list[UnitRef] = (),
             lock: list[str] | None = None, nvidia: bool = True, health: bool = False,
             topology: bool = False, packages: list[str] = ()) -> dict[str, gather.Section]:
        token = gather.new_token()
        script = gather.build_script(token, paths, units, lock=lock, nvidia=nvidia, health=health,
                                     topology=topology, packages=packages)
        result = conn.run_script(script, timeout=120)
        return gather.split_sections(token, result.stdout)

    def see_cluster(self, states: list[HostState]) -> None:
        """Give the tasks the whole inventory and every host's facts they need: those read for the run, and,
        read now (no lock, no plan), the hosts outside --limit whose facts a task's plan needs (the other
        nodes of a Slurm cluster, for slurm.conf)."""
        everyone = self.everyone or [s.host for s in states]
        read = {s.host.name: s for s in states}
        wanted = {peer.name: peer for task in self.tasks for s in states if s.facts is not None
                  for peer in task.peer_hosts(s.host, everyone) if peer.name not in read}
        peers = [] if self.options.local else [HostState(host) for host in wanted.values()]
        if peers:
            try:
                self._parallel(self.gather, peers, "read")
            finally:
                self.close(peers)
        cluster = Cluster(everyone, local_only=self.options.local)
        for state in [*states, *peers]:
            if state.facts is not None:
                cluster.facts[state.host.name] = state.facts
            elif state.result is not None:
                cluster.unread[state.host.name] = state.result.message or state.result.status
        for task in self.tasks:
            task.cluster = cluster

    def plan_all(self, state: HostState) -> list[tuple[Task, Plan]]:
        return [(task, task.plan(state.host, state.facts)) for task in self.tasks]

    # -- phase 2: apply -----------------------------------------------------------

    def apply_host(self, state: HostState) -> None:
        """The tasks in order. A stop lets the task in flight finish and starts no other; a host lost in the
        middle of a task is unreachable, with what that task changed before, and starts no other."""
        result = state.result
        for i, task in enumerate(self.tasks):
            if self.stop:
                if i == 0:  # locked and read again, nothing changed: the host was not started
                    result.status, result.message = NOT_STARTED, self.stop.words()
                else:
                    self._not_started(state, self.tasks[i:], self.stop.words())
                return
            self.options.progress(Event("applied", self._done, self._total, state.host.name, task.name))
            plan = task.plan(state.host, state.facts)  # re-plan: earlier tasks may have changed facts
            try:
                task_result = self.report_or_apply(state, task, plan)
            except HostLost as lost:
                result.status, result.message = UNREACHABLE, f"lost during {task.name}: {lost.reason}"
                self._record(state, lost.task)
                self._not_started(state, self.tasks[i + 1:], "not started: the host was lost")
                return
            self._record(state, task_result)

    def _record(self, state: HostState, task_result: TaskResult) -> None:
        state.result.tasks.append(task_result)
        if self.log:
            self.log.task(state.host.name, task_result, check=self.options.check)

    def _not_started(self, state: HostState, tasks: list[Task], why: str) -> None:
        for task in tasks:
            self._record(state, TaskResult(task.name, NOT_STARTED, message=why))

    def report_or_apply(self, state: HostState, task: Task, plan: Plan) -> TaskResult:
        if plan.skipped:
            return TaskResult(task.name, SKIPPED, message=plan.skipped)
        if plan.failed or plan.problems:
            return TaskResult(task.name, FAILED, plan.unchanged + plan.refused, plan.failed or "; ".join(plan.problems))
        items = plan.unchanged + plan.refused
        if self.options.check:
            items += [Item(c.target, CHANGED, c.what, c.before, c.after, "would change", c.diff) for c in plan.changes]
            return TaskResult(task.name, task_status(items), items)
        if not plan.changes:
            return TaskResult(task.name, task_status(items), items)
        errors, lost = self.apply_changes(state.conn, plan.changes)
        applied = list(zip(plan.changes, errors))
        if lost is None:
            try:
                fresh = gather.parse_facts(self.read(state.conn, state.paths, state.units, packages=state.packages,
                                                     nvidia=task.changes_gpus))
                if not task.changes_gpus:  # not read again: this task changed files and units only
                    fresh.nvidia = state.facts.nvidia
                state.facts = fresh
            except Unreachable as exc:
                lost = str(exc)
        if lost is not None:  # what ran is changed, unverified; the rest failed with why
            items += [Item(c.target, FAILED if error else CHANGED, c.what, c.before, c.after, error or NOT_VERIFIED,
                           c.diff) for c, error in applied]
            raise HostLost(TaskResult(task.name, task_status(items), items), lost)
        for change, error in applied:
            if error is None and change.verify is not None:
                error = change.verify(state.facts)
                error = error and f"the command succeeded but {error}"
            status = FAILED if error else CHANGED
            items.append(Item(change.target, status, change.what, change.before, change.after, error or "", change.diff))
        return TaskResult(task.name, task_status(items), items)

    def apply_changes(self, conn: Connection, changes: list[Change]) -> tuple[list[str | None], str | None]:
        """Each change's error text (None: it ran), and why the host was lost midway (None: it was not).
        A task's changes that only run commands (one per GPU, mostly) go to the host as ONE command; a change
        that writes a file sends it on stdin, on its own. Once the host is lost, nothing more is tried."""
        batched = [i for i, change in enumerate(changes) if not change.write]
        errors, lost = {}, None
        if batched:
            batch_errors, lost = self.run_batch(conn, [changes[i].commands for i in batched])
            errors = dict(zip(batched, batch_errors))
        for i, change in enumerate(changes):
            if i in errors:
                continue
            if lost is not None:
                errors[i] = "not run: the host was lost before it"
                continue
            try:
                errors[i] = self.apply_change(conn, change)
            except Unreachable as exc:
                lost, errors[i] = str(exc), f"unknown whether it ran: the host was lost during it ({exc})"
        return [errors[i] for i in range(len(changes))], lost

    @staticmethod
    def run_batch(conn: Connection, command_lists: list[list[list[str]]]) -> tuple[list[str | None], str | None]:
        """Each change's error text or None, and why the host was lost (None: it was not). Output that came
        back before a connection broke still tells which commands ran."""
        token = gather.new_token()
        try:
            outcome = conn.run(["sh", "-c", remote.command_batch(token, command_lists)], sudo=True,
                               timeout=300 + 60 * len(command_lists))
        except Unreachable as exc:
            return [f"unknown whether it ran: the host was lost during it ({exc})"] * len(command_lists), str(exc)
        except ProvisionError as exc:  # a sudo that needs a password we do not have
            return [str(exc)] * len(command_lists), None
        sections = gather.split_sections(token, outcome.stdout)
        begun = set(outcome.stdout.splitlines()) if outcome.rc < 0 else set()  # which commands had started
        errors = []
        for i, commands in enumerate(command_lists):
            error = None
            for j, argv in enumerate(commands):
                ran = sections.get(f"{i}.{j}")
                if ran is None and outcome.rc < 0:  # the channel closed with no exit status: the host went
                    error = (f"unknown whether `{' '.join(argv)}` finished: the connection closed while it ran"
                             if f"@@{token} {i}.{j}" in begun else
                             f"`{' '.join(argv)}` not run: the connection closed before it")
                    break
                if ran is None or ran.rc != 0:
                    said = ran.output.strip() if ran else outcome.output[-500:]
                    error = f"`{' '.join(argv)}` exited {ran.rc if ran else outcome.rc}: {said or 'no output'}"
                    break
            errors.append(error)
        return errors, None

    def apply_change(self, conn: Connection, change: Change) -> str | None:
        """A change that writes a file: its commands, the write (stdin), its after-write commands; the error or None.
        Raises Unreachable when the host is lost."""
        def run_all(commands: list[list[str]]) -> str | None:
            for argv in commands:
                outcome = conn.run(argv, sudo=True, timeout=300)
                if not outcome.ok:
                    return f"`{' '.join(argv)}` exited {outcome.rc}: {outcome.output or 'no output'}"
            return None

        try:
            error = run_all(change.commands)
            if error:
                return error
            if change.write:
                w = change.write
                stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
                outcome = conn.run(remote.atomic_write_argv(w.path, w.mode, w.owner, w.group, stamp,
                                                           self.options.keep_backups,
                                                           "base64" if w.base64 else ""),
                                   sudo=True, stdin=w.content, timeout=120)
                if not outcome.ok:
                    return f"writing {w.path} failed: {outcome.output or f'exit {outcome.rc}'}"
            return run_all(change.after_write)
        except Unreachable:
            raise
        except Exception as exc:  # a sudo that needs a password we do not have, ...
            return str(exc)
        return None

    def remember_supported_clocks(self, state: HostState) -> None:
        """A run that may change hosts caches the supported clocks nvidia-smi had to list (capabilities/gpu/clock_cache.py),
        so the next reads cost one nvidia-smi call. Best effort: a cache that cannot be written is asked again."""
        nvidia = state.facts.nvidia
        argv = clock_cache.write_argv(nvidia.driver_version)
        if self.options.check or nvidia.supported_clocks_source != clock_cache.FROM_NVIDIA_SMI or not argv:
            return
        try:
            outcome = state.conn.run(argv, sudo=True, stdin=clock_cache.rows(nvidia.gpus), timeout=60)
        except ProvisionError as exc:  # a sudo that wants a password we were not given
            outcome = CommandResult(argv, 1, "", str(exc))
        if not outcome.ok:
            self.options.notice(f"{state.host.name}: could not cache the supported clocks: {outcome.output}")

    def release_lock(self, state: HostState, timeout: float = 30) -> None:
        """Give the host's lock back (best effort: a lost host's lock goes stale, for the next run to take)."""
        if state.locked and state.conn is not None:
            state.locked = False
            try:
                state.conn.run(hostlock.release_argv(self.owner), timeout=timeout)
            except ProvisionError:
                pass

    def release(self, state: HostState) -> None:
        if state.conn is None:
            return
        try:
            self.release_lock(state)
        finally:
            state.conn.close()
        if state.result:
            state.result.commands = state.conn.commands_run

    def held_locks(self) -> list[tuple[str, Connection]]:
        """The hosts whose lock this run holds now, for the heartbeat."""
        return [(s.host.name, s.conn) for s in self.states if s.locked and s.conn is not None]

    # -- stopping -----------------------------------------------------------------

    def _abandon(self, states: list[HostState]) -> None:
        """A second signal: give back the locks that can be given within seconds, then close every connection
        (the commands in flight on the hosts may finish or not; the next run reads what they did)."""
        releasing = [threading.Thread(target=self.release_lock, args=(s, 10), daemon=True) for s in states]
        for thread in releasing:
            thread.start()
        for thread in releasing:
            thread.join(12)
        for state in states:
            if state.conn is not None:
                try:
                    state.conn.close()
                except Exception:  # a connection in use by a worker: closing is all we want of it
                    pass

    # -- the run ------------------------------------------------------------------

    def run(self, hosts: list[Host]) -> list[HostResult]:
        """Read and plan every host, then apply. Stopped (self.stop), the hosts not started say so; a
        KeyboardInterrupt (a second signal) abandons the work in flight and is raised again."""
        states = self.states = [HostState(h) for h in hosts]  # kept: the caller may reboot some (reboot.py)
        try:
            self._parallel(self.gather, states, "read")
            if not self.stop:
                self.see_cluster(states)
                self._parallel(self._plan, states, None)
                problems = self._input_problems(states)
                if problems:
                    raise InputError(problems)
            with hostlock.Heartbeat(self.owner, self.held_locks, self.options.notice):
                self._parallel(self._phase2, states, "done")
        except KeyboardInterrupt:
            self._abandon(states)
            if self.log:
                self.log.abort("abandoned", "a second interrupt: the changes in flight were abandoned")
            raise
        except InputError as exc:  # the log says how the run ended
            if self.log:
                self.log.abort("bad input", str(exc))
            raise
        finally:
            self._parallel(self.release, states, None)
        results = [s.result for s in states]
        if self.log:
            self.log.summary(results, check=self.options.check,
                             aborted=signal_name(self.stop.signum) if self.stop else "")
        return results

    def read_facts(self, hosts: list[Host], keep_open: bool = False) -> list[HostState]:
        """Read-only: connect, gather facts, disconnect (keep_open: the caller closes them with close()).
        No lock, no plan."""
        states = [HostState(h) for h in hosts]
        try:
            self._parallel(self.gather, states, "read")
            self.see_cluster(states)
        finally:
            if not keep_open:
                self.close(states)
        return states

    def close(self, states: list[HostState]) -> None:
        self._parallel(self.release, states, None)

    def _plan(self, state: HostState) -> None:
        if state.facts is not None:
            if self.options.adjust_host:
                try:
                    state.host = self.options.adjust_host(state.host, state.facts)
                except InputError as exc:  # e.g. an ad-hoc --gpu that matches no GPU of this host
                    state.problems += exc.problems
                    return
            state.plans = self.plan_all(state)

    def _phase2(self, state: HostState) -> None:
        result = state.result
        if self.stop and result.status not in (UNREACHABLE, NOT_STARTED):
            result.status, result.message = NOT_STARTED, self.stop.words()
        elif state.facts is not None:
            try:
                # Something to change: read again under the host lock (another run may have changed the host
                # since the first read), then apply. A no-op and --check never lock: one command per host.
                changes = not self.options.check and any(plan.changes for _, plan in state.plans)
                if not changes or self.read_into(state, lock=True):
                    self.remember_supported_clocks(state)  # first: the re-reads after each task hit the cache
                    self.apply_host(state)
                    result.reboot_pending = driver.reboot_reasons(state.host.settings.driver, state.facts)
            except Unreachable as exc:
                result.status, result.message = UNREACHABLE, str(exc)
            finally:
                self.release_lock(state)  # done with this host: another run may have it now
        result.settle()
        result.seconds = round(time.monotonic() - state.started, 3)

    def _input_problems(self, states: list[HostState]) -> list[Problem]:
        return [problem for state in states for problem in state.problems] + [
            Problem(self.inventory_path, f"host {state.host.name}", "", f"{task.name}: {problem}")
            for state in states for task, plan in state.plans for problem in plan.problems
        ]

    def _parallel(self, work: Callable[[HostState], None], states: list[HostState], label: str | None) -> None:
        self._done, self._total = 0, len(states)

        def one(state: HostState) -> None:
            try:
                work(state)
            except Exception as exc:  # a bug must not take the other hosts down with it
                if state.result is not None:
                    state.result.status = FAILED
                    state.result.message = f"internal error: {type(exc).__name__}: {exc}"
            if label:
                status = state.result.status if state.result else ""
                # Reading says "read"; after phase 2 the host's own word: ok, changed (would change), failed, ...
                said = label if label == "read" and status not in (UNREACHABLE, NOT_STARTED, FAILED) else \
                    "would change" if status == CHANGED and self.options.check else status
                with self._lock:
                    self._done += 1
                    self.options.progress(Event(said, self._done, len(states), state.host.name))

        # Not `with`: its exit waits for every queued host, and an abandoned run must not.
        pool = ThreadPoolExecutor(max_workers=max(1, min(self.options.forks, len(states))))
        try:
            for future in [pool.submit(one, s) for s in states]:
                future.result()
        finally:
            pool.shutdown(wait=False, cancel_futures=True)
