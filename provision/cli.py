"""The `provision` command. Thin: parse options, build the run, print results."""

from __future__ import annotations

import functools
import json
import os
import sys
from dataclasses import asdict, dataclass, replace
from importlib.metadata import entry_points
from pathlib import Path
from typing import Callable, NoReturn

import click

from provision import __version__
from provision.commands.apply import apply as apply_command  # the other commands: imported where they run
from provision.commands import listing
from provision.commands.playbook import load_playbook, playbook_file, select_tasks, unapplied_blocks, with_bmc_record
from provision.commands.run import Target, connector
from provision.commands.via_slurm import apply_arguments, verify_arguments
from provision.commands.run import default_sources, select_hosts as target_hosts
from provision.core.connection import SSHOptions
from provision.core.errors import InputError, Problem, ProvisionError
from provision.core.localfiles import check_writable, not_a_file
from provision.core.resources import templates_dir
from provision.core.results import EXIT_BAD_INPUT, EXIT_NOT_WRITTEN, EXIT_STOPPED_BASE, exit_code, to_json
from provision.core.run import RunOptions
from provision.core.runlog import RunLog, default_path
from provision.core.sshargs import ssh_config_problem
from provision.output import report
from provision.output.progress import Progress

EXIT_CODES_HELP = """\b
Exit codes (bit flags, added up):
  0  every host converged (with --check: every host is as intended)
  1  some task failed on some host
  2  bad input (inventory, playbook, options): no host was touched
  4  some host was unreachable (5 = both 1 and 4)
  8  --check only: some host would change (a drift gate for scripts)
  16 some host waits for a reboot: a driver installed loads at the next
     boot (apply --reboot); not a failure
  32 the run log (--log) could not be written to the end; the results
     shown stand
  130, 143  stopped by Ctrl-C (SIGINT) or SIGTERM: the changes in flight
     finished, no new host or task started; the report says which"""

ADHOC_EXIT_CODES_HELP = """\b
Exit codes (bit flags, added up):
  0  every host converged (with --check: every host is as intended)
  1  some task failed on some host
  2  bad input (inventory, options): no host was touched
  4  some host was unreachable (5 = both 1 and 4)
  8  --check only: some host would change
  16 some host waits for a reboot: its installed driver loads at the next
     boot (provision apply --reboot); not a failure
  32 the run log could not be written to the end; the results shown stand
  130, 143  stopped by Ctrl-C (SIGINT) or SIGTERM: the changes in flight
     finished, no new host or task started; the report says which"""


EXTRA_VARS_HELP = ("Variables over every host's, as ansible-playbook -e takes them: key=value, a YAML or JSON "
                   "mapping, or @FILE; repeatable. provision's blocks merge key by key.")
INVENTORY_HELP = ("The inventory, as for ansible-playbook -i: a file (YAML, INI, an executable script), a directory, "
                  "or host1,host2, ; repeatable. group_vars/ and host_vars/ beside it are read. Default: "
                  "ANSIBLE_INVENTORY, ansible.cfg's inventory, /etc/ansible/hosts.")


def via_option(verb: str):
    """--via of apply and verify (commands/via_slurm.py)."""
    return click.option("--via", type=click.Choice(["ssh", "slurm"]), default="ssh", show_default=True,
                        help=f"slurm: the Slurm compute nodes that take a job {verb} themselves, through one srun on "
                             "their controller (provision on each node: provision_slurm.provision_command); the other hosts "
                             "over SSH.")


def output_file(option: str, default: Callable[[], Path] | None = None, **how):
    """The callback of an option naming a file to write: checked as it is parsed, before the inventory is read
    (core/localfiles.py check_writable)."""
    def check(ctx, param, value):
        value = default() if value is None and default else value
        return None if value is None else str(check_writable(value, option, **how))
    return check


def key_file(ctx, param, value):
    """--identity: a regular file (a FIFO would block the connection that reads it, a device never end)."""
    mode = os.stat(value).st_mode if value is not None else None
    if kind := not_a_file(mode):
        raise InputError([Problem("command line", "", "--identity", f"{value!r} is {kind}, not a file",
                                  "name the SSH private key file itself")])
    return value


def ssh_config_file(ctx, param, value):
    """--ssh-config: read as it is parsed (core/sshargs.py); a file that is no ssh_config is bad input."""
    if value is not None and (problem := ssh_config_problem(value, "command line", "", "--ssh-config")):
        raise InputError([problem])
    return value


def exit_with(code: int, unwritten: list[str]) -> NoReturn:
    """Exit with `code`, and EXIT_NOT_WRITTEN where a file was not written (each said after the results)."""
    for line in filter(None, unwritten):
        click.secho(f"Error: {line}", fg="red", err=True)
    sys.exit(code | EXIT_NOT_WRITTEN if any(unwritten) and code < EXIT_STOPPED_BASE else code)


def options(*declared):
    """Several click options as one decorator, listed in --help in the order given."""
    def decorate(func):
        for option in reversed(declared):
            func = option(func)
        return func
    return decorate


# ansible-playbook's habits, each declared once, for every command that takes them.
check_option = click.option("-C", "--check", is_flag=True, help="Show what would change; touch nothing.")
diff_option = click.option("-D", "--diff", "show_diff", is_flag=True, help="Show file and value changes.")
user_option = click.option(
    "-u", "--user", "remote_user", metavar="REMOTE_USER",
    help="Connect as this user, as ansible-playbook -u: over ansible.cfg's remote_user, under the inventory's "
         "ansible_user or ansible_ssh_user.")
become_option = click.option(
    "-b", "--become", is_flag=True, expose_value=False,
    help="Accepted for ansible-playbook's habit: provision becomes root for what needs it anyway (sudo where the "
         "login user is not root); an inventory's ansible_become: false still wins, as in Ansible.")
list_hosts_option = click.option("--list-hosts", is_flag=True,
                                 help="Print the hosts the run would select, as ansible-playbook does; contact none.")
ask_pass_option = click.option("-K", "--ask-become-pass", "--ask-sudo-pass", "ask_sudo_pass", is_flag=True,
                               help="Ask once for the sudo password (never stored or shown).")
# What every command working on hosts shares, declared once.
inventory_source_option = click.option("-i", "--inventory", "inventory_option", multiple=True, help=INVENTORY_HELP)
limit_option = click.option("-l", "--limit", help="Hosts or groups as Ansible's patterns: a,b (or a:b), globs, "
                            "~regex, !exclude, &intersect, group[0] or group[1:3], @file of patterns.")
forks_option = click.option("-f", "--forks", type=click.IntRange(1, 512), default=16, show_default=True,
                            help="Hosts worked on in parallel.")
json_option = click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON on stdout.")
ssh_config_option = click.option(
    "--ssh-config", type=click.Path(), callback=ssh_config_file,
    help="An ssh_config file for every host, instead of the inventory's ssh_config or ~/.ssh/config.")
accept_keys_option = click.option("--accept-new-host-keys", is_flag=True,
                                  help="Trust and record unknown SSH host keys (like StrictHostKeyChecking=accept-new). "
                                       "Changed keys are always refused.")
identity_option = click.option("--identity", "--private-key", "identity_file",
                               type=click.Path(exists=True, dir_okay=False), callback=key_file,
                               help="SSH private key file.")


def inventory_options(func):
    """Options shared by every command that works on hosts. The inventory as the INVENTORY argument, or as
    -i/--inventory (Ansible's way, repeatable): the command gets its sources as `inventory` either way."""
    @functools.wraps(func)
    def one_inventory(*args, inventory=None, inventory_option=(), extra_vars=(), remote_user=None, list_hosts=False,
                      **kwargs):
        given = InventoryArgs(given_sources(inventory, inventory_option), extra_vars, remote_user)
        if getattr(func, "plays", False):  # the playbook's commands list hosts with their play (playbook_options)
            kwargs["list_hosts"] = list_hosts
        elif list_hosts:
            print_hosts(select_hosts(given, kwargs["local"], kwargs["limit"]))
        return func(*args, inventory=given, **kwargs)

    return options(
        click.argument("inventory", required=False),
        inventory_source_option,
        click.option("-e", "--extra-vars", multiple=True, help=EXTRA_VARS_HELP),
        click.option("--local", is_flag=True,
                     help="Work on this machine, no SSH (with an INVENTORY: this machine as its selected hosts)."),
        limit_option, list_hosts_option, user_option, become_option, forks_option, json_option, ssh_config_option,
        accept_keys_option,
        click.option("--connect-timeout", type=click.FloatRange(1, 600), default=10, show_default=True,
                     help="Seconds to wait for an SSH connection."),
        identity_option,
    )(one_inventory)


def adhoc_options(func):
    """The ad-hoc commands: this machine by default, or -i INVENTORY; --gpu; --check; the SSH options."""
    return options(
        click.option("-i", "--inventory", multiple=True,
                     help="Work on this inventory's hosts instead of this machine (repeatable, as for apply)."),
        limit_option, list_hosts_option,
        click.option("--gpu", help="GPU indexes or UUIDs, comma-separated.  [default: every GPU]"),
        check_option, json_option, forks_option, ssh_config_option, accept_keys_option, identity_option, user_option,
        become_option, ask_pass_option,
    )(func)


@dataclass(frozen=True)
class InventoryArgs:
    """The inventory a command was given: its sources (INVENTORY or -i), -e extra variables and -u."""

    sources: tuple[str, ...] = ()
    extra_vars: tuple[str, ...] = ()
    remote_user: str | None = None  # -u

    def __bool__(self) -> bool:
        return bool(self.sources)


def given_sources(argument: str | None, options: tuple[str, ...]) -> tuple[str, ...]:
    if argument and options:
        raise click.UsageError("give the inventory once: as the INVENTORY argument or as -i (repeatable)")
    return (argument,) if argument else tuple(options)


def select_hosts(inventory: InventoryArgs, local: bool, limit: str | None) -> Target:
    sources = inventory.sources or ([] if local else default_sources())
    if not sources and not local:
        raise click.UsageError("give an INVENTORY (or -i INVENTORY, or inventory= in ansible.cfg), or --local to "
                               "work on this machine")
    target = target_hosts(sources, local, limit, inventory.extra_vars, inventory.remote_user)
    for skipped in target.skipped:
        click.echo(f"warning: {skipped}", err=True)
    return target


def print_hosts(target: Target) -> NoReturn:
    """--list-hosts of a command without a playbook: `ansible PATTERN --list-hosts`'s lines; nothing contacted."""
    click.echo("\n".join(listing.host_lines([host.name for host in target.hosts])))
    sys.exit(0)


def playbook_options(tags: bool):
    """--playbook and --templates, and what the playbook would do, listed as ansible-playbook lists it (with
    --list-hosts, which inventory_options declares): the run is then only read, nothing contacted. `tags`: the
    command takes -t/--tags and --skip-tags, and lists them (--list-tags)."""
    declared = [
        click.option("--playbook", default=None,
                     help="A playbook file, or a shipped one by name (site, gpu).  [default: site]"),
        click.option("--templates", type=click.Path(exists=True, file_okay=False),
                     help="Templates folder (default: shipped)."),
        click.option("--list-tasks", is_flag=True,
                     help="Print the tasks the run would do, as ansible-playbook does (each task's name is a tag "
                          "too); contact no host."),
    ]
    if tags:
        declared += [
            click.option("-t", "--tags", default="", help="Run only tasks with these tags (comma-separated)."),
            click.option("--skip-tags", default="", help="Skip tasks with these tags (comma-separated)."),
            click.option("--list-tags", is_flag=True, help="Print the tags of the tasks the run would do, as "
                         "ansible-playbook does (each task's name is a tag too); contact no host."),
        ]

    def decorate(func):
        @functools.wraps(func)
        def run_or_list(*args, list_hosts=False, list_tasks=False, list_tags=False, **kwargs):
            if list_hosts or list_tasks or list_tags:
                print_plays(kwargs, list_hosts, list_tasks, list_tags)
            return func(*args, **kwargs)
        run_or_list.plays = True  # type: ignore[attr-defined]
        return options(*declared)(run_or_list)
    return decorate


def print_plays(opts: dict, list_hosts: bool, list_tasks: bool, list_tags: bool) -> NoReturn:
    """--list-hosts, --list-tasks, --list-tags: the inventory and the playbook read and checked as for the run,
    the tasks --tags and --skip-tags select; nothing contacted."""
    target = select_hosts(opts["inventory"], opts["local"], opts["limit"])
    book = playbook_file(opts["playbook"])
    tasks = select_tasks(load_playbook(book, templates_dir(opts["templates"])), _split(opts.get("tags", "")),
                         _split(opts.get("skip_tags", "")), str(book))
    hosts = [host.name for host in target.hosts] if list_hosts else None
    click.echo("\n".join(listing.play_lines(book, hosts, tasks, list_tasks, list_tags)))
    sys.exit(0)


def ssh_options(opts: dict, connect_timeout: float = 10) -> SSHOptions:
    return SSHOptions(ssh_config=opts["ssh_config"], connect_timeout=connect_timeout,
                      accept_new_host_keys=opts["accept_new_host_keys"], identity_file=opts["identity_file"])


def run_progress(as_json: bool) -> Progress:
    """Progress on stderr: a live bar on a terminal, plain lines on a pipe; none with --json (stdout is then for
    a script, and the lock-wait notice still shows)."""
    return Progress(sys.stderr, live=sys.stderr.isatty(), enabled=not as_json)


COMMAND_ENTRY_POINTS = "provision.commands"  # the commands other packages add (`provision lab`), by name


class ProvisionGroup(click.Group):
    """Turns our input errors into clear messages and exit code 2, never a traceback. Commands of other packages
    (entry points in COMMAND_ENTRY_POINTS: `provision lab`) are loaded only when asked for (their help, or the
    command itself), so no other command imports them, and provision names none of them."""

    def list_commands(self, ctx):
        return sorted({*super().list_commands(ctx), *(point.name for point in entry_points(group=COMMAND_ENTRY_POINTS))})

    def get_command(self, ctx, name):
        command = super().get_command(ctx, name)
        if command is None:
            for point in entry_points(group=COMMAND_ENTRY_POINTS, name=name):
                return point.load()
        return command

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except InputError as exc:
            click.secho(f"Error: {len(exc.problems)} problem(s) found; no host was touched:", fg="red", err=True)
            for problem in exc.problems:
                click.echo(f"  {problem}", err=True)
            ctx.exit(EXIT_BAD_INPUT)
        except ProvisionError as exc:
            click.secho(f"Error: {exc}", fg="red", err=True)
            ctx.exit(EXIT_BAD_INPUT)


@click.group(cls=ProvisionGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="provision")
def main():
    """Provision and tune GPU training clusters over SSH.

    Commands read an Ansible inventory (YAML or INI); apply converges every
    host to it, idempotently: a second run changes nothing and says so.
    """


@main.command(epilog=EXIT_CODES_HELP)
@inventory_options
@check_option
@diff_option
@playbook_options(tags=True)
@ask_pass_option
@click.option("--lock-wait", type=click.FloatRange(0, 3600), default=60, show_default=True,
              help="Seconds to wait when another run holds a host's lock.")
@click.option("--log", "log_path", type=click.Path(), default=None,
              callback=output_file("--log", default_path, append=True, make_directory=True),
              help=f"Run log (JSON lines). [default: {default_path()}]")
@click.option("--keep-backups", type=click.IntRange(0, 100), default=3, show_default=True,
              help="Backups FILE.<time>~ kept per changed file (older ones are removed).")
@click.option("-v", "--verbose", is_flag=True, help="Every task and GPU, also those already as intended; and how "
              "many other roles' variables the inventory holds, left alone.")
@click.option("--accept-gpu-changes", is_flag=True,
              help="The GPUs differ from the last good run (a card replaced, removed or added) and that is intended: "
                   "record the new layout; `index:` overrides then follow the new numbering.")
@click.option("--accept-bmc-events", is_flag=True,
              help="The power and cooling failures the BMC logged are dealt with (a PSU replaced, its feed fixed): "
                   "record the BMC event log's newest entry; verify then judges only the entries after it.")
@click.option("--reboot", is_flag=True,
              help="Reboot the hosts whose installed driver waits for a boot (never this machine), wait for each "
                   "to come back, then apply them again.")
@click.option("--serial", type=click.IntRange(1, 10000), default=1, show_default=True,
              help="With --reboot: hosts rebooted at a time; one that does not come back stops the rollout.")
@click.option("--reboot-timeout", type=click.FloatRange(10, 7200), default=600, show_default=True,
              help="With --reboot: seconds a host has to go down and answer SSH again.")
@via_option("apply")
def apply(inventory, local, limit, forks, as_json, ssh_config, accept_new_host_keys, connect_timeout,
          identity_file, check, show_diff, playbook, templates, tags, skip_tags, ask_sudo_pass, lock_wait, log_path,
          keep_backups, verbose, accept_gpu_changes, accept_bmc_events, reboot, serial, reboot_timeout, via):
    """Converge hosts to the INVENTORY: driver, persistence, power limits and clocks, NCCL, Slurm, torchrun.

    A driver installed or changed loads at the next boot: the host is
    reported as "reboot pending" until then. --reboot reboots those hosts,
    --serial N at a time (never this machine), and applies them again.

    Each host records its GPUs (index, UUID, bus id) at a good run. When
    they differ later (one fell off the bus, was replaced or renumbered), the
    host fails until the GPU is back or --accept-gpu-changes; an `index:`
    override is never moved onto another card, and every card present keeps
    its group's values and the overrides that name it.

    The first Ctrl-C or SIGTERM lets the changes in flight finish and starts
    nothing new (exit 130 or 143); a second abandons them. A lock a lost run
    left on a host is taken over when its run is gone (see `unlock`).

    --via slurm: one srun on the controller runs `provision apply --local`
    on each compute node that takes a job, with the inventory on stdin;
    slurm-config and munge-key need the other hosts' facts and are left
    to a run over SSH (they show as skipped). Drained, down or allocated
    nodes and the controller itself are applied over SSH.
    """
    target = select_hosts(inventory, local, limit)
    flags = frozenset(name for name, given in (("accept_gpu_changes", accept_gpu_changes),
                                               ("accept_bmc_events", accept_bmc_events)) if given)
    via_slurm = apply_arguments(check, tags, skip_tags, playbook, templates, lock_wait, keep_backups,
                                flags, reboot, local) if via == "slurm" else None
    if verbose and target.ignored:
        click.echo(f"{len(target.ignored)} other roles' variables in the inventory, left alone "
                   "(provision inventory -v names them)", err=True)
    target.hosts = [replace(h, flags=flags) for h in target.hosts]
    book = playbook_file(playbook)
    loaded = load_playbook(book, templates_dir(templates))
    tasks = select_tasks(loaded, _split(tags), _split(skip_tags), str(book))
    if accept_bmc_events:
        tasks = with_bmc_record(tasks)
    for warning in unapplied_blocks(loaded, target.hosts, book.name):
        click.secho(warning, fg="yellow", err=True)
    password = click.prompt("sudo password", hide_input=True, err=True) if ask_sudo_pass else None
    ssh = SSHOptions(ssh_config=ssh_config, connect_timeout=connect_timeout,
                     accept_new_host_keys=accept_new_host_keys, identity_file=identity_file)
    command = "apply --check" if check else "apply"
    progress = run_progress(as_json)
    options = RunOptions(check=check, forks=forks, lock_wait=lock_wait, sudo_password=password, command=command,
                         progress=progress, notice=progress.notice, keep_backups=keep_backups, local=local)
    log = RunLog(Path(log_path), command, target.inventory_path, option="--log")
    try:
        applied = apply_command(target, tasks, options, ssh, log, reboot, serial, reboot_timeout, via_slurm)
    finally:
        progress.close()
    results, outcomes, after = applied.results, applied.reboots, applied.after
    final, stopped = applied.final, applied.stopped
    if as_json:
        data = to_json(results, check, stopped)
        if reboot:
            data |= {"reboots": [asdict(o) | {"seconds": o.seconds} for o in outcomes],
                     "after_reboot": to_json(after, False)["hosts"], "exit_code": exit_code(final, check, stopped)}
        click.echo(json.dumps(data, indent=2, default=str))
    else:
        if outcomes:
            click.echo(click.style("Before the reboot:", bold=True))
        report.print_results(results, check, show_diff, verbose, stopped)
        if outcomes:
            report.print_reboots(outcomes, serial)
        if after:
            click.echo(click.style("\nAfter the reboot:", bold=True))
            report.print_results(after, False, show_diff, verbose)
    exit_with(exit_code(final, check, stopped), [log.unwritten])


@main.command(epilog="""\b
Exit codes: 0 every host was read; 2 bad input; 4 some host was unreachable.""")
@inventory_options
def facts(inventory, local, limit, forks, as_json, ssh_config, accept_new_host_keys, connect_timeout, identity_file):
    """Print what each host is now: system, the interfaces NCCL will use, driver, GPUs (read-only)."""
    target = select_hosts(inventory, local, limit)
    ssh = SSHOptions(ssh_config=ssh_config, connect_timeout=connect_timeout,
                     accept_new_host_keys=accept_new_host_keys, identity_file=identity_file)
    progress = run_progress(as_json)
    try:
        from provision.commands import facts as facts_command
        states = facts_command.read(target, RunOptions(forks=forks, command="facts", progress=progress,
                                                       reading="facts"), ssh)
    finally:
        progress.close()
    said = facts_command.nccl_said(states)
    if as_json:
        data = {s.host.name: ({**facts_command.facts_json(s.facts), "nccl": said[s.host.name]} if s.facts
                              else {"unreachable": s.result.message}) for s in states}
        click.echo(json.dumps(data, indent=2, default=str))
    else:
        for s in states:
            report.print_facts(s.host.name, s.facts, s.result.message, facts_command.shown(s))
    sys.exit(exit_code([s.result for s in states]))


@main.command()
@inventory_options
@click.option("--force", is_flag=True, help="Also remove a lock whose run is still running on this machine.")
def unlock(inventory, local, limit, forks, as_json, ssh_config, accept_new_host_keys, connect_timeout, identity_file,
           force):
    """Remove the host lock a run left behind, saying whose it was.

    apply takes over a stale lock on its own: one whose run was on this
    machine and is gone, or whose lease expired (its run stopped renewing
    it). This is for the rest: a lock another machine's run left less than
    a lease ago, or one written by an older provision.

    \b
    Exit codes: 0 no lock is left on the selected hosts; 1 a lock was left
    alone (a live run holds it); 2 bad input; 4 some host was unreachable.
    """
    from provision.core.hostlock import unlock_hosts

    target = select_hosts(inventory, local, limit)
    ssh = SSHOptions(ssh_config=ssh_config, connect_timeout=connect_timeout,
                     accept_new_host_keys=accept_new_host_keys, identity_file=identity_file)
    done = unlock_hosts(target.hosts, connector(local, ssh), force, forks)
    if as_json:
        click.echo(json.dumps([{"host": h, "status": status, "said": said} for h, status, said in done], indent=2))
    else:
        width = max(len(h) for h, _, _ in done)
        for host, status, said in done:
            words = f"{' ' * (12 - len(status))} {said}" if said else ""
            click.echo(f"{host:<{width}}  {click.style(status, fg=LOCK_COLORS[status])}{words}")
    statuses = {status for _, status, _ in done}
    sys.exit((1 if "left alone" in statuses else 0) | (4 if "unreachable" in statuses else 0))


LOCK_COLORS = {"no lock": "green", "removed": "yellow", "left alone": "red", "unreachable": "red"}


@main.command()
@inventory_options
@playbook_options(tags=False)
@click.option("--junitxml", type=click.Path(), callback=output_file("--junitxml", make_directory=True),
              help="Also write the results as JUnit XML (for CI).")
@click.option("--drain", is_flag=True, help="Drain failed Slurm compute nodes, the reason starting 'provision-verify:'.")
@click.option("--resume", is_flag=True, help="Resume the Slurm nodes verify drained that now pass (no other drain).")
@click.option("--prometheus", type=click.Path(), metavar="FILE", callback=output_file("--prometheus"),
              help="Also write the results as node_exporter textfile metrics, atomically (name it *.prom, in the "
                   "collector's directory).")
@click.option("-v", "--verbose", is_flag=True, help="Every check: the consequences' own words, and the checks that "
              "passed or did not apply, and why.")
@click.option("--active", is_flag=True, help="Also load every GPU for --duration and judge the node under load "
              "(refuses a node with GPU processes or Slurm jobs; changes no setting).")
@click.option("--duration", type=click.FloatRange(5, 3600), default=60, show_default=True, metavar="SECONDS",
              help="How long --active loads each node.")
@via_option("verify")
def verify(inventory, local, limit, forks, as_json, ssh_config, accept_new_host_keys, connect_timeout, identity_file,
           playbook, templates, junitxml, drain, resume, prometheus, verbose, active, duration, via):
    """Check every host is as the INVENTORY intends and healthy; change nothing.

    Each host is read once (the facts batch of apply); then the shipped
    checks run: the driver answers, the GPUs of the last good run are all
    there and readable, PCIe links at full width and speed, no Xid or PCIe
    error in the kernel log since boot, no uncorrectable memory error or
    pending repair, no clocks held down by heat or power, and every task's
    state (persistence, power, clocks, boot file and unit, managed files) is
    as intended.

    One cause, one finding: a check that fails only because of another
    finding (a GPU off the bus fails nvidia-smi's exit code, the layout,
    the Xid log and the tasks that use it) is listed under it.

    With --active, every GPU of each host is loaded for --duration first
    (provision's load program with torch, provision_active.load_command, or dcgmi diag
    with provision_active.dcgm_diag), sampled at 10 Hz, and the host judged as the load
    left it: a GPU lost, power past the supplies' budget, the power brake,
    heat, clocks below those set, a PCIe link trained down, a GPU slower than
    its peers, kernel errors during the load. Then iperf3 on every port NCCL
    uses, in a ring over each training group, and the all-reduce through the
    group's torchrun wrapper: within each node, across the group, and
    pairwise along a ring when the group falls short. A node with GPU
    processes or Slurm jobs (other than the job verify runs in) is left alone.

    --via slurm: one srun on the controller runs `provision verify --local`
    on each compute node that takes a job, with the inventory on stdin (with
    --active: each node's load and its own all-reduce, as the sbatch script
    runs them; the group's all-reduce and iperf3 ring need a run over SSH).
    The other hosts are verified over SSH.

    A node --active did not load (no load program, GPU processes or jobs
    on it, lost, stopped) is "not tested", never a pass, with why; so is one
    whose ports or all-reduce did not run. The first Ctrl-C or SIGTERM stops
    every node's load, judges what was measured and prints the verdicts
    (exit 130 or 143); a second abandons the run at once.

    \b
    Exit codes: 0 every host passed; 1 some check failed; 2 bad input;
    4 some host was unreachable (5 = both); 32 the --junitxml or
    --prometheus file could not be written (the verdicts shown stand);
    64 --active: some node, port or all-reduce was not tested;
    130, 143 stopped by Ctrl-C (SIGINT) or SIGTERM.
    """
    from provision.core.localfiles import not_written
    from provision.output import prometheus as prometheus_file, verify_json

    target = select_hosts(inventory, local, limit)
    via_slurm = verify_arguments(playbook, templates, local, drain, resume, duration if active else None,
                                 junitxml) if via == "slurm" else None
    tasks = load_playbook(playbook_file(playbook), templates_dir(templates))
    ssh = SSHOptions(ssh_config=ssh_config, connect_timeout=connect_timeout,
                     accept_new_host_keys=accept_new_host_keys, identity_file=identity_file)
    progress = run_progress(as_json)
    options = RunOptions(forks=forks, command="verify", progress=progress, reading="verify", local=local,
                         notice=progress.notice)
    from provision.commands.verify import exit_code as verify_exit_code, verify as verify_command
    try:
        verdicts, done, unwritten, stopped = verify_command(target, tasks, options, ssh, junitxml, drain, resume,
                                                            duration if active else None, via_slurm)
    finally:
        progress.close()
    if prometheus:
        unwritten.append(not_written("--prometheus", prometheus, lambda: prometheus_file.write(prometheus, verdicts)))
    if as_json:
        click.echo(json.dumps(verify_json.to_json(verdicts, done, stopped), indent=2))
    else:
        report.print_verdicts(verdicts, verbose, stopped)
        for line in done:
            click.echo(f"{line['host']}: {line['said']}")
    exit_with(verify_exit_code(verdicts, stopped), unwritten)


# --- ad-hoc commands: one setting, now and in the boot file ------------------------------------------

def run_adhoc(command: str, change: dict, option: str, opts: dict) -> None:
    """Plan and apply one ad-hoc change like `apply` does (commands/adhoc.py); exits with apply's codes."""
    inventory, target = adhoc_target(opts)
    password = click.prompt("sudo password", hide_input=True, err=True) if opts["ask_sudo_pass"] else None
    check, as_json = opts["check"], opts["as_json"]
    command += " --check" if check else ""
    progress = run_progress(as_json)
    options = RunOptions(check=check, forks=opts["forks"], sudo_password=password, command=command,
                         progress=progress, notice=progress.notice)
    try:
        from provision.commands import adhoc as adhoc_command
        results, stopped, warnings, unwritten = adhoc_command.adhoc(target, change, option, opts["gpu"],
                                                                    bool(inventory), options, ssh_options(opts))
    finally:
        progress.close()
    if as_json:
        click.echo(json.dumps(to_json(results, check, stopped) | {"warnings": warnings}, indent=2, default=str))
    else:
        report.print_results(results, check, False, stopped_by=stopped)
    for warning in warnings:
        click.secho(f"Warning: {warning}", fg="yellow", err=True)
    exit_with(exit_code(results, check, stopped), [unwritten])


@main.command(epilog=ADHOC_EXIT_CODES_HELP + """

With --list: 1 some host has no GPU nvidia-smi can read.""")
@adhoc_options
@click.option("--mem", type=click.IntRange(min=1), help="Memory clock, MHz (with --sm: an application-clock pair).")
@click.option("--sm", help="Graphics clock, MHz; with --locked MIN,MAX or one value.")
@click.option("--nearest", is_flag=True, help="Use the nearest supported pair instead of refusing.")
@click.option("--locked", is_flag=True, help="Lock clocks (-lgc/-lmc; Hopper memory: -lmcd) instead: GeForce cards.")
@click.option("--reset", is_flag=True, help="Back to the driver's defaults (-rac, and -rgc/-rmc where locked).")
@click.option("--list", "list_pairs", is_flag=True, help="Show the supported clocks per GPU model, compact.")
def clocks(mem, sm, nearest, locked, reset, list_pairs, **opts):
    """Set GPU clocks now and at every boot: application clocks, or --locked.

    \b
      provision clocks --mem 877 --sm 1005      # the V100 fix: -ac 877,1005
      provision clocks --locked --sm 210,1695   # GeForce: lock graphics clocks
      provision clocks --reset -i inventories/basement.yaml -l v100
      provision clocks --list
    """
    if list_pairs:
        return list_clocks(opts)
    if sum([reset, mem is not None or sm is not None]) != 1:
        raise click.UsageError("give --mem and --sm (or --locked --sm/--mem), --reset, or --list")
    if reset:
        change = {"clocks": "default", "locked_clocks": "default"}
    elif locked:
        change = {"locked_clocks": {k: _mhz_range(v, f"--{k}") for k, v in (("sm", sm), ("mem", mem)) if v}}
    else:
        if mem is None or sm is None or not str(sm).isdigit():
            raise click.UsageError("application clocks are a pair: --mem MHz --sm MHz (see --list)")
        change = {"clocks": {"mem": mem, "sm": int(sm), "nearest": nearest}}
    run_adhoc("clocks", change, "--sm/--mem", opts)


def _mhz_range(value, option: str) -> list[int]:
    try:
        numbers = [int(v) for v in str(value).split(",")]
    except ValueError:
        raise click.BadParameter(f"{value!r}: MHz as MIN,MAX or one value", param_hint=option) from None
    if len(numbers) > 2 or numbers[0] > numbers[-1]:
        raise click.BadParameter(f"{value!r}: MHz as MIN,MAX (MIN <= MAX) or one value", param_hint=option)
    return numbers * 2 if len(numbers) == 1 else numbers


def adhoc_target(opts: dict) -> tuple[InventoryArgs, Target]:
    """An ad-hoc command's inventory (-i, else this machine) and the hosts it selects; --list-hosts prints them."""
    inventory = InventoryArgs(opts["inventory"], remote_user=opts["remote_user"])
    target = select_hosts(inventory, not inventory, opts["limit"])
    if opts["list_hosts"]:
        print_hosts(target)
    return inventory, target


def list_clocks(opts: dict) -> None:
    _, target = adhoc_target(opts)
    from provision.capabilities.gpu.clock_models import clock_models
    from provision.commands import adhoc as adhoc_command
    states = adhoc_command.read_gpus(target, RunOptions(forks=opts["forks"], command="clocks --list"),
                                     ssh_options(opts))
    models = clock_models([s.facts for s in states if s.facts])
    unusable = {s.host.name: s.facts.nvidia.message if s.facts else s.result.message
                for s in states if not s.facts or s.facts.nvidia.state != "ok"}
    if opts["as_json"]:
        click.echo(json.dumps({"models": models, "hosts_without_gpus": unusable}, indent=2))
    else:
        report.print_clock_models(models)
        for host, why in unusable.items():
            click.secho(f"{host}: {why}", fg="red", err=True)
    sys.exit(exit_code([s.result for s in states]) | (1 if unusable else 0))


@main.command(epilog=ADHOC_EXIT_CODES_HELP)
@adhoc_options
@click.option("--watts", required=True, help='Power limit in W, within each GPU\'s min..max, or "default".')
def power(watts, **opts):
    """Set GPU power limits now and at every boot (nvidia-smi -pl)."""
    try:
        value = watts if watts == "default" else (int(watts) if watts.isdigit() else float(watts))
    except ValueError:
        raise click.BadParameter(f"{watts!r}: watts (a number) or default", param_hint="--watts") from None
    run_adhoc("power", {"power_limit": value}, "--watts", opts)


@main.command(epilog=ADHOC_EXIT_CODES_HELP)
@adhoc_options
@click.argument("state", type=click.Choice(["on", "off"]))
def persistence(state, **opts):
    """Turn persistence mode on or off now and at every boot."""
    run_adhoc("persistence", {"persistence": state == "on"}, "STATE", opts)


def _split(text: str) -> set[str]:
    return {t.strip() for t in text.split(",") if t.strip()}


def inventory_and_group(args: tuple[str, ...], inventory_option: tuple[str, ...],
                        graph: bool) -> tuple[tuple[str, ...], str | None]:
    """`provision inventory`'s words: its sources and the GROUP --graph starts at. ansible-inventory's one
    positional is the GROUP; provision's first is the INVENTORY. So with -i, a positional is the GROUP, as
    ansible-inventory reads it; without, INVENTORY [GROUP], and with --graph one word that names no file and
    no host list (a,b) is the GROUP of the default inventory (ANSIBLE_INVENTORY, ansible.cfg)."""
    if len(args) > (1 if inventory_option else 2):
        raise click.UsageError(f"got {' '.join(args)}: give [INVENTORY] [GROUP], or -i INVENTORY [GROUP]")
    if inventory_option:
        sources, group = inventory_option, (args[0] if args else None)
    elif len(args) == 2:
        sources, group = args[:1], args[1]
    elif args and graph and not Path(args[0]).exists() and "," not in args[0] and default_sources():
        sources, group = tuple(default_sources()), args[0]
    else:
        sources, group = args or tuple(default_sources()), None
    if group is not None and not graph:
        raise click.UsageError(f"a GROUP ({group!r}) goes with --graph, as for ansible-inventory; for --list or "
                               "--host, choose hosts with --limit")
    return sources, group


@main.command("inventory")
@click.argument("args", nargs=-1, metavar="[INVENTORY] [GROUP]")
@inventory_source_option
@click.option("--list", "as_list", is_flag=True, help="Every group and host, and the variables provision reads, as "
              "ansible-inventory --list prints them (JSON; YAML with --yaml).")
@click.option("-y", "--yaml", "as_yaml", is_flag=True, help="With --list: ansible-inventory --list --yaml's shape.")
@click.option("--graph", is_flag=True, help="The groups as a tree, with their hosts; from GROUP down where one is "
              "given (ansible-inventory --graph GROUP).")
@click.option("--host", "host_name", metavar="NAME", help="One host's effective settings, each with the file and "
              "group or host that set it.")
@limit_option
@click.option("--json", "as_json", is_flag=True, help="With --host: print JSON.")
@click.option("-e", "--extra-vars", multiple=True, help=EXTRA_VARS_HELP)
@click.option("-v", "--verbose", is_flag=True, help="Also name the other roles' variables left alone.")
def inventory_command(args, inventory_option, as_list, as_yaml, graph, host_name, limit, as_json, extra_vars, verbose):
    """Show what provision understood of the inventory, without connecting.

    \b
      provision inventory -i inventories/prod --graph
      provision inventory -i inventories/prod --graph gpu
      provision inventory -i inventories/prod --list --yaml
      provision inventory -i inventories/prod --host gpu01
    """
    from provision.commands import inventory as inventory_view

    if sum(map(bool, (as_list, graph, host_name))) != 1:
        raise click.UsageError("give one of --list, --graph or --host NAME")
    if as_yaml and not as_list:
        raise click.UsageError("--yaml goes with --list")
    sources, group = inventory_and_group(args, inventory_option, graph)
    if not sources:
        raise click.UsageError("give an INVENTORY (or -i INVENTORY, or inventory= in ansible.cfg)")
    inv = inventory_view.load(sources, extra_vars)
    hosts = inv.select(limit)
    if as_list and as_yaml:
        click.echo(inventory_view.yaml_text(inv, hosts), nl=False)
    elif as_list:
        click.echo(json.dumps(inventory_view.list_view(inv, hosts), indent=4, default=str))
    elif graph:
        click.echo("\n".join(inventory_view.graph_lines(inv, hosts, inventory_view.graph_group(inv, group or "all"))))
    elif as_json:
        click.echo(json.dumps({v.key: {"value": v.value, "from": v.origin}
                               for v in inventory_view.host_values(inventory_view.host(inv, host_name))},
                              indent=2, default=str))
    else:
        click.echo("\n".join(inventory_view.host_lines(inventory_view.host(inv, host_name), os.getcwd())))
    if verbose:
        click.echo(f"{len(inv.ignored)} other variables left alone: {', '.join(inv.ignored) or '-'}", err=True)
    for file in inv.unread:
        click.echo(f"not read (encrypted with Ansible Vault): {file}", err=True)
    for skipped in inv.skipped:
        click.echo(f"warning: {skipped}", err=True)


@main.command()
def demo():
    """Converge a simulated 4x V100 node on this machine, twice (no GPU, no root needed)."""
    from provision.commands.demo import run_demo

    sys.exit(run_demo(click.echo))


def _parameter_count(ctx, param, value):
    from provision.capabilities.nccl.advise import parse_count

    try:
        return parse_count(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


@main.command()
@click.argument("inventory", required=False)
@inventory_source_option
@limit_option
@click.option("--params", required=True, callback=_parameter_count,
              help="Model parameters: 25M, 25.6M, 1.5B, 7e9, 350k.")
@click.option("--bytes-per-grad", type=click.IntRange(1, 8), default=4, show_default=True,
              help="Bytes per gradient value the all-reduce sends (float32 4, bf16 2).")
@click.option("--step-ms", type=click.FloatRange(0, min_open=True),
              help="Ts, measured: one training step's compute on one GPU, ms. Without it: no efficiency.")
@click.option("--comm-ms", type=click.FloatRange(0, min_open=True),
              help="Tc, measured: one gradient all-reduce, ms. The what-ifs start from it instead of the estimate.")
@click.option("--nodes", type=click.IntRange(min=2), help="Nodes.  [default: the selected hosts]")
@click.option("--gpus-per-node", type=click.IntRange(1, 64), help="GPUs per node.  [default: provision_gpu.count, else 1]")
@click.option("--link-mbps", type=click.IntRange(min=1),
              help="Speed of one link, Mb/s (10 GbE: 10000).  [default: the lowest provision_nccl.expected_link_speed_mbps]")
@click.option("--links", type=click.IntRange(1, 64),
              help="Links per node NCCL spreads over.  [default: the names of an exact provision_nccl.socket_ifname, else 1]")
@click.option("--accumulate", type=click.IntRange(min=2), default=2, show_default=True,
              help="Steps per all-reduce in the gradient-accumulation what-if.")
@click.option("--gpu-memory-gib", type=click.FloatRange(0, min_open=True),
              help="Memory of one GPU, GiB: adds how many GPUs the model state needs.")
@json_option
def advise(inventory, inventory_option, limit, params, bytes_per_grad, step_ms, comm_ms, nodes, gpus_per_node, link_mbps, links,
           accumulate, gpu_memory_gib, as_json):
    """Estimate how well a data-parallel job scales over the network, and what would help.

    Reads the INVENTORY only (no host is contacted): nodes, GPUs, link
    speed and links per node; options override it. A ring all-reduce sends
    2(N-1)/N x the gradient bytes per step; eta = Ts/(Ts+Tc) (weak scaling,
    no overlap, bandwidth only). Then, added one by one: bf16 gradients,
    gradient accumulation, a second link per node.

    \b
      provision advise inventories/basement.yaml -l rtx3090 --params 25M \\
          --step-ms 234 --comm-ms 106
      provision advise --nodes 8 --gpus-per-node 8 --link-mbps 100000 \\
          --params 7B --gpu-memory-gib 80
    """
    from provision.capabilities.nccl.advise import Job, advise as estimate, network_from_hosts, report_lines, to_json

    sources = given_sources(inventory, inventory_option)
    if not sources and nodes is None:
        raise click.UsageError("give an INVENTORY file, or --nodes N (and --link-mbps)")
    hosts = select_hosts(InventoryArgs(sources), False, limit).hosts if sources else []
    try:
        network, notes = network_from_hosts(hosts, nodes, gpus_per_node, link_mbps, links)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    job = Job(params, network, bytes_per_grad, step_s=step_ms / 1000 if step_ms else None,
              comm_s=comm_ms / 1000 if comm_ms else None)
    advice = estimate(job, accumulate, gpu_memory_gib, notes)
    if as_json:
        click.echo(json.dumps(to_json(advice), indent=2))
    else:
        for line in report_lines(advice):
            click.echo(line)

