"""Which hosts belong together: a training cluster (the launcher's group) and a Slurm cluster (one controller).

Both come from the whole inventory, never from the hosts a run is limited to: the wrapper on one blade counts
every blade, and slurm.conf names every node even when `--limit` applies it to one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable


if TYPE_CHECKING:
    from provision.inventory.model import Host
    from provision.capabilities.host import HostFacts


@dataclass
class Cluster:
    """The whole inventory and the facts read in this run, for tasks whose plan looks beyond one host."""

    everyone: list[Host]
    facts: dict[str, "HostFacts"] = field(default_factory=dict)
    unread: dict[str, str] = field(default_factory=dict)  # host name -> why its facts could not be read
    local_only: bool = False  # --local: this machine was read, no other host could be (their plans are skipped)

    def beyond_reach(self, names: Iterable[str]) -> str:
        """Why a plan that needs these hosts is not judged here ("" when it is)."""
        missing = [name for name in names if name not in self.facts]
        return (f"needs the facts of {', '.join(missing)}, and --local reads this machine only: run it from the "
                "control machine") if self.local_only and missing else ""


# A group's name becomes a file name (/usr/local/bin/GROUP-torchrun, GROUP-%j.out), a job name, a rendezvous id and
# a Slurm partition: one word of letters, digits and _ . -, not starting with . or - (not "..", not an option).
# Ansible allows more in a group's name (it only warns); such a group is refused where provision would write it.
NAME_IN_FILES = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")


def unwritable_names(host: Host) -> list[tuple[str, str, str]]:
    """(key, the group's name, what it would become) for each group name the host's launcher or Slurm block
    would write into file names, scripts or slurm.conf that is not one such word."""
    found = []
    if host.settings.launcher is not None and not NAME_IN_FILES.match(launcher_group(host)):
        found.append(("provision_launcher.group", launcher_group(host), "the torchrun wrapper's file and job name"))
    if host.settings.slurm is not None and not NAME_IN_FILES.match(partition_of(host)):
        found.append(("provision_slurm.partition", partition_of(host), "its Slurm partition's name"))
    return found


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
