"""Slurm checks: a compute node is in service as slurmctld sees it. Its packages, munge key, configuration files
and daemons are the slurm tasks' own desired-state checks (as_intended)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from provision.capabilities.slurm.facts import DRAIN_REASON_PREFIX
from provision.capabilities.slurm.reboots import REBOOT_REASON_PREFIX
from provision.core.checks import fail, note

if TYPE_CHECKING:  # types only
    from provision.verify.model import Node


def check_slurm_node_is_in_service(node: Node) -> None:
    """Reads: provision_slurm; the node's state and reason as slurmctld answers them (scontrol -o show node).
    Next step: Slurm not installed: `provision apply`; no answer: is slurmctld running, and munged here with the
    cluster's key?; out of service: find why (scontrol show node), then scontrol update state=resume"""
    slurm = node.inventory.settings.slurm
    if slurm is None or slurm.role_of(node.name) == "controller":
        pytest.skip("not a Slurm compute node in the inventory")
    state = node.facts.slurm_node
    if state is None:
        fail("scontrol on the node", "Slurm is not installed", node.apply_command())
    if state.error:
        fail("slurmctld answering for this node", state.error,
             f"is slurmctld running on {slurm.controller}, and munged here with the cluster's key?")
    if state.out_of_service and state.reason.startswith(DRAIN_REASON_PREFIX):
        note(node, f"drained by verify: {state.reason} (`provision verify --resume` returns it once it passes)")
    elif state.out_of_service and state.reason.startswith(REBOOT_REASON_PREFIX):
        note(node, f"held by a reboot provision handed to Slurm: {state.reason} (`provision apply --reboot` "
                   "returns it to service once it passes verify)")
    elif state.out_of_service:
        fail("the node in service (idle, mixed or allocated)",
             f"{'+'.join(state.states)}" + (f", reason: {state.reason}" if state.reason else ""),
             f"find why (scontrol show node {state.name}); then scontrol update nodename={state.name} state=resume")
