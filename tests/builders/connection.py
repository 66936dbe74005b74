"""A fake host connection: provision's own Connection (core/connection.py: sudo wrapping, commands_run, the argv
reported), with what the host does given by the test. It records every command it is sent, and answers each
from `answer`:

- a str: the stdout of every command (exit 0);
- a list: the replies in order, one per command (a str is a stdout with exit 0, or a CommandResult);
- a callable (argv, stdin, timeout) -> CommandResult | str: computed, or raising as a lost host does.

The callables below are the host behaviours tests share: `here` runs the command on this machine (as
LocalConnection does), `cut_off` closes the channel after some lines of output, `gone` loses the host before the
command ran, `lost_after` loses it some seconds into a command run here, with what came back until then.
"""

from __future__ import annotations

import os
import select
import subprocess
import time
from collections.abc import Callable, Sequence
from typing import NamedTuple

from provision.core.connection import CommandResult, Connection, LocalConnection, Lost, Unreachable

Answer = Callable[[list[str], "str | None", "float | None"], "CommandResult | str"]


class Sent(NamedTuple):
    """One command as the host received it (after sudo wrapping)."""

    argv: list[str]
    stdin: str | None
    timeout: float | None


class FakeConnection(Connection):
    """Host `name`, answering as `answer` says; `reachable` says whether open() may reach it now."""

    def __init__(self, name: str = "node1", answer: str | Sequence[CommandResult | str] | Answer = "", *,
                 reachable: Callable[[], bool] = lambda: True):
        super().__init__(name)
        self.sent: list[Sent] = []
        self.reachable = reachable
        if isinstance(answer, str):
            stdout = answer
            self.answer: Answer = lambda argv, stdin, timeout: stdout
        elif callable(answer):
            self.answer = answer
        else:
            self.answer = in_order(answer)

    def open(self) -> None:
        if not self.reachable():
            raise Unreachable(f"cannot connect to {self.name}:22: Connection refused")

    def argvs(self) -> list[list[str]]:
        """The commands sent, in order."""
        return [sent.argv for sent in self.sent]

    def _run(self, argv: list[str], stdin: str | None, timeout: float | None) -> CommandResult:
        self.sent.append(Sent(argv, stdin, timeout))
        reply = self.answer(argv, stdin, timeout)
        return CommandResult(argv, 0, reply) if isinstance(reply, str) else reply


class FakeLocalConnection(FakeConnection, LocalConnection):
    """This machine's connection, as provision tells it from SSH (by its class), answering as the test says."""


def in_order(replies: Sequence[CommandResult | str]) -> Answer:
    """Each command answered by the next reply; a command past the last one fails the test."""
    left = list(replies)

    def answer(argv: list[str], stdin: str | None, timeout: float | None) -> CommandResult | str:
        assert left, f"no reply left for {argv}"
        return left.pop(0)
    return answer


def here(argv: list[str], stdin: str | None, timeout: float | None) -> CommandResult:
    """The command run on this machine, as LocalConnection runs it."""
    return LocalConnection("here")._run(argv, stdin, timeout)


def cut_off(lines: int, answer: Answer = here) -> Answer:
    """A host that goes away after `lines` lines of a command's output: the SSH channel closes with no exit status
    (rc -1, as paramiko reports it)."""
    def cut(argv: list[str], stdin: str | None, timeout: float | None) -> CommandResult:
        done = answer(argv, stdin, timeout)
        said = done if isinstance(done, str) else done.stdout
        return CommandResult(argv, -1, "\n".join(said.splitlines()[:lines]) + "\n")
    return cut


def gone(message: str) -> Answer:
    """A host lost before any command's output came back: the connection raises `message`."""
    def lose(argv: list[str], stdin: str | None, timeout: float | None) -> CommandResult:
        raise Unreachable(message)
    return lose


def lost_after(seconds: float, message: str) -> Answer:
    """A connection lost `seconds` into a command run on this machine: what came back until then rides on Lost (as
    the SSH connection's silence watchdog or a closed transport raise it); the command sees its stdout close, as a
    command does whose SSH channel went."""
    def lose(argv: list[str], stdin: str | None, timeout: float | None) -> CommandResult:
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        assert proc.stdin and proc.stdout
        proc.stdin.write((stdin or "").encode())
        proc.stdin.close()
        came: list[bytes] = []
        deadline = time.monotonic() + seconds
        while (left_s := deadline - time.monotonic()) > 0:
            if select.select([proc.stdout], [], [], left_s)[0]:
                came.append(os.read(proc.stdout.fileno(), 65536))
        proc.stdout.close()
        proc.wait(timeout=10)
        raise Lost(message, b"".join(came).decode())
    return lose
