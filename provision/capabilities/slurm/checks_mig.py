"""Slurm check of MIG slices: the gres slurmctld holds for a node whose GPUs are in MIG mode are its MIG devices
(mig_gres.py), so that `--gres=gpu:PROFILE:N` finds what the layout made."""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

import pytest

from provision.capabilities.slurm import mig_gres
from provision.core.checks import APPLY, fail

if TYPE_CHECKING:  # types only
    from provision.verify.model import Node


def words(counts: dict[str, int]) -> str:
    return ",".join(f"gpu:{kind}:{n}" if kind else f"gpu:{n}" for kind, n in sorted(counts.items())) or "no GPU gres"


def check_slurm_offers_the_nodes_mig_slices(node: Node) -> None:
    """Reads: provision_slurm; the GPUs' MIG mode and instances (nvidia-smi mig -lgi/-lci); the node's Gres= as
    slurmctld holds it (scontrol -o show node).
    Next step: write Slurm's files again from the layout, on the node and its controller (`provision apply
    INVENTORY --tags slurm`): slurmd and slurmctld restart with them"""
    slurm = node.inventory.settings.slurm
    if slurm is None or slurm.role_of(node.name) == "controller":
        pytest.skip("not a Slurm compute node in the inventory")
    if not any(g.mig_mode for g in node.facts.nvidia.gpus):
        pytest.skip("no GPU in MIG mode")
    state = node.facts.slurm_node
    if state is None or state.error:
        pytest.skip("slurmctld did not answer for this node (check_slurm_node_is_in_service says why)")
    wanted = mig_gres.layout_counts(node.facts, slurm.gres_autodetect != "off")
    offered = mig_gres.offered_counts(state.gres)
    if any(offered.get(kind) != n for kind, n in wanted.items()):
        fail(f"the node's MIG devices as gres ({words(wanted)})", f"slurmctld holds {state.gres or 'no gres'}",
             shlex.join(["provision", "apply", node.inventory_path, "--tags", "slurm"])
             + " (gres.conf and slurm.conf from the layout, on the node and its controller)", remedy=APPLY)
