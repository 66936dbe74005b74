"""The inventory as provision holds it: hosts (how to reach each, its groups, its typed settings) and groups.
Reading one is load.py's (a format's reader, then build.py); choosing hosts (--limit) is select.py's."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Sequence

from provision.capabilities.host import HostSettings
from provision.core.errors import Problem
from provision.core.sshargs import SshArgs
from provision.inventory.select import select


@dataclass
class Host:
    name: str
    address: str  # ansible_host or the name
    user: str | None
    port: int | None
    connection: str  # "ssh" | "local"
    ssh_config: str | None  # an ssh_config file for this host (absolute; written relative to the inventory)
    become: bool  # run privileged commands as root (sudo when the login user is not root)
    groups: list[str]  # every group the host is in (transitively), outermost first, incl. "all"
    vars: dict[str, Any]  # merged variables provision reads, as written: provision_* and ansible_*
    settings: HostSettings
    # The run flags the command line set for this run (capabilities/registry.py RUN_FLAGS, by name), which the
    # capabilities' tasks read: "accept_gpu_changes", ...
    flags: frozenset[str] = frozenset()
    identity_file: str | None = None  # ansible_ssh_private_key_file (absolute; written relative to the inventory)
    # Each of `vars`' values (dotted into blocks: provision_gpu.power_limit) -> "FILE (group G)" that set it: the builder
    # leaves the function that works it out, since only `provision inventory --host` asks.
    origins_of: Callable[[], dict[str, str]] = dict
    # Why provision cannot work on this host (a password, a winrm connection): an error only if a run selects it.
    refused: list[Problem] = field(default_factory=list)
    ssh_args: SshArgs = field(default_factory=SshArgs)  # ansible_ssh_args, _common_args, _extra_args, as read
    reached_by: dict[str, str] = field(default_factory=dict)  # connection setting -> the variable that gave it
    written_in: str = ""  # the file that first names the host: a problem about the host names it

    @property
    def where(self) -> str:
        """How a problem names the host."""
        return where_host(self.name)

    @property
    def origins(self) -> dict[str, str]:
        return self.origins_of()


@dataclass
class Group:
    name: str
    hosts: list[str]  # written directly in this group
    children: list[str]
    parents: list[str]
    vars: dict[str, Any]


@dataclass
class Document:
    """One inventory file's content (or a script's output) in the YAML inventory's shape, as its reader made it."""

    file: str
    data: Any
    base_dir: Path  # the source's directory, as given: relative paths start here; group_vars/, host_vars/ are here
    vars_dir: bool = True  # False for a host list given as -i "a,b,": no directory of its own


@dataclass
class Inventory:
    path: str  # as the user names it: the file, or "-i a -i b" for several sources (for "what to do" lines)
    hosts: dict[str, Host]  # file order
    groups: dict[str, Group]
    ignored: list[str] = field(default_factory=list)  # other roles' variables, by name: not provision's to read
    unread: list[str] = field(default_factory=list)  # variables files encrypted whole with Ansible Vault
    skipped: list[str] = field(default_factory=list)  # what was read past with a warning, as Ansible does
    sources: list[str] = field(default_factory=list)  # the -i sources, in order

    def refusals(self, hosts: list[Host]) -> list[Problem]:
        """What stops a run on these hosts: each problem once, naming the selected hosts it concerns."""
        concerned: dict[Problem, list[str]] = {}
        for host in hosts:
            for problem in host.refused:
                concerned.setdefault(problem, []).append(host.name)
        return [replace(problem, message=f"{problem.message} (selected: {_names(names)})",
                        hint="; ".join(filter(None, [problem.hint, _leave_out(problem.where)])))
                for problem, names in concerned.items()]

    def select(self, limit: str | None) -> list[Host]:
        """The hosts --limit chooses, in file order (select.py)."""
        return select(self, limit)




@dataclass(frozen=True, slots=True)  # one per level: as many as hosts, in a large inventory
class Written:
    """The variables one place writes (a group's vars in one file, a variables file), as read and validated there."""

    file: str
    where: str  # "all", "group gpu", "host node1"
    variables: dict[str, Any]


@dataclass(frozen=True)
class Built:
    """What a rule across hosts (a capability's rules.py, listed in registry.HOST_RULES) reads: every host with
    its settings, every group, and the variables as each place writes them."""

    hosts: dict[str, Host]
    groups: dict[str, Group]
    written: Sequence[Written]


HostRule = Callable[[Built], list[Problem]]  # a rule across hosts: what the hosts' blocks ask that others cannot give


def where_group(name: str) -> str:
    """How a problem names a group ("all" is just that)."""
    return "all" if name == "all" else f"group {name}"


def where_host(name: str) -> str:
    """How a problem names a host."""
    return f"host {name}"


def _names(names: list[str]) -> str:
    return ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")


def _leave_out(where: str) -> str:
    """--limit that leaves out the group or host where the problem is written ("group windows", "host db1")."""
    kind, _, name = where.partition(" ")
    return f"or leave {'its hosts' if kind == 'group' else 'it'} out: --limit 'all:!{name}'" if name else ""
