"""provision inventory: what provision understood of the inventory (commands/inventory.py), without connecting."""

from __future__ import annotations

import json
import os
from pathlib import Path

import click

from provision.cli.options import extra_vars_option, inventory_source_option, limit_option
from provision.commands.exit_codes import exit_help
from provision.commands.run import default_sources


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


@click.command("inventory", epilog=exit_help("inventory"))
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
@extra_vars_option
@click.option("-v", "--verbose", is_flag=True, help="Also name the other roles' variables left alone.")
def inventory(args: tuple[str, ...], inventory_option: tuple[str, ...], as_list: bool, as_yaml: bool, graph: bool,
              host_name: str | None, limit: str | None, as_json: bool, extra_vars: tuple[str, ...],
              verbose: bool) -> None:
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
    elif host_name and as_json:
        click.echo(json.dumps({v.key: {"value": v.value, "from": v.origin}
                               for v in inventory_view.host_values(inventory_view.host(inv, host_name))},
                              indent=2, default=str))
    elif host_name:
        click.echo("\n".join(inventory_view.host_lines(inventory_view.host(inv, host_name), os.getcwd())))
    if verbose:
        click.echo(f"{len(inv.ignored)} other variables left alone: {', '.join(inv.ignored) or '-'}", err=True)
    for file in inv.unread:
        click.echo(f"not read (encrypted with Ansible Vault): {file}", err=True)
    for skipped in inv.skipped:
        click.echo(f"warning: {skipped}", err=True)
