"""Which hosts belong together: a training cluster (the launcher's group) and a Slurm cluster (one controller).

Both come from the whole inventory, never from the hosts a run is limited to: the wrapper on one blade counts
every blade, and slurm.conf names every node even when `--limit` applies it to one. Below the capability folders
because each of the two asks the other: the torchrun wrapper names its Slurm partition, slurm.conf its training
groups.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Iterable

from provision.core.errors import Problem

if TYPE_CHECKING:  # types only
    from provision.inventory.model import Host


# A group's name becomes a file name (/usr/local/bin/GROUP-torchrun, GROUP-%j.out), a job name, a rendezvous id and
# a Slurm partition: one word of letters, digits and _ . -, not starting with . or - (not "..", not an option).
# Ansible allows more in a group's name (it only warns); such a group is refused where provision would write it.
NAME_IN_FILES = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")


def unwritable_name(host: Host, key: str, group: str, becomes: str) -> list[Problem]:
    """The refusal of a group name the host's block would write into file names, scripts or slurm.conf (what it
    `becomes`) that is not one such word; none when it is."""
    if NAME_IN_FILES.match(group):
        return []
    return [Problem(host.written_in, host.where, key, f"the group {group!r} would be {becomes}: its name is not one "
                    "word of letters, digits and _ . -", f"rename the group, or set {key} to a name that is")]


def launcher_group(host: Host) -> str:
    """The group whose hosts train together: provision_launcher.group, else the host's innermost group."""
    launcher = host.settings.launcher
    return (launcher and launcher.group) or host.groups[-1]


def training_cluster(host: Host, everyone: Iterable[Host]) -> list[Host]:
    """The hosts that start one job together with host (itself included), in inventory order."""
    group = launcher_group(host)
    return [h for h in everyone if h.settings.launcher is not None and launcher_group(h) == group]


def slurm_cluster(host: Host, everyone: Iterable[Host]) -> list[Host]:
    """Every host of host's Slurm cluster (the same controller), in inventory order."""
    controller = host.settings.slurm.controller if host.settings.slurm else None
    return [h for h in everyone if h.settings.slurm is not None and h.settings.slurm.controller == controller]


def partition_of(host: Host) -> str:
    """The host's Slurm partition: its slurm block's, else its innermost group."""
    slurm = host.settings.slurm
    return (slurm.partition if slurm else None) or host.groups[-1]
