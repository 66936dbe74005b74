"""What a host's Slurm block cannot know alone: its controller is a host of the inventory, named by every host of
the cluster, and has a Slurm block of its own."""

from __future__ import annotations

from typing import TYPE_CHECKING

from provision.capabilities.clusters import partition_of, unwritable_name
from provision.core.errors import Problem
from provision.core.settings import did_you_mean

if TYPE_CHECKING:  # types only
    from provision.inventory.model import Built, Host, HostRule

VARIABLE = "provision_slurm"


def controller_is_a_host(built: Built) -> list[Problem]:
    """provision_slurm.controller names a host of this inventory, said where it is written."""
    problems = []
    for written in built.written:
        slurm = written.variables.get(VARIABLE)
        controller = slurm.get("controller") if isinstance(slurm, dict) else None
        if isinstance(controller, str) and controller not in built.hosts:
            problems.append(Problem(written.file, written.where, f"{VARIABLE}.controller",
                                    f"{controller!r} is not a host of this inventory",
                                    did_you_mean(controller, list(built.hosts)) or "name one of its hosts"))
    return problems


def controller_is_set(built: Built) -> list[Problem]:
    """Every Slurm host names its controller; the controller has a Slurm block too."""
    problems = []
    for name, host in built.hosts.items():
        slurm = host.settings.slurm
        if slurm and slurm.controller is None:
            problems.append(Problem(host.written_in, host.where, f"{VARIABLE}.controller", "is required: the host "
                                    "where slurmctld runs", "set it once for the cluster, e.g. in the group's vars: "
                                    "provision_slurm: {controller: head}"))
        elif slurm and slurm.controller in built.hosts and built.hosts[slurm.controller].settings.slurm is None:
            controller = built.hosts[slurm.controller]
            problems.append(Problem(controller.written_in, controller.where, VARIABLE,
                                    f"is not set, but {name} names this host as its Slurm controller",
                                    "give the controller provision_slurm too (role: controller)"))
    return problems


def partition_is_one_word(host: Host) -> list[Problem]:
    """The host's partition is written into slurm.conf: one word, else the host's runs are refused."""
    if host.settings.slurm is None:
        return []
    return unwritable_name(host, "provision_slurm.partition", partition_of(host), "its Slurm partition's name")


RULES: tuple[HostRule, ...] = (controller_is_a_host, controller_is_set)
