"""provision inventory: what provision understood of the inventory, without connecting. --list has the JSON shape
of `ansible-inventory --list`, --graph its tree; --host shows each of a host's effective settings with the
file and group or host that set it (which Ansible cannot tell)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import yaml

from provision.capabilities.host import BLOCKS
from provision.core.errors import InputError, Problem
from provision.core.sshargs import CHECKED_KEYS, Hop
from provision.core.settings import did_you_mean
from provision.inventory.ansiblecfg import read_config
from provision.capabilities.host import VARIABLE_OF
from provision.inventory.build import leaves
from provision.inventory.load import load_inventory
from provision.inventory.model import Group, Host, Inventory

DEFAULT = "default"  # the origin of a value no level set


def load(sources: Sequence[str], extra_vars: Sequence[str] = ()) -> Inventory:
    return load_inventory(sources, read_config(), extra_vars)


def host(inventory: Inventory, name: str) -> Host:
    if name not in inventory.hosts:
        raise InputError([Problem(inventory.path, "", "--host", f"{name!r} is not a host of the inventory",
                                  did_you_mean(name, list(inventory.hosts)) or "provision inventory --graph lists them")])
    return inventory.hosts[name]


def list_view(inventory: Inventory, hosts: list[Host]) -> dict[str, Any]:
    """As `ansible-inventory --list` prints it: every group's direct hosts and children, and _meta.hostvars,
    holding the variables provision reads (under Ansible's names); other roles' variables are left out."""
    chosen = {h.name for h in hosts}
    data: dict[str, Any] = {"_meta": {"hostvars": {h.name: ansible_vars(h) for h in hosts}}}
    for name, group in inventory.groups.items():
        own = [h for h in group.hosts if h in chosen] if name != "all" else []  # all's: in its children
        body = {"hosts": own, "children": children(inventory, name)}
        body = {key: value for key, value in body.items() if value}
        if body:  # as Ansible prints it: a group with neither hosts nor children is left out
            data[name] = body
    return data


def children(inventory: Inventory, group: str) -> list[str]:
    """A group's children in the order written; `all` starts with "ungrouped", which Ansible always has."""
    names = list(_group(inventory, group).children)
    return ["ungrouped", *(n for n in names if n != "ungrouped")] if group == "all" else names


def ansible_vars(host: Host) -> dict[str, Any]:
    """The variables provision reads, as written; ansible_group_priority is a group's, never a host's (Ansible)."""
    return {key: value for key, value in host.vars.items() if key != "ansible_group_priority"}


def yaml_text(inventory: Inventory, hosts: list[Host]) -> str:
    """`ansible-inventory --list --yaml`: the groups nested from all, as its yaml_inventory() builds them, dumped
    with sorted keys as its dumper does."""
    return yaml.safe_dump(yaml_view(inventory, hosts), default_flow_style=False, allow_unicode=True)


def yaml_view(inventory: Inventory, hosts: list[Host]) -> dict[str, Any]:
    """Each group under its parent's `children`, with its own hosts; a host's variables at its first appearance
    and {} after, a group met again as {}; a group with neither hosts nor children left out."""
    chosen = {h.name: h for h in hosts}
    seen_hosts: set[str] = set()
    seen_groups: set[str] = set()

    def one(name: str) -> dict[str, Any]:
        kids: dict[str, Any] = {}
        for child in children(inventory, name):
            kids.update({child: {}} if child in seen_groups else one(child))
            seen_groups.add(child)  # after: a group inside itself is Ansible's error, not met here
        own = {}
        for host in (h for h in _group(inventory, name).hosts if h in chosen and name != "all"):
            own[host] = {} if host in seen_hosts else ansible_vars(chosen[host])
            seen_hosts.add(host)
        body = {key: value for key, value in (("children", kids), ("hosts", own)) if value}
        return {name: body} if body else {}

    return one("all")


def graph_group(inventory: Inventory, name: str) -> str:
    """--graph GROUP: a group of the inventory (all and ungrouped always are, as in Ansible)."""
    if name in inventory.groups or name in ("all", "ungrouped"):
        return name
    raise InputError([Problem(inventory.path, "", "--graph", f"{name!r} is not a group of the inventory",
                              did_you_mean(name, list(inventory.groups)) or "provision inventory --graph lists them")])


def graph_lines(inventory: Inventory, hosts: list[Host], group: str = "all", depth: int = 0) -> list[str]:
    """`ansible-inventory --graph`: @group, its children's trees, then its own hosts."""
    chosen = {h.name for h in hosts}
    lines = [f"{'  |' * (depth - 1)}{'  |--' if depth else ''}@{group}:"]
    for child in children(inventory, group):
        lines += graph_lines(inventory, hosts, child, depth + 1)
    if group != "all":  # as Ansible draws it: all's hosts are in its children (ungrouped at least)
        lines += [f"{'  |' * depth}  |--{h}" for h in _group(inventory, group).hosts if h in chosen]
    return lines


def _group(inventory: Inventory, name: str) -> Group:
    return inventory.groups.get(name) or Group(name, [], [], [], {})  # "ungrouped", where no host is


@dataclass
class Value:
    key: str  # dotted: provision_gpu.power_limit, or a connection setting: user, port, ...
    value: Any
    origin: str  # "FILE (group G)", "FILE (host H)", or "default"


def host_values(host: Host) -> list[Value]:
    """A host's connection settings and each value of its blocks (those it has), with where each came from."""
    values = [Value("groups", [g for g in host.groups if g != "all"], "")]
    reach = {"address": (host.address, "host"), "user": (host.user, "user"), "port": (host.port, "port"),
             "connection": (host.connection, "connection"), "become": (host.become, "become"),
             "identity_file": (host.identity_file, "identity_file"), "ssh_config": (host.ssh_config, "ssh_config")}
    for key, (value, setting) in reach.items():
        written = host.reached_by.get(setting, "")
        values.append(Value(key, value, f"{host.origins.get(written, DEFAULT)}{f' as {written}' if written else ''}"))
    for setting in ("become_user", "become_method"):
        if setting in host.reached_by:
            written = host.reached_by[setting]
            values.append(Value(setting, host.vars[written], f"{host.origins.get(written, DEFAULT)} as {written}"))
    values += [Value(key, host.vars[key], host.origins.get(key, DEFAULT)) for key in CHECKED_KEYS if key in host.vars]
    if host.ssh_args.proxy_jump:  # the bastion the ssh arguments name, hop by hop
        values.append(Value("bastion", " -> ".join(_hop(hop) for hop in host.ssh_args.proxy_jump),
                            "ssh arguments (-J / ProxyJump)"))
    for block in BLOCKS:
        settings = getattr(host.settings, block, None)
        data = settings if isinstance(settings, dict) else settings.model_dump() if settings is not None else {}
        values += [Value(key, value, host.origins.get(key, DEFAULT))
                   for key, value in leaves(data, f"{VARIABLE_OF[block]}.", keep_empty=True)]
    return values


def _hop(hop: Hop) -> str:
    return f"{hop.user + '@' if hop.user else ''}{hop.host}{f':{hop.port}' if hop.port else ''}"


def host_lines(host: Host, cwd: str) -> list[str]:
    """--host as a table: key, value, where it came from (paths under the current directory shortened)."""
    values = host_values(host)
    width = max(len(v.key) for v in values)
    lines = [f"{host.name}"]
    for v in values:
        origin = v.origin.removeprefix(cwd.rstrip("/") + "/")
        shown = ", ".join(v.value) if v.key == "groups" else "-" if v.value is None else v.value
        lines.append(f"  {v.key:<{width}}  {shown!s:<24}  {origin}".rstrip())
    return lines
