"""Checks switched off for a group or a host (`provision_verify: {skip: [...]}`, core/verify_settings.py): each
name must be one of verify's checks (a typo would switch nothing off and pass unseen), and a check switched
off for a node is reported as skipped, with the reason, never run and never passed."""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import TYPE_CHECKING

from provision.capabilities.registry import CHECKS
from provision.core.errors import Problem
from provision.core.settings import did_you_mean, variable
from provision.verify.model import Node

if TYPE_CHECKING:  # types only
    from provision.core.plan import Task
    from provision.inventory.model import Host

AS_INTENDED = "as_intended"  # verify's own check, one per playbook task: "as_intended[TASK]" names one of them
KEY = f"{variable('verify')}.skip"


def check_names() -> list[str]:
    """Every check as the report names it: the registry's check_* functions without check_, then as_intended."""
    modules = [importlib.import_module(name) for name in CHECKS]
    return [name.removeprefix("check_") for module in modules for name, value in vars(module).items()
            if name.startswith("check_") and callable(value)] + [AS_INTENDED]


def switched_off(node: Node, check: str) -> str:
    """Why check ("fans_report_no_failure", "as_intended[gpu-clocks]") is off for the node; "" when it runs.
    as_intended alone switches off every task's."""
    settings = node.inventory.settings.verify
    if settings is None or not ({check, check.partition("[")[0]} & set(settings.skip)):
        return ""
    return f"switched off for this host by {KEY} in the inventory"


def unknown_names(hosts: Sequence[Host], tasks: Sequence[Task], inventory_path: str) -> list[Problem]:
    """A problem for each name a host's skip list holds that is no check (as_intended[TASK]: no task of the
    playbook), with the likeliest one meant; each name once. Asked before any host is read: a typo is bad input."""
    skips = {host.name: host.settings.verify.skip for host in hosts if host.settings.verify is not None}
    # check_names imports the check modules: only when some host switches a check off
    names = (check_names() if skips else []) + [f"{AS_INTENDED}[{task.name}]" for task in tasks]
    problems: dict[str, Problem] = {}
    for host, skip in skips.items():
        for name in skip:
            if name not in names and name not in problems:
                problems[name] = Problem(inventory_path, f"host {host}", KEY, f"{name!r} is no check of verify",
                                         did_you_mean(name, names)
                                         or "a name as verify reports it (provision verify --json lists them)")
    return list(problems.values())
