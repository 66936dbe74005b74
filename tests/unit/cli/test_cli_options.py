"""Every command that reaches hosts takes the same options (cli/options.py host_options), the commands that
change hosts the run's too, and each the run flags the capabilities declare for it (registry.RUN_FLAGS): read
from the click commands themselves, as --help and the docs' CLI reference show them."""

from __future__ import annotations

import click
import pytest

from provision.capabilities.registry import RUN_FLAGS
from provision.cli import main
from provision.commands.exit_codes import CHANGING, HOST_COMMANDS

SHARED = {"-i", "--inventory", "-e", "--extra-vars", "--local", "-l", "--limit", "--list-hosts", "-u", "--user",
          "-b", "--become", "-K", "--ask-become-pass", "--ask-sudo-pass", "-f", "--forks", "--json", "-v",
          "--verbose", "-F", "--ssh-config", "--accept-new-host-keys", "--connect-timeout", "--identity",
          "--private-key"}
RUN = {"-C", "--check", "-D", "--diff", "--lock-wait", "--log", "--keep-backups"}


def commands() -> dict[str, click.Command]:
    ctx = click.Context(main)
    return {name: main.get_command(ctx, name) for name in main.list_commands(ctx) if name != "lab"}


def options_of(command: click.Command) -> dict[str, click.Option]:
    return {opt: p for p in command.params if isinstance(p, click.Option) for opt in (*p.opts, *p.secondary_opts)}


@pytest.mark.parametrize("name", HOST_COMMANDS)
def test_every_host_command_takes_the_shared_options(name):
    command = commands()[name]
    given = set(options_of(command))
    assert SHARED <= given, sorted(SHARED - given)
    assert (RUN <= given) == (name in CHANGING), sorted(RUN - given)
    flags = {flag.option for flag in RUN_FLAGS if name in flag.commands}
    assert flags <= given and not ({flag.option for flag in RUN_FLAGS} - flags) & given
    arguments = [p.name for p in command.params if isinstance(p, click.Argument)]
    assert arguments[-1] == "inventory", arguments  # after the command's own: `persistence on INVENTORY`


def test_the_shared_options_are_declared_once():
    """The same help, type and default on every host command: one declaration, not copies that drift apart."""
    first = options_of(commands()["apply"])
    for name in HOST_COMMANDS:
        for opt, param in options_of(commands()[name]).items():
            if opt in SHARED | RUN:
                theirs = first[opt]
                assert (param.help, param.default, repr(param.type)) == (theirs.help, theirs.default,
                                                                         repr(theirs.type)), (name, opt)


def test_only_the_host_commands_reach_hosts():
    """A command that connects takes the shared options: a new one is a host command, or it has no --ssh-config."""
    reaching = {name for name, command in commands().items() if "--ssh-config" in options_of(command)}
    assert reaching == set(HOST_COMMANDS)
