"""The torchrun wrapper's checks: it would not start more processes on a node than MIG lets train together
(launcher/mig.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from provision.capabilities.launcher import mig
from provision.capabilities.launcher.tasks import processes_per_node, wrapper_path
from provision.core.checks import SERVICE, fail

if TYPE_CHECKING:  # types only
    from provision.verify.model import Node


def check_torchrun_does_not_span_mig_slices(node: Node) -> None:
    """Reads: provision_launcher (nproc_per_node), provision_gpu (mig); each GPU's MIG mode, current and pending
    (nvidia-smi --query-gpu=mig.mode.current,mig.mode.pending).
    Next step: set provision_launcher.nproc_per_node: 1 (one process on one slice), or turn MIG off on the GPUs that
    train together (provision_gpu.mig: disabled)"""
    if node.inventory.settings.launcher is None:
        pytest.skip("the inventory sets no launcher block for this host")
    nproc, why_not = processes_per_node(node.inventory, node.facts)
    if nproc is None:
        pytest.skip(why_not)
    spans = mig.spans_slices(nproc, mig.slices(node.inventory, node.facts))
    if spans:
        # Neither a reset nor a reboot changes it: the inventory does (apply then writes the wrapper).
        fail(f"{wrapper_path(node.inventory)} starts one process per MIG slice it can use", spans, mig.FIX,
             remedy=SERVICE)
