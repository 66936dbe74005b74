"""What a host's launcher block cannot know alone: the group it names holds the host."""

from __future__ import annotations

from typing import TYPE_CHECKING

from provision.capabilities.clusters import launcher_group, unwritable_name
from provision.core.errors import Problem
from provision.core.settings import did_you_mean

if TYPE_CHECKING:  # types only
    from provision.inventory.model import Built, Host, HostRule


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


def group_is_one_word(host: Host) -> list[Problem]:
    """The launcher's group becomes the torchrun wrapper's file and job name: one word, else the host's runs are
    refused."""
    if host.settings.launcher is None:
        return []
    return unwritable_name(host, "provision_launcher.group", launcher_group(host),
                           "the torchrun wrapper's file and job name")


RULES: tuple[HostRule, ...] = (launcher_group_holds_host,)
