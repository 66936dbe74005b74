"""`provision apply|verify --via slurm`: the selected Slurm compute nodes apply or verify themselves. One SSH
connection to the cluster's controller runs one `srun` over them; on each node `provision apply --local --limit
ITSELF --json` (or verify) reads the flattened inventory the health check reads (slurm/tasks.py node_inventory),
sent once on srun's stdin, which srun gives to every task. Their JSON comes back through srun (--label says whose
line is whose) and is the usual per-host report. For those nodes the control machine's cost is one connection
and a parse per node; their work runs on their own CPUs.

Only nodes that can take a job now (idle, or mixed: CPUs free) go through srun; the others (drained, down,
allocated whole) and hosts that are not compute nodes of that controller (the controller itself) go over SSH
as usual, in the same run, and the run says which went which way. A controller in the run still has its
slurm.conf planned from every node's facts, read over SSH: --limit the compute nodes to reach the controller
alone."""

from __future__ import annotations

import json
import shlex
import threading
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from provision.capabilities.registry import RUN_FLAGS
from provision.capabilities.slurm.tasks import node_inventory
from provision.commands.run import Target, connector
from provision.core.connection import Connection, SSHOptions, Unreachable
from provision.core.errors import InputError, Problem
from provision.core.resources import playbook_path, shipped
from provision.core.results import signal_name
from provision.inventory.model import Host

# sinfo's compact states (%t) of a node that takes a new job step now; "mix" has CPUs left. A trailing "*"
# (not responding), "~" (powered down), "#" (powering up), "!" (pending power down) and so on rule it out.
TAKES_A_JOB = {"idle", "mix"}
SINFO = ["sinfo", "--noheader", "--Node", "--format=%N|%o|%t"]
MARK = "provision-via-slurm host "  # the first line each task prints: which inventory host it is
NODE_INVENTORY = "/dev/fd/3"  # the inventory as each node's provision reads it (task_script)


@dataclass
class Fanout:
    """Who goes through srun on which controller, and who goes over SSH (with why)."""

    controller: Host
    nodes: dict[str, Host] = field(default_factory=dict)  # Slurm node name -> its inventory host
    over_ssh: dict[str, str] = field(default_factory=dict)  # host name -> why it is applied over SSH


def controller_of(hosts: list[Host], everyone: list[Host], inventory: str) -> Host:
    """The one controller of the selected compute nodes. Bad input (no Slurm compute node selected, two
    clusters, a controller missing from the inventory) is refused before any host is touched."""
    names = {h.settings.slurm.controller for h in hosts if h.settings.slurm and h.settings.slurm.runs_jobs(h.name)}
    if not names:
        raise InputError([Problem("command line", "", "--via slurm",
                                  "none of the selected hosts is a Slurm compute node (a slurm block, role compute "
                                  "or both)", "select the nodes with --limit, or leave out --via")])
    if len(names) > 1 or None in names:
        raise InputError([Problem(inventory, "", "provision_slurm.controller",
                                  f"the selected nodes belong to {len(names)} Slurm clusters "
                                  f"({', '.join(sorted(map(str, names)))}): one srun runs on one cluster",
                                  "--limit the nodes of one controller")])
    name = names.pop()
    controller = next((h for h in everyone if h.name == name), None)
    if controller is None:
        raise InputError([Problem(inventory, "", "provision_slurm.controller", f"{name!r} is not a host of this inventory",
                                  "add the controller as a host: --via slurm runs srun there")])
    return controller


def plan_fanout(hosts: list[Host], controller: Host, sinfo: str) -> Fanout:
    """Each selected host through srun (a compute node of this controller that sinfo lists at its address and
    that takes a job now) or over SSH, with the reason."""
    listed: dict[str, tuple[str, str]] = {}  # NodeAddr (and NodeName) -> (NodeName, state)
    for line in sinfo.splitlines():
        parts = line.strip().split("|")
        if len(parts) == 3:
            name, address, state = parts
            listed.setdefault(address, (name, state))
            listed.setdefault(name, (name, state))
    plan = Fanout(controller)
    for host in hosts:
        slurm = host.settings.slurm
        if not slurm or slurm.controller != controller.name or not slurm.runs_jobs(host.name):
            plan.over_ssh[host.name] = "not a Slurm compute node of " + controller.name
            continue
        name, state = listed.get(host.address) or listed.get(host.name) or ("", "")
        if not name:
            plan.over_ssh[host.name] = f"sinfo on {controller.name} lists no node at {host.address}"
        elif state not in TAKES_A_JOB:
            plan.over_ssh[host.name] = f"Slurm node {name} is {state}: it takes no job now"
        elif name in plan.nodes:
            plan.over_ssh[host.name] = f"Slurm node {name} is already {plan.nodes[name].name}'s"
        else:
            plan.nodes[name] = host
    return plan


def provision_on(host: Host) -> str:
    return host.settings.slurm.provision_command if host.settings.slurm else "provision"


def task_script(nodes: dict[str, Host], command: str, arguments: list[str]) -> str:
    """What each srun task runs: the inventory from stdin into a file that is unlinked at once and read through
    an open descriptor (nothing left behind, whatever stops the task), then provision COMMAND on its own host, as
    the task's only process: a signal to the job step reaches it once, whether Slurm signals every process of
    the step (proctrack/cgroup) or the task alone, and it stops as after a Ctrl-C (what is in flight finishes,
    the report is printed, exit 143)."""
    cases = "".join(f"    {shlex.quote(name)}) h={shlex.quote(host.name)}; p={shlex.quote(provision_on(host))};;\n"
                    for name, host in nodes.items())
    return (
        "f=$(mktemp) || exit 1\n"
        "cat > \"$f\" && exec 3< \"$f\"\n"
        "rm -f \"$f\"\n"
        "case $SLURMD_NODENAME in\n"
        f"{cases}"
        "    *) echo \"provision: no inventory host for Slurm node $SLURMD_NODENAME\" >&2; exit 2;;\n"
        "esac\n"
        f"echo \"{MARK}$h\"\n"
        f"exec \"$p\" {command} {NODE_INVENTORY} --local --limit \"$h\" --json {shlex.join(arguments)}\n"
    )


def srun_argv(nodes: dict[str, Host], command: str, arguments: list[str], job: str, wait: int = 60) -> list[str]:
    """One task per node; srun waits at most `wait` seconds for them (nodes that take a job now)."""
    return ["srun", "--nodelist=" + ",".join(nodes), f"--nodes={len(nodes)}", "--ntasks-per-node=1", "--label",
            "--input=all", f"--immediate={wait}", f"--job-name={job}", "--kill-on-bad-exit=0",
            "sh", "-c", task_script(nodes, command, arguments)]


def cancel_argv(job: str, signum: int) -> list[str]:
    """The signal that stopped this run, to every task of its srun (they stop as the run did)."""
    return ["scancel", f"--signal={signum}", f"--name={job}"]


def by_label(text: str) -> dict[str, list[str]]:
    """srun --label's output, per task: "  0: line" -> {"0": ["line"]}."""
    tasks: dict[str, list[str]] = defaultdict(list)
    for line in text.splitlines():
        label, colon, rest = line.partition(": ")
        if colon and label.strip().isdigit():
            tasks[label.strip()].append(rest)
    return tasks


@dataclass
class NodeSaid:
    """What one node's provision printed: its JSON, or why there is none (ran: it started there)."""

    host: str
    data: dict[str, Any] | None = None
    ran: bool = False
    words: str = ""


def gather(plan: Fanout, out: str, err: str, rc: int, command: str, inventory: str) -> list[NodeSaid]:
    """What each node of the srun said, in plan order: its own JSON where it printed some; else why not, in
    srun's words or its own. The next steps a node gives name the inventory it read (NODE_INVENTORY): they
    name the user's inventory instead, so that they work from here."""
    out = out.replace(NODE_INVENTORY, json.dumps(inventory)[1:-1])
    said, errors = by_label(out), by_label(err)
    found: dict[str, NodeSaid] = {}
    for label, lines in said.items():
        first = next((i for i, line in enumerate(lines) if line.startswith(MARK)), None)
        if first is None:
            continue
        name = lines[first][len(MARK):].strip()
        text = "\n".join(lines[first + 1:])
        try:
            found[name] = NodeSaid(name, json.loads(text), True)
        except ValueError:
            words = " ".join(errors.get(label, [])[-3:]) or text.strip()[-300:] or "no output"
            found[name] = NodeSaid(name, None, True, f"provision {command} on the node gave no report: {words}")
    srun_words = " ".join(line for line in err.splitlines() if line.startswith("srun:"))[-500:]
    return [found.get(h.name) or NodeSaid(h.name, words=(
        f"srun on {plan.controller.name} did not run provision on it (exit {rc}): "
        f"{srun_words or err.strip()[-500:] or 'no output'}")) for h in plan.nodes.values()]


class Srun:
    """One srun of `provision COMMAND` over a fan-out's nodes, in a thread of its own while the caller works
    on the other hosts over SSH; a signal to the caller goes on to the nodes (scancel), which stop as it does."""

    def __init__(self, plan: Fanout, conn: Connection, ssh: SSHOptions, everyone: list[Host], inventory: str,
                 command: str, arguments: list[str], run_id: str):
        self.plan, self.conn, self.ssh = plan, conn, ssh
        self.job = f"provision-{command}-{run_id}"
        self.argv = srun_argv(plan.nodes, command, arguments, self.job)
        self.stdin = node_inventory(everyone)
        self.command, self.inventory = command, inventory
        self.said: list[NodeSaid] = []
        self.thread = threading.Thread(target=self._run, name="srun", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            done = self.conn.run(self.argv, sudo=True, stdin=self.stdin)  # as root: apply sets GPUs
            self.said = gather(self.plan, done.stdout, done.stderr, done.rc, self.command, self.inventory)
        except Unreachable as exc:
            self.said = [NodeSaid(h.name, words=f"the controller {self.plan.controller.name} was lost during "
                                                f"srun: {exc}") for h in self.plan.nodes.values()]
        finally:
            self.conn.close()

    def wait(self, stop, notice) -> list[NodeSaid]:
        """Until every node has answered; the first signal of stop (core/stopping.py) is passed on once."""
        told = False
        while self.thread.is_alive():
            if stop and not told:
                told = True
                self.tell_stop(stop.signum or 15, notice)
            self.thread.join(0.2)
        return self.said

    def tell_stop(self, signum: int, notice) -> None:
        """scancel on the controller, over a connection of its own (the first one carries srun)."""
        controller = self.plan.controller
        conn = connector(False, self.ssh)(controller)
        try:
            conn.open()
            said = conn.run(cancel_argv(self.job, signum), sudo=True, timeout=30)
            notice(f"--via slurm: {signal_name(signum)} passed on to the nodes of {self.job}" if said.ok else
                   f"--via slurm: scancel on {controller.name} failed ({said.output[-200:]}): the nodes finish")
        except Unreachable as exc:
            notice(f"--via slurm: {controller.name} unreachable to pass the stop on ({exc}): the nodes finish")
        finally:
            conn.close()


def fan_out(target: Target, ssh: SSHOptions, command: str, arguments: list[str], run_id: str,
            notice) -> tuple[Srun | None, list[Host]]:
    """Ask the controller which selected nodes take a job, start the srun over them, and say who goes which
    way: (the srun, or None where no node goes through it; the hosts to work on over SSH). A controller that
    cannot be reached or asked sends every host over SSH, and says why. Bad input is refused before anything."""
    controller = controller_of(target.hosts, target.everyone, target.inventory_path)
    conn = connector(False, ssh)(controller)
    try:
        conn.open()
        listed = conn.run(SINFO, timeout=60)
        if not listed.ok:
            raise Unreachable(f"sinfo failed there: {listed.output[-300:]}")
    except Unreachable as exc:
        conn.close()
        notice(f"--via slurm: the controller {controller.name} cannot run srun ({exc}): every host over SSH")
        return None, target.hosts
    plan = plan_fanout(target.hosts, controller, listed.stdout)
    notice(f"--via slurm: {len(plan.nodes)} node(s) through srun on {controller.name}"
           + "".join(f"; {name} over SSH ({why})" for name, why in plan.over_ssh.items()))
    if not plan.nodes:
        conn.close()
        return None, target.hosts
    srun = Srun(plan, conn, ssh, target.everyone, target.inventory_path, command, arguments, run_id)
    return srun, [h for h in target.hosts if h.name in plan.over_ssh]


def refuse(refusals: list[tuple[object, str, str, str]]) -> None:
    """(wrong, option, why, hint): the options that cannot travel to the nodes, refused before anything runs."""
    problems = [Problem("command line", "", "--via slurm", f"with {option}: {why}", hint)
                for wrong, option, why, hint in refusals if wrong]
    if problems:
        raise InputError(problems)


def shared_refusals(playbook: str | None, templates: str | None, local: bool) -> list[tuple[object, str, str, str]]:
    return [(local, "--local", "--local is this machine; --via slurm is the compute nodes", "choose one"),
            (templates, f"--templates {templates}", "only the inventory travels to the nodes; they render the "
             "shipped templates", "leave out --via to use your own"),
            (playbook and playbook_path(playbook).parent != shipped("playbooks"), f"--playbook {playbook}",
             "only the inventory travels to the nodes", "name a shipped playbook (site, gpu) or leave out --via")]


def apply_arguments(check: bool, tags: str, skip_tags: str, playbook: str | None, templates: str | None,
                    lock_wait: float, keep_backups: int, flags: frozenset[str], reboot: bool,
                    local: bool) -> list[str]:
    """apply's options as each node's `provision apply` takes them (flags: the run flags set, RUN_FLAGS' names);
    those that cannot travel are refused."""
    refuse([(reboot, "--reboot", "a node cannot reboot itself from inside its own job step",
             "leave out --via to reboot over SSH"), *shared_refusals(playbook, templates, local)])
    arguments = ["--check"] if check else []
    arguments += [*(["--tags", tags] if tags else []), *(["--skip-tags", skip_tags] if skip_tags else []),
                  *(["--playbook", playbook] if playbook else []),
                  "--lock-wait", f"{lock_wait:g}", "--keep-backups", str(keep_backups)]
    return arguments + [flag.option for flag in RUN_FLAGS if flag.name in flags]


def verify_arguments(playbook: str | None, templates: str | None, local: bool, drain: bool, resume: bool,
                     active: float | None, junitxml: str | None) -> list[str]:
    """verify's options as each node's `provision verify` takes them (--prometheus is written here, from the
    nodes' verdicts); those that cannot travel are refused."""
    refuse([*shared_refusals(playbook, templates, local),
            (junitxml, f"--junitxml {junitxml}", "the JUnit XML is pytest's, of the checks run on this machine, and "
             "the nodes check themselves", "use --json, or leave out --via")])
    return [*(["--playbook", playbook] if playbook else []), *(["--drain"] if drain else []),
            *(["--resume"] if resume else []), *(["--active", "--duration", f"{active:g}"] if active else [])]
