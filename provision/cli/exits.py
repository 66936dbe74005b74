"""How a command ends: with the status commands/exit_codes.py computed, each file it could not write said last."""

from __future__ import annotations

import sys
from typing import NoReturn, Sequence

import click


def exit_with(status: int, unwritten: Sequence[str] = ()) -> NoReturn:
    """Say why each file was not written (after the results: they stand), then exit with `status`."""
    for line in filter(None, unwritten):
        click.secho(f"Error: {line}", fg="red", err=True)
    sys.exit(status)
