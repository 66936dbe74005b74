"""What every command that works on hosts shares: the hosts chosen, how to reach them, the Engine built with
the capabilities' extensions, and a run that a first signal stops and a second abandons."""

from __future__ import annotations

import os
import signal
import sys
from dataclasses import dataclass, field, replace
from typing import Callable, Sequence

from provision.capabilities.registry import EXTENSIONS
from provision.core.connection import Connection, LocalConnection, SSHConnection, SSHOptions
from provision.core.errors import InputError, Problem
from provision.core.plan import Task
from provision.core.results import HostResult, exit_code
from provision.core.run import Engine, RunOptions
from provision.core.runlog import RunLog
from provision.core.stopping import Stop
from provision.core.sshargs import ssh_config_problem
from provision.inventory.ansiblecfg import read_config
from provision.inventory.model import Host
from provision.inventory.load import load_inventory, local_inventory


@dataclass
class Target:
    """The hosts a command works on: those --limit selects, and every host of the inventory."""

    inventory_path: str
    hosts: list[Host]
    everyone: list[Host]
    local: bool = False  # this machine, no SSH
    ignored: list[str] = field(default_factory=list)  # other roles' variables the inventory holds, left alone
    skipped: list[str] = field(default_factory=list)  # what the inventory's readers read past (warnings)

    def flag(self, flags: frozenset[str]) -> None:
        """A run's flags (RUN_FLAGS' names) on every selected host (Host.flags), for the tasks that read them."""
        self.hosts = [replace(host, flags=flags) for host in self.hosts]


def default_sources() -> list[str]:
    """The inventory when none is given: ANSIBLE_INVENTORY, ansible.cfg's, or /etc/ansible/hosts where it is."""
    return read_config().inventory


def select_hosts(sources: Sequence[str], local: bool, limit: str | None, extra_vars: Sequence[str] = (),
                 remote_user: str | None = None) -> Target:
    """The inventory's hosts (--limit), with ansible.cfg's connection defaults, -u and -e; or this machine (no
    inventory)."""
    inv = load_inventory(sources, read_config(), extra_vars, remote_user) if sources else local_inventory()
    hosts = inv.select(limit)
    refused = inv.refusals(hosts) + ([] if local else unreadable_ssh_configs(inv.path, hosts))
    if refused:
        raise InputError(refused)
    return Target(inv.path, hosts, list(inv.hosts.values()), local, inv.ignored, inv.skipped)


def unreadable_ssh_configs(inventory: str, hosts: list[Host]) -> list[Problem]:
    """The inventory's ssh_config files the hosts connect with that paramiko cannot read, each read once: found
    here, not as each host is connected to (an "internal error" that quoted the file's line)."""
    users: dict[str, list[str]] = {}
    for host in hosts:
        if host.ssh_config and host.connection != "local":
            users.setdefault(host.ssh_config, []).append(host.name)
    found = (ssh_config_problem(path, inventory, ("host " if len(names) == 1 else "hosts ") + _some(names),
                                "ssh_config") for path, names in users.items())
    return [problem for problem in found if problem]


def _some(names: list[str]) -> str:
    return ", ".join(names[:5]) + (f" (+{len(names) - 5} more)" if len(names) > 5 else "")


def connector(local: bool, ssh: SSHOptions) -> Callable[[Host], Connection]:
    """Connections per host; --ssh-config and --identity on the command line win over the inventory's (its
    ansible_ssh_*args' IdentityFile too); the host's other ssh args beat any ssh_config, as ssh's -o do."""
    def connect(host: Host) -> Connection:
        if local or host.connection == "local":
            return LocalConnection(host.name)
        options = ssh if ssh.ssh_config or not host.ssh_config else replace(ssh, ssh_config=host.ssh_config)
        options = replace(options, args=host.ssh_args if not ssh.identity_file else
                          replace(host.ssh_args, identity_files=()))
        if host.identity_file and not ssh.identity_file:
            options = replace(options, identity_file=host.identity_file)
        return SSHConnection(host.name, host.address, host.user, host.port, options)
    return connect


def engine_for(target: Target, tasks: list[Task], options: RunOptions, ssh: SSHOptions,
               log: RunLog | None = None, stop: Stop | None = None) -> Engine:
    return Engine(tasks, options, connector(target.local, ssh), EXTENSIONS, log, target.inventory_path,
                  target.everyone, stop)


def run_stoppable(engine: Engine, hosts: list[Host]) -> list[HostResult]:
    """engine.run, stoppable: a first Ctrl-C or SIGTERM finishes what is in flight and reports (engine.stop);
    a second abandons it and exits 130 or 143 at once."""
    try:
        with engine.stop.catching():
            return engine.run(hosts)
    except KeyboardInterrupt:  # run gave back the locks it could and closed the connections
        engine.options.notice("Abandoned: the changes in flight may be partly done; "
                              "run the same command again to read and converge them.")
        sys.stdout.flush()
        sys.stderr.flush()
        # At once: the workers still inside a command would otherwise be waited for at the interpreter's exit.
        os._exit(exit_code([], stopped_by=engine.stop.signum or signal.SIGINT))
