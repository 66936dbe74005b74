"""What a host's launcher block cannot know alone: the group it names holds the host."""

from __future__ import annotations

from typing import TYPE_CHECKING

from provision.core.errors import Problem
from provision.core.settings import did_you_mean

if TYPE_CHECKING:  # types only
    from provision.inventory.model import Built, HostRule


def launcher_group_holds_host(built: Built) -> list[Problem]:
    """provision_launcher.group is one of the host's groups: its hosts form the training cluster."""
    problems = []
    for host in built.hosts.values():
        launcher = host.settings.launcher
        if launcher and launcher.group and launcher.group not in host.groups:
            what = "a group this host is not in" if launcher.group in built.groups else "not a group"
            hint = did_you_mean(launcher.group, host.groups) or f"its groups: {', '.join(host.groups)}"
            problems.append(Problem(host.written_in, host.where, "provision_launcher.group",
                                    f"{launcher.group!r} is {what}", hint))
    return problems


RULES: tuple[HostRule, ...] = (launcher_group_holds_host,)
