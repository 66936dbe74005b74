"""The `provision` command: the group, and each command from the module of its kind. The modules only parse and
print; what a command does is in provision/commands/.

    run.py         apply, facts, unlock          options.py  what every command that reaches hosts takes
    verify.py      verify                        plays.py    --playbook and the listings (apply, verify)
    adhoc.py       clocks, power, persistence    exits.py    how a command ends
                   ecc, compute-mode, mig
    inventory.py   inventory
    standalone.py  demo, advise (no host contacted)

Exit codes: provision/commands/exit_codes.py, which also writes each command's --help epilog."""

from __future__ import annotations

from importlib.metadata import entry_points
from typing import Any

import click

from provision import __version__
from provision.cli import adhoc, inventory, recover, run, standalone, verify
from provision.core.errors import InputError, ProvisionError
from provision.core.results import EXIT_BAD_INPUT

COMMAND_ENTRY_POINTS = "provision.commands"  # the commands other packages add (`provision lab`), by name


class ProvisionGroup(click.Group):
    """Turns our input errors into clear messages and exit code 2, never a traceback. Commands of other packages
    (entry points in COMMAND_ENTRY_POINTS: `provision lab`) are loaded only when asked for (their help, or the
    command itself), so no other command imports them, and provision names none of them."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *(point.name for point in entry_points(group=COMMAND_ENTRY_POINTS))})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        command = super().get_command(ctx, name)
        if command is None:
            for point in entry_points(group=COMMAND_ENTRY_POINTS, name=name):
                loaded: click.Command = point.load()
                return loaded
        return command

    def invoke(self, ctx: click.Context) -> Any:
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
def main() -> None:
    """Provision and tune GPU training clusters over SSH.

    Commands read an Ansible inventory (YAML or INI); apply converges every
    host to it, idempotently: a second run changes nothing and says so.
    """


for command in (run.apply, run.facts, verify.verify, run.unlock, adhoc.clocks, adhoc.power, adhoc.persistence,
                adhoc.ecc, adhoc.compute_mode, adhoc.mig, inventory.inventory, standalone.demo, standalone.advise,
                recover.recover):
    main.add_command(command)
