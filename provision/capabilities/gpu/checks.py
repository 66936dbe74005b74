"""GPU checks: the driver answers, every GPU of the last good run is here and readable, links at full width
and speed, no ECC mode waits for a reboot, and every task's state is as the inventory intends (the task's own
plan has nothing to change)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from provision.capabilities.driver import packages as driver
from provision.capabilities.gpu import clock_events
from provision.capabilities.gpu import layout, modes, smi
from provision.core import pci
from provision.core.checks import ERROR, REBOOT, RESET, WARNING, fail

if TYPE_CHECKING:  # types only
    from provision.capabilities.gpu.model import NvidiaFacts
    from provision.verify.model import Node

# nvidia-smi(1), RETURN VALUE: what its exit code means for the node.
NVIDIA_SMI_EXIT = {
    2: "an invalid argument or flag",
    3: "the operation is not available on this GPU",
    4: "no permission",
    6: "no GPU found",
    8: "an external power cable is not attached",
    9: "the NVIDIA driver is not loaded",
    10: "the kernel detected an interrupt issue with a GPU",
    12: "the NVML shared library could not be found or loaded",
    13: "a function is not implemented in this version of NVML",
    14: "the InfoROM is corrupted",
    15: "a GPU has fallen off the bus or has otherwise become inaccessible",
    18: "the driver library and the loaded kernel module differ: a reboot is pending",  # NVML_ERROR_LIB_RM_VERSION_MISMATCH
}


NVIDIA_SMI_FIX = {
    9: "install the driver (driver: block), or load it: a driver installed since the boot loads at the next one",
    18: "reboot: the installed driver loads at the next boot (provision apply --reboot)",
}


def gpu_node(node: Node) -> NvidiaFacts:
    if node.inventory.settings.gpu is None:
        pytest.skip("the inventory sets no gpu block for this host")
    return node.facts.nvidia


def unless_the_driver_is_pending(node: Node) -> None:
    """Skip a check of the cards while the driver they need is not installed or not loaded yet: nvidia-smi lists
    no GPU then, which says nothing of the cards (nvidia_smi_reads_the_gpus and the driver check say why)."""
    waiting = driver.what_the_gpus_wait_for(node.inventory.settings.driver, node.facts)
    if waiting:
        pytest.skip(f"not judged while the GPUs wait for {waiting}")


def check_nvidia_smi_reads_the_gpus(node: Node) -> None:
    """Reads: provision_gpu; nvidia-smi --query-gpu, its exit code and its message.
    Next step: as nvidia-smi's exit code says: no driver loaded: install it (provision_driver) or reboot into it; a
    driver/library mismatch: `provision apply --reboot`; else dmesg's Xid lines (a GPU off the bus needs a reset or
    a reboot)"""
    nvidia = gpu_node(node)
    if nvidia.state != "ok" or nvidia.exit_code:
        code = nvidia.exit_code or 0
        meaning = NVIDIA_SMI_EXIT.get(code, "")
        said = (f"exit {code}" + (f" ({meaning})" if meaning else "") if nvidia.exit_code is not None
                else "not run")
        lost_only = nvidia.state == "ok" and code == 15 and nvidia.lost  # the others read: the lost GPU says it
        fail("nvidia-smi to read every GPU and exit 0",
             said + (f": {nvidia.message}" if nvidia.message and nvidia.state != "ok" else ""),
             NVIDIA_SMI_FIX.get(code, "see dmesg for Xid errors; a GPU off the bus needs a reset or a reboot, a "
                                "missing driver an install"),
             because="no_gpu_is_lost" if lost_only else "")


def check_gpu_count_is_as_the_inventory_says(node: Node) -> None:
    """Reads: provision_gpu.count; the GPUs nvidia-smi lists, readable or lost.
    Next step: a missing card: reseat it, check its riser and power, then reboot; a card added or removed on
    purpose: change provision_gpu.count"""
    expected = node.inventory.settings.gpu.count if node.inventory.settings.gpu else None
    if expected is None:
        pytest.skip("the inventory sets no provision_gpu.count for this host")
    unless_the_driver_is_pending(node)
    nvidia = node.facts.nvidia
    found = len(nvidia.gpus) + len(nvidia.lost)  # a lost GPU is still enumerated: no_gpu_is_lost speaks of it
    if found != expected:
        fail(f"{expected} GPU(s) (provision_gpu.count)", f"{found}" + (f" ({nvidia.state}: {nvidia.message})"
                                                              if nvidia.state != "ok" else ""),
             "a missing card: reseat it, check its riser and power, then reboot "
             "(every_gpu_of_the_last_good_run_is_here names it); a card added or removed on purpose: change provision_gpu.count",
             because=("no_gpu_failed_to_initialize", "every_gpu_of_the_last_good_run_is_here"))


def check_every_gpu_of_the_last_good_run_is_here(node: Node) -> None:
    """Reads: provision_gpu; the GPU layout the last good apply recorded on the node, against the GPUs nvidia-smi lists
    now.
    Next step: reseat the card or check its riser and power, then reboot; a change made on purpose: `provision apply
    --accept-gpu-changes`"""
    nvidia = gpu_node(node)
    unless_the_driver_is_pending(node)
    change = layout.compare(node.facts.gpu_layout, nvidia)
    if change is None:
        pytest.skip("no GPU layout recorded on this host yet: `provision apply` records it")
    if change:
        # Only missing cards: nvidia-smi still names a lost one (no_gpu_is_lost says what to do), and the kernel
        # may say why a gone one never came up (no_gpu_failed_to_initialize).
        missing = [pci.slot(m.gpu.bus_id) for m in change.missing]
        explained = change.only_missing() and (len(missing) == 1 or all(m.lost for m in change.missing))
        leads = ("no_gpu_is_lost", *(f"no_gpu_failed_to_initialize:{slot}" for slot in missing))
        fail(f"the {len(node.facts.gpu_layout or [])} GPU(s) of the last good run", "; ".join(change.lines()),
             "reseat the card or check its riser and power, then reboot; if the change is intended: "
             "provision apply --accept-gpu-changes",
             because=leads if explained else (), about=tuple(missing))


def check_no_gpu_is_lost(node: Node) -> None:
    """Reads: provision_gpu; the GPUs nvidia-smi lists as unreadable (fallen off the bus) and the recorded layout.
    Next step: drain the node and reboot it (under Slurm: scontrol reboot ASAP nextstate=RESUME NODE); if the GPU
    falls off again, reseat the card and check its riser and power cables"""
    nvidia = gpu_node(node)
    if nvidia.lost:
        recorded = {pci.slot(r.bus_id): r for r in node.facts.gpu_layout or []}
        named = [f"{layout.words(recorded[pci.slot(lost.bus_id)])}: {lost.message}"
                 if pci.slot(lost.bus_id) in recorded and lost.index is None else str(lost) for lost in nvidia.lost]
        fail("every GPU readable", "; ".join(named),
             f"drain {node.name} and reboot it (a GPU off the bus comes back only with a reset or a boot: under "
             f"Slurm, scontrol reboot ASAP nextstate=RESUME {node.name}); if it falls off again, reseat the card "
             "and check its riser and power cables",
             # lost under verify --active's load: that finding says why (the peaks, the fix) and this follows
             because=tuple(f"gpus_hold_up_under_load:{pci.slot(lost.bus_id)}" for lost in nvidia.lost if lost.bus_id),
             about=tuple(pci.slot(lost.bus_id) for lost in nvidia.lost if lost.bus_id),
             # a GPU the driver says a reset brings back needs no reboot; one off the bus does
             remedy=RESET if all(lost.message == smi.REQUIRES_RESET.strip("[]") for lost in nvidia.lost) else REBOOT)


def check_pcie_links_run_at_full_width_and_speed(node: Node) -> None:
    """Width always; the generation only on a GPU at work: an idle GPU drops its link to a slower generation
    to save power (clocks event reason Idle), and that is no fault.

    Reads: provision_gpu; each GPU's PCIe link width and generation, current and maximum, and its clock event
    reasons (nvidia-smi --query-gpu).
    Next step: reseat the card or its riser, or try another slot; AER errors in dmesg point at the link
    """
    nvidia = gpu_node(node)
    slow: list[str] = []
    slots: list[str] = []
    for g in nvidia.gpus:
        before = len(slow)
        if g.pcie_width_current is not None and g.pcie_width_max is not None and g.pcie_width_current < g.pcie_width_max:
            slow.append(f"{g.label} {g.bus_id} x{g.pcie_width_current} of x{g.pcie_width_max}")
        busy = g.clock_events_active is not None and not g.clock_events_active & clock_events.IDLE
        if (busy and g.pcie_gen_current is not None and g.pcie_gen_max is not None
                and g.pcie_gen_current < g.pcie_gen_max):
            slow.append(f"{g.label} {g.bus_id} gen {g.pcie_gen_current} of {g.pcie_gen_max} while at work")
        slots += [pci.slot(g.bus_id)] if len(slow) > before else []
    if slow:
        fail("every GPU's PCIe link at its maximum width (and generation, at work)", ", ".join(slow),
             "reseat the card or its riser, or try another slot; AER errors in dmesg point at the link",
             # under verify --active's load the load's PCIe finding of the same GPU says it (and how long): this
             # follows from it
             because=tuple(f"gpus_hold_up_under_load:{slot}" for slot in slots if slot), about=tuple(slots),
             severity=WARNING)


def check_every_gpus_ecc_mode_is_in_effect(node: Node) -> None:
    """An ECC mode set (by provision or by hand) takes effect at the next reboot or GPU reset; until then the GPU
    runs the old one. One finding for the node: the one reboot takes every GPU's.

    Reads: provision_gpu; each GPU's ECC mode, current and pending (nvidia-smi --query-gpu ecc.mode.current,
    ecc.mode.pending).
    Next step: reboot the node, drained: `provision apply INVENTORY --limit NODE --reboot` (a GPU reset,
    nvidia-smi -r, where nothing uses the GPU and the board allows it, takes it too)"""
    gpu_node(node)
    unless_the_driver_is_pending(node)
    pending = modes.ecc_pending(node.facts)
    if pending:
        fail("every GPU's ECC mode in effect", "reboot pending: " + "; ".join(pending),
             node.apply_command("--reboot"), severity=ERROR, remedy=RESET)
