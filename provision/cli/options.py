"""The options every command that reaches hosts shares, declared once: `host_options` gives each of them the same
ones (the inventory, the hosts chosen, how to reach them, how to print) and hands the command one HostArgs, the
SSH options built there; a command that changes hosts (apply, clocks, power, persistence) also takes the run's
own (RunArgs), and the run flags the capabilities declare for it (`flag_options`). A command adds its own options
on top."""

from __future__ import annotations

import functools
import os
import sys
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Callable, NoReturn, TypeVar

import click

from provision.capabilities.registry import RUN_FLAGS
from provision.commands import listing
from provision.commands.run import Target, default_sources, select_hosts as target_hosts
from provision.core.connection import SSHOptions
from provision.core.errors import InputError, Problem
from provision.core.localfiles import check_writable, not_a_file
from provision.core.run import RunOptions
from provision.core.runlog import RunLog, default_path
from provision.core.sshargs import ssh_config_problem
from provision.output.progress import Progress

F = TypeVar("F", bound=Callable[..., Any])

EXTRA_VARS_HELP = ("Variables over every host's, as ansible-playbook -e takes them: key=value, a YAML or JSON "
                   "mapping, or @FILE; repeatable. provision's blocks merge key by key.")
INVENTORY_HELP = ("The inventory, as for ansible-playbook -i: a file (YAML, INI, an executable script), a directory, "
                  "or host1,host2, ; repeatable. group_vars/ and host_vars/ beside it are read. Default: "
                  "ANSIBLE_INVENTORY, ansible.cfg's inventory, /etc/ansible/hosts; for the ad-hoc GPU commands "
                  "(clocks, power, persistence, ecc, compute-mode, mig), this machine.")


def options(*declared: Callable[[F], F]) -> Callable[[F], F]:
    """Several click options as one decorator, listed in --help in the order given."""
    def decorate(func: F) -> F:
        for option in reversed(declared):
            func = option(func)
        return func
    return decorate


def output_file(option: str, default: Callable[[], Path] | None = None, **how: bool) -> Callable[..., str | None]:
    """The callback of an option naming a file to write: checked as it is parsed, before the inventory is read
    (core/localfiles.py check_writable)."""
    def check(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
        path = default() if value is None and default else value
        return None if path is None else str(check_writable(path, option, **how))
    return check


def key_file(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """--identity: a regular file (a FIFO would block the connection that reads it, a device never end)."""
    mode = os.stat(value).st_mode if value is not None else None
    if kind := not_a_file(mode):
        raise InputError([Problem("command line", "", "--identity", f"{value!r} is {kind}, not a file",
                                  "name the SSH private key file itself")])
    return value


def ssh_config_file(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """--ssh-config: read as it is parsed (core/sshargs.py); a file that is no ssh_config is bad input."""
    if value is not None and (problem := ssh_config_problem(value, "command line", "", "--ssh-config")):
        raise InputError([problem])
    return value


# Options also taken by the commands that read an inventory without reaching its hosts (inventory, advise).
inventory_source_option = click.option("-i", "--inventory", "inventory_option", multiple=True, help=INVENTORY_HELP)
limit_option = click.option("-l", "--limit", help="Hosts or groups as Ansible's patterns: a,b (or a:b), globs, "
                            "~regex, !exclude, &intersect, group[0] or group[1:3], @file of patterns.")
json_option = click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON on stdout.")
extra_vars_option = click.option("-e", "--extra-vars", multiple=True, help=EXTRA_VARS_HELP)

# Every command that reaches hosts: ansible-playbook's habits and the SSH options, in --help's order.
HOST_OPTIONS = (
    click.argument("inventory", required=False),
    inventory_source_option,
    extra_vars_option,
    click.option("--local", is_flag=True,
                 help="Work on this machine, no SSH (with an INVENTORY: this machine as its selected hosts)."),
    limit_option,
    click.option("--list-hosts", is_flag=True,
                 help="Print the hosts the run would select, as ansible-playbook does; contact none."),
    click.option("-u", "--user", "remote_user", metavar="REMOTE_USER",
                 help="Connect as this user, as ansible-playbook -u: over ansible.cfg's remote_user, under the "
                      "inventory's ansible_user or ansible_ssh_user."),
    click.option("-b", "--become", is_flag=True, expose_value=False,
                 help="Accepted for ansible-playbook's habit: provision becomes root for what needs it anyway (sudo "
                      "where the login user is not root); an inventory's ansible_become: false still wins, as in "
                      "Ansible."),
    click.option("-K", "--ask-become-pass", "--ask-sudo-pass", "ask_sudo_pass", is_flag=True,
                 help="Ask once for the sudo password (never stored or shown)."),
    click.option("-f", "--forks", type=click.IntRange(1, 512), default=16, show_default=True,
                 help="Hosts worked on in parallel."),
    json_option,
    click.option("-v", "--verbose", is_flag=True,
                 help="Say more: every task, check and GPU, also those as intended; and how many other roles' "
                      "variables the inventory holds, left alone."),
    click.option("-F", "--ssh-config", type=click.Path(), callback=ssh_config_file,
                 help="An ssh_config file for every host, instead of the inventory's ssh_config or ~/.ssh/config."),
    click.option("--accept-new-host-keys", is_flag=True,
                 help="Trust and record unknown SSH host keys (like StrictHostKeyChecking=accept-new). Changed keys "
                      "are always refused."),
    click.option("--connect-timeout", type=click.FloatRange(1, 600), default=10, show_default=True,
                 help="Seconds to wait for an SSH connection."),
    click.option("--identity", "--private-key", "identity_file", type=click.Path(exists=True, dir_okay=False),
                 callback=key_file, help="SSH private key file."),
)

# The commands that change hosts, on top: the run's own options.
RUN_OPTIONS = (
    click.option("-C", "--check", is_flag=True, help="Show what would change; touch nothing."),
    click.option("-D", "--diff", "show_diff", is_flag=True, help="Show file and value changes."),
    click.option("--lock-wait", type=click.FloatRange(0, 3600), default=60, show_default=True,
                 help="Seconds to wait when another run holds a host's lock."),
    click.option("--log", "log_path", type=click.Path(), default=None,
                 callback=output_file("--log", default_path, append=True, make_directory=True),
                 help=f"Run log (JSON lines). [default: {default_path()}]"),
    click.option("--keep-backups", type=click.IntRange(0, 100), default=3, show_default=True,
                 help="Backups FILE.<time>~ kept per changed file (older ones are removed)."),
)


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


@dataclass(frozen=True)
class HostArgs:
    """What host_options gives a command: which hosts, how to reach them, how to print."""

    inventory: InventoryArgs
    local: bool  # --local
    limit: str | None
    forks: int
    as_json: bool
    verbose: bool
    ask_sudo_pass: bool
    ssh: SSHOptions
    here_by_default: bool = False  # no inventory given: this machine (the ad-hoc commands), not ansible.cfg's

    def target(self) -> Target:
        """The hosts the command works on; with -v, how many other roles' variables their inventory holds."""
        target = select_hosts(self.inventory, self.local or (self.here_by_default and not self.inventory),
                              self.limit)
        if self.verbose and target.ignored:
            click.echo(f"{len(target.ignored)} other roles' variables in the inventory, left alone "
                       "(provision inventory -v names them)", err=True)
        return target

    def progress(self, applying: bool = False) -> Progress:
        """Progress on stderr: a live bar on a terminal, plain lines on a pipe; none with --json (stdout is then
        for a script, and the lock-wait notice still shows). applying: the run changes the hosts it reads."""
        return Progress(sys.stderr, live=sys.stderr.isatty(), enabled=not self.as_json, applying=applying)

    def run_options(self, target: Target, command: str, progress: Progress | None = None,
                    **more: Any) -> RunOptions:
        """The options of a run on the target's hosts: the sudo password asked here, once (-K)."""
        password = click.prompt("sudo password", hide_input=True, err=True) if self.ask_sudo_pass else None
        shown: dict[str, Any] = {"progress": progress, "notice": progress.notice} if progress else {}
        return RunOptions(forks=self.forks, command=command, sudo_password=password, local=target.local,
                          **shown, **more)


@dataclass(frozen=True)
class RunArgs:
    """What a command that changes hosts adds: --check, --diff, --lock-wait, --log, --keep-backups."""

    check: bool
    show_diff: bool
    lock_wait: float
    log_path: str
    keep_backups: int

    def log(self, command: str, target: Target) -> RunLog:
        return RunLog(Path(self.log_path), command, target.inventory_path, option="--log")


def host_options(applying: bool = False, here_by_default: bool = False) -> Callable[[F], F]:
    """The options every command that reaches hosts takes, given to it as `hosts` (HostArgs); applying: it changes
    them, and takes RunOptions's too, given as `run` (RunArgs). The inventory is the INVENTORY argument or
    -i/--inventory (Ansible's way, repeatable). --list-hosts prints the hosts and exits, but for a command with a
    playbook (plays_options), which lists them with their play."""
    def decorate(func: F) -> F:
        @functools.wraps(func)
        def with_hosts(*args: Any, inventory: str | None, inventory_option: tuple[str, ...],
                       extra_vars: tuple[str, ...], remote_user: str | None, local: bool, limit: str | None,
                       list_hosts: bool, ask_sudo_pass: bool, forks: int, as_json: bool, verbose: bool,
                       ssh_config: str | None, accept_new_host_keys: bool, connect_timeout: float,
                       identity_file: str | None, **kwargs: Any) -> Any:
            hosts = HostArgs(InventoryArgs(given_sources(inventory, inventory_option), extra_vars, remote_user),
                             local, limit, forks, as_json, verbose, ask_sudo_pass,
                             SSHOptions(ssh_config=ssh_config, connect_timeout=connect_timeout,
                                        accept_new_host_keys=accept_new_host_keys, identity_file=identity_file),
                             here_by_default)
            if applying:
                kwargs["run"] = RunArgs(**{field.name: kwargs.pop(field.name) for field in fields(RunArgs)})
            if getattr(func, "plays", False):
                kwargs["list_hosts"] = list_hosts
            elif list_hosts:
                print_hosts(hosts.target())
            return func(*args, hosts=hosts, **kwargs)

        decorated = options(*HOST_OPTIONS, *(RUN_OPTIONS if applying else ()))(with_hosts)
        # INVENTORY after the command's own arguments (`persistence on INVENTORY`): click reverses this list
        params = decorated.__click_params__  # type: ignore[attr-defined]
        params.insert(0, params.pop(next(i for i, p in enumerate(params) if p.name == "inventory")))
        return decorated  # type: ignore[return-value]
    return decorate


def flag_options(command: str) -> Callable[[F], F]:
    """The run flags the capabilities declare for `command` (capabilities/registry.py RUN_FLAGS), given to it as
    `flags`: the names of those set."""
    declared = [flag for flag in RUN_FLAGS if command in flag.commands]

    def decorate(func: F) -> F:
        @functools.wraps(func)
        def with_flags(*args: Any, **kwargs: Any) -> Any:
            flags = frozenset(flag.name for flag in declared if kwargs.pop(flag.name))
            return func(*args, flags=flags, **kwargs)

        return options(*(click.option(flag.option, flag.name, is_flag=True, help=flag.help) for flag in declared))(
            with_flags)  # type: ignore[return-value]
    return decorate
