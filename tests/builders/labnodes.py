"""A lab node (provision_lab/node.py) that runs nothing: it records what the lab would run on it, for the tests of
the lab's fault bookkeeping (provision_lab/faults.py), which need no root nor namespace."""

from __future__ import annotations

from types import SimpleNamespace

from provision_lab.model import NodeSpec


class LabNode:
    """Node `spec` (lab-a, the first, by default); `commands` holds each argv run on it and each link shaped."""

    def __init__(self, spec: NodeSpec | None = None):
        self.spec = spec or NodeSpec("lab-a", 1)
        self.commands: list[list[str]] = []

    def exec(self, argv: list[str], check: bool = True, timeout: float = 60) -> SimpleNamespace:
        self.commands.append(argv)
        return SimpleNamespace(returncode=0, stdout="")

    def gpusim(self, *args: str) -> SimpleNamespace:
        return self.exec(["gpusim", *args])

    def shape_link(self, nic: str, mbps: int) -> None:
        self.commands.append(["shape", nic, str(mbps)])

    def scripts(self) -> list[str]:
        """The scripts run on it (`sh -c SCRIPT`), in order."""
        return [argv[-1] for argv in self.commands]
