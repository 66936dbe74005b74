"""Errors the user can act on. Each names where the problem is and what is allowed."""

from __future__ import annotations

from dataclasses import dataclass


class ProvisionError(Exception):
    """Base for errors reported to the user without a traceback."""


@dataclass(frozen=True)
class Problem:
    """One problem found in user input, located as precisely as we can."""

    file: str  # inventory or playbook path
    where: str  # "host gpu1", "group v100", "all", "" when file-level
    key: str  # dotted key path, e.g. "provision_gpu.clocks.mem"; "" when not key-specific
    message: str  # what is wrong, including the allowed range
    hint: str = ""  # how to fix it

    def __str__(self) -> str:
        loc = self.file
        if self.where:
            loc += f": {self.where}"
        if self.key:
            loc += f": {self.key}"
        text = f"{loc}: {self.message}"
        if self.hint:
            text += f" (hint: {self.hint})"
        # User input is quoted in these lines: a newline or a terminal escape in it must not reach the terminal.
        return "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in text)


class InputError(ProvisionError):
    """Bad inventory, playbook or option values: reported before any host is touched."""

    def __init__(self, problems: list[Problem]):
        self.problems = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))
