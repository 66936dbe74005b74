"""The exit codes reference, from the one list the commands exit with and their help epilogs print."""

from __future__ import annotations

from collections.abc import Iterable

from markdown_text import escape, sentence
from provision.commands.exit_codes import ExitCode


def markdown(codes: Iterable[ExitCode]) -> str:
    out = ["| Code | Name | Meaning | Commands |", "| ---: | --- | --- | --- |"]
    for code in codes:
        commands = ", ".join(f"`{command}`" for command in code.commands)
        out.append(f"| {code.code} | `{code.name}` | {escape(sentence(code.meaning))} | {commands} |")
    return "\n".join(out) + "\n"
