"""The real CLI run in-process, with no host contacted: what the input-hardening tests drive it through."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from click.testing import CliRunner, Result

import provision.cli as cli
import provision.cli.run as cli_run  # the CLI's connector: how it opens each host
from provision.core.connection import LocalConnection, SSHConnection, Unreachable


class Refused(Unreachable):
    """The test's refusal, told apart from a real network failure."""


def printable(text: str) -> bool:
    return all(c.isprintable() for c in text)


@contextmanager
def no_host_contacted() -> Iterator[list[str]]:
    """The CLI's connector refuses every host (recorded), and so would any Connection opened some other way."""
    attempts: list[str] = []

    def connector(local, ssh):
        def connect(host):
            attempts.append(host.name)
            raise Refused(f"fuzz: connections are refused ({len(attempts)})")
        return connect

    def refuse_open(self):
        attempts.append(self.name)
        raise Refused("fuzz: connections are refused")

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(cli_run, "connector", connector)
        mp.setattr(SSHConnection, "open", refuse_open)
        mp.setattr(LocalConnection, "open", refuse_open)
        yield attempts


def run_cli(args: list[str]) -> Result:
    """The CLI's result, after checking what any input must leave true: no traceback nor internal error, and
    problems quote user input escaped (no raw control character reaches the terminal)."""
    result = CliRunner().invoke(cli.main, args, catch_exceptions=True)
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        f"{type(result.exception).__name__}: {result.exception}\n{result.output}")
    assert "Traceback" not in result.output and "internal error" not in result.output, result.output
    assert printable(result.output.replace("\n", "")), repr(result.output)
    return result
