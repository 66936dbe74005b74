"""MIG checks: no GPU's MIG mode waits for a reset, and each GPU's layout is the inventory's, one finding per
cause: instances gone (as after a reboot or a crash: the boot unit makes them again), a layout drifted (changed
by hand), a GPU instance without its compute instance. A mode not as intended (and not pending) is the MIG mode
task's own finding (as_intended)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from provision.capabilities.gpu.boot import UNIT
from provision.capabilities.gpu.checks import gpu_node, unless_the_driver_is_pending
from provision.capabilities.gpu.mig_model import MigGpu
from provision.capabilities.gpu.mig_settings import layout_of
from provision.capabilities.gpu.mig_tasks import layout_words, modes, pending_reasons
from provision.capabilities.gpu.tasks import resolve_gpus
from provision.core.checks import ERROR, RESET, Finding, fail, fail_each

if TYPE_CHECKING:  # types only
    from provision.capabilities.gpu.model import GpuFacts
    from provision.verify.model import Node


def _layouts(node: Node) -> list[tuple[GpuFacts, list[str]]]:
    """The GPUs whose settings give them a MIG layout, each with it; skips where none does."""
    gpu_node(node)
    unless_the_driver_is_pending(node)
    wanted = [(gpu, layout) for gpu, settings in resolve_gpus(node.inventory, node.facts).per_gpu
              if (layout := layout_of(settings.mig)) is not None]
    if not wanted:
        pytest.skip("the inventory sets no MIG layout for this host's GPUs")
    return wanted


def check_no_gpus_mig_mode_is_pending(node: Node) -> None:
    """A MIG mode set (by provision or by hand) takes effect at a GPU reset or reboot; until then the GPU runs the
    old one and no layout can be made.

    Reads: provision_gpu; each GPU's MIG mode, current and pending (nvidia-smi --query-gpu mig.mode.current,
    mig.mode.pending).
    Next step: reboot the node, drained: `provision apply INVENTORY --limit NODE --reboot` (a GPU reset,
    nvidia-smi -r, where nothing uses the GPU, takes it too); the layout is made after it"""
    gpu_node(node)
    unless_the_driver_is_pending(node)
    pending = pending_reasons(node.inventory, node.facts)
    if pending:
        fail("every GPU's MIG mode in effect", "reboot pending: " + "; ".join(pending),
             node.apply_command("--reboot"), severity=ERROR, remedy=RESET)


def check_mig_layout_is_as_the_inventory_says(node: Node) -> None:
    """Reads: provision_gpu.mig; each GPU's MIG mode and its GPU and compute instances (nvidia-smi mig -lgi, -lci).
    Next step: instances gone: enable the boot unit (provision-gpu-tuning.service makes them at every boot) and
    `provision apply` makes them now; a layout drifted: `provision apply` destroys it and makes the inventory's
    (refused while processes use the GPU: drain the node first)"""
    wanted = _layouts(node)
    mig = node.facts.mig
    if mig is None or not mig.instances_read:
        said = "; ".join(mig.notes) if mig else ""
        pytest.skip("nvidia-smi mig -lgi was not read on this host" + (f" ({said})" if said else ""))
    findings = []
    for gpu, layout in wanted:
        current, pending = modes(gpu)
        if not current or current != pending:
            continue  # MIG mode off or pending: the mode's own finding (as_intended, no_gpus_mig_mode_is_pending)
        finding = _layout_finding(node, gpu, mig.gpus.get(gpu.index, MigGpu()), layout)
        if finding:
            findings.append(finding)
    fail_each(findings)


def _layout_finding(node: Node, gpu: GpuFacts, mig: MigGpu, layout: list[str]) -> Finding | None:
    expected = f"{gpu.label} MIG layout {layout_words(layout)}"
    apply = node.apply_command("--tags", "mig")
    have = mig.layout()
    if layout and not have:
        return Finding(expected, f"{gpu.label} has no GPU instance (gone, as after a reboot or a crash)",
                       f"{apply} makes them now; at boot {UNIT} makes them (enable it: provision apply)",
                       about=(gpu.bus_id,))
    if sorted(have) != sorted(layout):
        return Finding(expected, f"{gpu.label} MIG layout {layout_words(have)} (changed since provision made it)",
                       f"{apply} destroys it and makes the inventory's (drain the node first: it refuses while "
                       "processes use the GPU)", about=(gpu.bus_id,))
    missing = mig.without_default_compute()
    if missing:
        return Finding(expected, f"{gpu.label} GPU instance(s) {', '.join(str(gi.id) for gi in missing)} without "
                       "their one default compute instance", f"{apply} makes the layout again", about=(gpu.bus_id,))
    return None
