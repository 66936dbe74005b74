"""`provision apply --via slurm`: the selected Slurm compute nodes apply themselves. One SSH connection to the
cluster's controller runs one `srun` over them; on each node `provision apply --local --limit ITSELF --json`
reads the flattened inventory the health check reads (slurm/tasks.py node_inventory), sent once on srun's stdin,
which srun gives to every task. Their JSON comes back through srun (--label says whose line is whose) and is the
usual per-host report. The control machine's cost is one connection and one parse per node, whatever the
node count; the nodes' work runs on their own CPUs.

Only nodes that can take a job now (idle, or mixed: CPUs free) go through srun; the others (drained, down,
allocated whole) and hosts that are not compute nodes of that controller (the controller itself) are applied
over SSH as usual, in the same run, and the report says which went which way."""

from __future__ import annotations

import json
import shlex
from collections import defaultdict
from dataclasses import dataclass, field

from provision.capabilities.slurm.tasks import node_inventory
from provision.core.connection import Connection
from provision.core.errors import InputError, Problem
from provision.core.plan import FAILED, Item
from provision.core.resources import playbook_path, shipped
from provision.core.results import UNREACHABLE, HostResult, TaskResult
from provision.inventory.model import Host

# sinfo's compact states (%t) of a node that takes a new job step now; "mix" has CPUs left. A trailing "*"
# (not responding), "~" (powered down), "#" (powering up), "!" (pending power down) and so on rule it out.
TAKES_A_JOB = {"idle", "mix"}
SINFO = ["sinfo", "--noheader", "--Node", "--format=%N|%o|%t"]
MARK = "provision-via-slurm host "  # the first line each task prints: which inventory host it is


@dataclass
class Fanout:
    """Who goes through srun on which controller, and who goes over SSH (with why)."""

    controller: Host
    nodes: dict[str, Host] = field(default_factory=dict)  # Slurm node name -> its inventory host
    over_ssh: dict[str, str] = field(default_factory=dict)  # host name -> why it is applied over SSH


def controller_of(hosts: list[Host], everyone: list[Host], inventory: str) -> Host:
    """The one controller of the selected compute nodes. Bad input (no Slurm compute node selected, two
    clusters, a controller missing from the inventory) is refused before any host is touched."""
    names = {h.settings.slurm.controller for h in hosts
             if h.settings.slurm and h.settings.slurm.role_of(h.name) in ("compute", "both")}
    if not names:
        raise InputError([Problem("command line", "", "--via slurm",
                                  "none of the selected hosts is a Slurm compute node (a slurm block, role compute "
                                  "or both)", "select the nodes with --limit, or leave out --via")])
    if len(names) > 1 or None in names:
        raise InputError([Problem(inventory, "", "slurm.controller",
                                  f"the selected nodes belong to {len(names)} Slurm clusters "
                                  f"({', '.join(sorted(map(str, names)))}): one srun runs on one cluster",
                                  "--limit the nodes of one controller")])
    name = names.pop()
    controller = next((h for h in everyone if h.name == name), None)
    if controller is None:
        raise InputError([Problem(inventory, "", "slurm.controller", f"{name!r} is not a host of this inventory",
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
        if not slurm or slurm.controller != controller.name or slurm.role_of(host.name) not in ("compute", "both"):
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


def task_script(nodes: dict[str, Host], arguments: list[str]) -> str:
    """What each srun task runs: the inventory from stdin into a file that is unlinked at once and read through
    an open descriptor (nothing left behind, whatever stops the task), then provision apply on its own host, as
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
        f"exec \"$p\" apply /dev/fd/3 --local --limit \"$h\" --json {shlex.join(arguments)}\n"
    )


def srun_argv(nodes: dict[str, Host], arguments: list[str], job: str, wait: int = 60) -> list[str]:
    """One task per node; srun waits at most `wait` seconds for them (nodes that take a job now)."""
    return ["srun", "--nodelist=" + ",".join(nodes), f"--nodes={len(nodes)}", "--ntasks-per-node=1", "--label",
            "--input=all", f"--immediate={wait}", f"--job-name={job}", "--kill-on-bad-exit=0",
            "sh", "-c", task_script(nodes, arguments)]


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


def host_results(data: dict) -> list[HostResult]:
    """`provision apply --json`'s hosts as HostResults (core/results.py to_json, read back)."""
    results = []
    for host in data["hosts"]:
        tasks = [TaskResult(t["name"], t["status"], [Item(**i) for i in t["items"]], t.get("message", ""))
                 for t in host["tasks"]]
        results.append(HostResult(host["host"], host["status"], tasks, host.get("message", ""),
                                  host.get("commands", 0), host.get("seconds", 0.0), host.get("reboot_pending", [])))
    return results


def gather(plan: Fanout, out: str, err: str, rc: int) -> list[HostResult]:
    """A result per node of the srun: its own JSON where it printed some; else why not, in srun's words."""
    said, errors = by_label(out), by_label(err)
    results: dict[str, HostResult] = {}
    for label, lines in said.items():
        first = next((i for i, line in enumerate(lines) if line.startswith(MARK)), None)
        if first is None:
            continue
        name = lines[first][len(MARK):].strip()
        text = "\n".join(lines[first + 1:])
        try:
            results.update((r.host, r) for r in host_results(json.loads(text)))
        except (ValueError, KeyError, TypeError) as exc:
            words = " ".join(errors.get(label, [])[-3:]) or text.strip()[-300:] or str(exc)
            results[name] = HostResult(name, FAILED, message=f"provision apply on the node gave no report: {words}")
    unlabelled = " ".join(line for line in err.splitlines() if line.startswith("srun:"))[-500:]
    for host in plan.nodes.values():
        if host.name not in results:
            results[host.name] = HostResult(host.name, UNREACHABLE, message=(
                f"srun on {plan.controller.name} did not run provision on it (exit {rc}): "
                f"{unlabelled or err.strip()[-500:] or 'no output'}"))
    return [results[h.name] for h in plan.nodes.values()]


def apply_through(conn: Connection, plan: Fanout, everyone: list[Host], arguments: list[str], job: str,
                  timeout: float | None = None) -> list[HostResult]:
    """One srun on the controller (as root: apply sets GPUs); the nodes' results."""
    done = conn.run(srun_argv(plan.nodes, arguments, job), sudo=True, stdin=node_inventory(everyone),
                    timeout=timeout)
    return gather(plan, done.stdout, done.stderr, done.rc)


def node_arguments(check: bool, tags: str, skip_tags: str, playbook: str | None, templates: str | None,
                   lock_wait: float, keep_backups: int, accept_gpu_changes: bool, accept_bmc_events: bool,
                   reboot: bool, local: bool) -> list[str]:
    """apply's options as each node's `provision apply` takes them; those that cannot travel are refused."""
    refused = [(reboot, "--reboot", "a node cannot reboot itself from inside its own job step",
                "leave out --via to reboot over SSH"),
               (local, "--local", "--local is this machine; --via slurm is the compute nodes", "choose one"),
               (templates, f"--templates {templates}", "only the inventory travels to the nodes; they render the "
                "shipped templates", "leave out --via to use your own"),
               (playbook and playbook_path(playbook).parent != shipped("playbooks"), f"--playbook {playbook}",
                "only the inventory travels to the nodes", "name a shipped playbook (site, gpu) or leave out --via")]
    problems = [Problem("command line", "", "--via slurm", f"with {option}: {why}", hint)
                for wrong, option, why, hint in refused if wrong]
    if problems:
        raise InputError(problems)
    arguments = ["--check"] if check else []
    arguments += [*(["--tags", tags] if tags else []), *(["--skip-tags", skip_tags] if skip_tags else []),
                  *(["--playbook", playbook] if playbook else []),
                  "--lock-wait", f"{lock_wait:g}", "--keep-backups", str(keep_backups)]
    return arguments + ["--accept-gpu-changes"] * accept_gpu_changes + ["--accept-bmc-events"] * accept_bmc_events
