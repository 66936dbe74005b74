"""What a verify check says: a node not as intended (fail: expected, found, what to do), or worth a note.
Each capability's checks.py uses them; verify's runner (provision/verify/) collects them per node."""

from __future__ import annotations


class CheckFailed(AssertionError):
    """A node is not as intended: what was expected, what was found, and what to do about it."""

    def __init__(self, expected: str, found: str, fix: str = ""):
        super().__init__(f"expected {expected}, found {found}" + (f"; {fix}" if fix else ""))
        self.expected, self.found, self.fix = expected, found, fix


def fail(expected: str, found: str, fix: str = "") -> None:
    raise CheckFailed(expected, found, fix)


def note(node, text: str) -> None:
    """Something worth knowing that does not fail the node (an application's own Xid): shown under its line."""
    node.notes.append(text)
