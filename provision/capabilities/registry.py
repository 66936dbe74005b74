"""The capabilities provision ships, in one list, and what the rest of provision uses of them, folded from their
declarations (capability.py): the facts batch, the task types, the verify check modules, the run flags, the rules
across hosts, the reasons a host waits for a reboot, the lines `provision facts` shows, the fact keys.

A new capability is a folder whose __init__.py exports CAPABILITY, plus its line in CAPABILITIES (and its fields on
HostSettings and HostFacts, for typed access: host.py).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING, Any

from provision.capabilities import active, bmc, containers, dcgm, driver, fabric, gpu, health, launcher, nccl, slurm, system, topology
from provision.capabilities.capability import Capability, FactLine, RunFlag
from provision.capabilities.fact_keys import field_paths, unknown_keys
from provision.capabilities.host import HostFacts
from provision.core.facts import FactRegistry
from provision.core.plan import Task
from provision.core.run import Extensions

if TYPE_CHECKING:  # types only
    from provision.core.apply import Step

# In the order verify runs their checks (its report lists them so), the facts batch reads their sections and
# `provision facts` shows their lines.
CAPABILITIES: tuple[Capability, ...] = tuple(package.CAPABILITY for package in (
    driver, gpu, fabric, containers, dcgm, health, bmc, nccl, launcher, slurm, topology, active, system))

# The facts batch: the core's sections, then the capabilities'.
FACTS = FactRegistry(HostFacts, [c.facts for c in CAPABILITIES if c.facts is not None])

# The tasks a playbook may name (`task: NAME`), by name.
TASK_TYPES: dict[str, type[Task]] = {task.name: task for c in CAPABILITIES for task in c.tasks}

# The check modules verify runs, in this order: one or two per capability.
CHECKS: tuple[str, ...] = tuple(module for c in CAPABILITIES for module in c.checks)

# The options a run takes for the capabilities' tasks (the CLI builds them; a host carries those set in Host.flags).
RUN_FLAGS: tuple[RunFlag, ...] = tuple(flag for c in CAPABILITIES for flag in c.run_flags)

# What the hosts' blocks ask of each other, checked once the inventory is built (inventory/build.py runs them all).
HOST_RULES = tuple(rule for c in CAPABILITIES for rule in c.host_rules)
HOST_REFUSALS = tuple(refusal for c in CAPABILITIES for refusal in c.host_refusals)
# Why a host's reboot must wait (its next kernel would come back without a module it needs).
REBOOT_REFUSALS = tuple(refusal for c in CAPABILITIES for refusal in c.reboot_refusals)

# The names a task may give what it plans from and alters (fact_keys.py): HostFacts' field paths, and the
# capabilities' own finer ones.
FACT_KEYS: frozenset[str] = field_paths(HostFacts).union(*(c.fact_keys for c in CAPABILITIES))


def reboot_pending(host: Any, facts: HostFacts) -> list[str]:
    """Why this host waits for a reboot after a run, every capability's reasons (Extensions.reboot_pending)."""
    return [reason for c in CAPABILITIES for pending in c.pending for reason in pending(host, facts)]


def reboot_refusals(host: Any, facts: HostFacts) -> list[str]:
    """Why this host must not be rebooted now, every capability's reasons (commands/reboot.py refuses it)."""
    return [reason for refuse in REBOOT_REFUSALS for reason in refuse(host, facts)]


def units_setting_again(alters: frozenset[str]) -> list[str]:
    """The units that set again at every boot some of what a task alters (Task.alters): verify asks after them."""
    return [b.unit for c in CAPABILITIES for b in c.boot_units if b.sets & alters]


def upkeep(facts: HostFacts) -> list[Step]:
    """The steps a run that may change the host runs with its first changes (Extensions.upkeep)."""
    return [step for c in CAPABILITIES if c.upkeep is not None for step in c.upkeep(facts)]


def fact_lines(host: Any, facts: HostFacts) -> list[FactLine]:
    """What `provision facts` shows under a host that was read, every capability's lines."""
    return [line for c in CAPABILITIES if c.show is not None for line in c.show(host, facts)]


def fact_views(host: Any, facts: HostFacts) -> dict[str, dict[str, Any]]:
    """What `provision facts --json` adds to a read host's facts: each capability's view of them, by its name."""
    return {c.name: c.json_view(host, facts) for c in CAPABILITIES if c.json_view is not None}


# What the capabilities add to every run: the batch, the steps that go with the first changes, the pending reboots.
EXTENSIONS = Extensions(FACTS, upkeep=upkeep, reboot_pending=reboot_pending)


def declaration_problems(capabilities: tuple[Capability, ...] = CAPABILITIES) -> list[str]:
    """What is wrong with the declarations as a whole: a name, task type, check module or run flag declared twice,
    a fact key a task names that is no HostFacts field path and no capability's (a typo would batch wrong)."""
    problems = []
    for what, names in (("capability", [c.name for c in capabilities]),
                        ("task type", [t.name for c in capabilities for t in c.tasks]),
                        ("check module", [m for c in capabilities for m in c.checks]),
                        ("run flag", [f.name for c in capabilities for f in c.run_flags])):
        problems += [f"{what} {name!r} is declared twice" for name in sorted({n for n in names if names.count(n) > 1})]
    paths = field_paths(HostFacts)
    problems += [f"fact key {key!r} of {c.name} is a HostFacts field already" for c in capabilities
                 for key in sorted(c.fact_keys & paths)]
    vocabulary = paths.union(*(c.fact_keys for c in capabilities))
    problems += [f"unknown fact key: {problem}"
                 for problem in unknown_keys((t for c in capabilities for t in c.tasks), vocabulary)]
    problems += [f"unknown fact key: {c.name}'s {b.unit} sets {key!r} again" for c in capabilities
                 for b in c.boot_units for key in sorted(b.sets - vocabulary)]
    return problems


def _refuse_wrong_declarations() -> None:
    problems = declaration_problems()
    if problems:  # a capability's mistake, found when provision starts rather than as a run batched wrong
        raise LookupError("the capabilities' declarations: " + "; ".join(problems))


_refuse_wrong_declarations()


def check_files() -> list[Path]:
    """The check modules' files, for verify's pytest session (found, not imported: pytest imports them)."""
    files = []
    for name in CHECKS:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            raise LookupError(f"{name}: a check module the registry lists is not installed")
        files.append(Path(spec.origin))
    return files
