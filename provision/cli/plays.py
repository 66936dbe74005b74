"""The options of the commands that run a playbook (apply, verify): --playbook, --templates, and what the run
would do listed as ansible-playbook lists it (--list-hosts, --list-tasks, --list-tags); then nothing is
contacted."""

from __future__ import annotations

import functools
from typing import Any, Callable, NoReturn

import click

from provision.cli.options import F, HostArgs, options
from provision.commands import listing
from provision.commands.playbook import selected_tasks

VIA_HELP = ("slurm: the Slurm compute nodes that take a job {verb} themselves, through one srun on their controller "
            "(provision on each node: provision_slurm.provision_command); the other hosts over SSH.")


def via_option(verb: str) -> Callable[[F], F]:
    """--via of apply and verify (commands/via_slurm.py)."""
    return click.option("--via", type=click.Choice(["ssh", "slurm"]), default="ssh", show_default=True,
                        help=VIA_HELP.format(verb=verb))


def plays_options(tags: bool) -> Callable[[F], F]:
    """--playbook and --templates, and the listings (with --list-hosts, which host_options declares). `tags`: the
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

    def decorate(func: F) -> F:
        @functools.wraps(func)
        def run_or_list(*args: Any, list_hosts: bool = False, list_tasks: bool = False, list_tags: bool = False,
                        **kwargs: Any) -> Any:
            if list_hosts or list_tasks or list_tags:
                print_plays(kwargs, list_hosts, list_tasks, list_tags)
            return func(*args, **kwargs)
        run_or_list.plays = True  # type: ignore[attr-defined]  # host_options passes --list-hosts on
        return options(*declared)(run_or_list)  # type: ignore[return-value]
    return decorate


def print_plays(opts: dict[str, Any], list_hosts: bool, list_tasks: bool, list_tags: bool) -> NoReturn:
    """--list-hosts, --list-tasks, --list-tags: the inventory and the playbook read and checked as for the run,
    the tasks --tags and --skip-tags select; nothing contacted."""
    hosts: HostArgs = opts["hosts"]
    target = hosts.target()
    book, _, tasks = selected_tasks(opts["playbook"], opts["templates"], opts.get("tags", ""),
                                    opts.get("skip_tags", ""))
    names = [host.name for host in target.hosts] if list_hosts else None
    click.echo("\n".join(listing.play_lines(book, names, tasks, list_tasks, list_tags)))
    raise SystemExit(0)
