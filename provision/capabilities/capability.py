"""A capability declared once: everything provision knows of it, in one value its folder exports as CAPABILITY.

The registry folds the declarations into what the core, verify, the output and the CLI use (the facts batch, the
task types, the check modules, the reasons a host waits for a reboot, the run flags, the lines `provision facts`
prints), so none of those shared layers names a capability. Shapes borrowed from pyinfra (a fact is its command
and its parser together: core/facts.py FactReader) and Meta's GCM (each check module listed explicitly).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from provision.core.errors import Problem
from provision.core.facts import FactReader
from provision.core.plan import Task
from provision.core.settings import Block

if TYPE_CHECKING:  # types only
    from provision.capabilities.host import HostFacts
    from provision.core.apply import Step
    from provision.inventory.model import Host, HostRule

WARNING, PROBLEM, HEADING = "warning", "problem", "heading"  # the tones of a FactLine's parts; "" is plain


@dataclass(frozen=True)
class RunFlag:
    """An option of a run that a capability's tasks read (apply --accept-gpu-changes). The CLI builds the option
    from it; a run sets `name` in Host.flags of every host it selects; `--via slurm` passes `option` on."""

    name: str  # in Host.flags: "accept_gpu_changes"
    option: str  # "--accept-gpu-changes"
    help: str
    commands: tuple[str, ...] = ("apply",)
    # A task type the flag adds to the run, by name: the task is that flag's alone (no shipped playbook lists it).
    adds_task: str = ""

    def set_for(self, host: Host) -> bool:
        """Whether the run set this flag for the host."""
        return self.name in host.flags


@dataclass(frozen=True)
class FactLine:
    """One line `provision facts` prints under a host, as parts in tones ("", WARNING, PROBLEM): the printer
    colours them, since nothing below the output knows there is a terminal."""

    parts: tuple[tuple[str, str], ...]

    @classmethod
    def plain(cls, text: str) -> FactLine:
        return cls(((text, ""),))

    @classmethod
    def labelled(cls, label: str, text: str, tone: str = "") -> FactLine:
        """`label: text`, the label in the tone."""
        return cls(((label, tone), (f": {text}", "")))

    @property
    def text(self) -> str:
        return "".join(text for text, _ in self.parts)


@dataclass(frozen=True)
class BootUnit:
    """A unit of the capability's that sets some of its state again at every boot. A task that alters that state
    and is not as intended may have lost it to a reboot: verify's next step asks whether the unit is enabled."""

    unit: str  # "provision-gpu-tuning.service"
    sets: frozenset[str]  # the fact keys (Task.alters) it sets again


# Why a host waits for a reboot after a run, given the host (its settings) and its facts read after it: [] when not.
PendingReasons = Callable[["Host", "HostFacts"], list[str]]
# Why a host must not be rebooted now, given the host (its settings) and its facts read after the run, each with the
# command that fixes it (its next kernel has no NVIDIA module): [] when it may be. `apply --reboot` refuses it.
RebootRefusal = Callable[["Host", "HostFacts"], list[str]]
# A capability's lines under a host in `provision facts`, given the host (its settings) and its facts.
ShowFacts = Callable[["Host", "HostFacts"], list[FactLine]]
# What a capability makes of a host's facts (not the facts themselves), in `provision facts --json` under its name.
ViewFacts = Callable[["Host", "HostFacts"], dict[str, Any]]


@dataclass(frozen=True)
class Capability:
    """What one capability adds to provision. The registry lists every capability (registry.CAPABILITIES) and
    folds these fields; a field left at its default adds nothing."""

    name: str
    settings: type[Block] | None = None  # its inventory block (provision_NAME), a field of HostSettings
    facts: FactReader | None = None  # its sections of the facts batch and their parser
    tasks: tuple[type[Task], ...] = ()  # the task types a playbook may name
    checks: tuple[str, ...] = ()  # its verify check modules (by module name: pytest imports them)
    pending: tuple[PendingReasons, ...] = ()
    reboot_refusals: tuple[RebootRefusal, ...] = ()
    # Rules across hosts: what one host's block asks of the others (inventory/build.py runs them on the built
    # inventory, inventory/model.py HostRule).
    host_rules: tuple[HostRule, ...] = ()
    # What refuses one host's runs, its own blocks alone (a group name its files would carry that is no file name):
    # the other hosts still run (inventory/build.py: Host.refused).
    host_refusals: tuple[Callable[[Host], list[Problem]], ...] = ()
    run_flags: tuple[RunFlag, ...] = ()
    # Names for parts of its facts finer than a HostFacts field, which its tasks plan from or alter (Task.plans_from,
    # Task.alters): "nvidia.power_limit" is every GPU's power limit, so that the power task and the clocks task,
    # which set different columns of nvidia.gpus, join one batch. A name with no field of its own ("initramfs")
    # is state no fact holds. Every other fact key must be a HostFacts field path (registry.FACT_KEYS).
    fact_keys: frozenset[str] = frozenset()
    boot_units: tuple[BootUnit, ...] = ()
    show: ShowFacts | None = None
    json_view: ViewFacts | None = None
    # Steps a run that may change the host runs with its first changes (core/run.py Extensions.upkeep).
    upkeep: Callable[[HostFacts], list[Step]] | None = None
