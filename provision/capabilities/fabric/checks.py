"""Fabric Manager checks, one per cause, in the order one leads to the next: its packages at the loaded driver's
version (else it aborts at start), then it runs, then the GPUs registered with the fabric it sets up. A later
check names the earlier ones as its leads (`because`), so a fabric manager at another version is one finding,
with "not running" and "GPUs In Progress" under it. Whether its packages are the pinned version and held, and its
unit enabled, is the fabric-manager task's own desired-state check (as_intended[fabric-manager])."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from provision.capabilities.fabric import packages as fabric
from provision.capabilities.fabric.tasks import RUNNING_CHECK, VERSION_CHECK
from provision.core import pci
from provision.core.checks import fail

if TYPE_CHECKING:  # types only
    from provision.verify.model import Node

DRIVER_CHECK = "driver_loaded_is_the_pinned_version"
NO_FABRIC = (None, "Not Supported", "N/A")  # fabric.state of a GPU on no NVSwitch fabric (or an older driver)
JOURNAL = "journalctl -u nvidia-fabricmanager says why"


def fix(node: Node) -> str:
    """apply installs it at the driver's version and (re)starts it where systemd runs; where none does, the
    reboot it marks pending starts it."""
    return node.apply_command("--reboot")


def wanted_here(node: Node) -> tuple[str, dict[str, str]]:
    """The loaded driver and the fabric manager's installed packages (name -> version), where they are judged;
    else the check is skipped with the reason."""
    why_not = fabric.not_wanted(node.inventory.settings.driver, node.facts)
    if why_not:
        pytest.skip(why_not)
    loaded = node.facts.driver.loaded
    if loaded is None:
        pytest.skip("no NVIDIA module is loaded (the driver's checks say why)")
    installed = fabric.installed(node.facts)
    if not installed:
        pytest.skip("fabric manager is not installed (as_intended[fabric-manager] says so)")
    return loaded, installed


def check_fabric_manager_is_the_drivers_version(node: Node) -> None:
    """On an NVSwitch board, nvidia-fabricmanager and libnvidia-nscq are the loaded driver's exact version: at
    any other, fabric manager aborts at start ("... don't match with driver version ...") and CUDA never starts.

    Reads: provision_driver.fabric_manager; the NVSwitches (/proc/driver/nvidia-nvswitch/devices, lspci); the
    fabric manager's packages (dpkg); the loaded driver (/proc/driver/nvidia/version).
    Next step: `provision apply INVENTORY --limit NODE --reboot` installs it at the driver's version (the reboot
    only where the driver or a host without systemd waits for one)"""
    loaded, installed = wanted_here(node)
    wrong = [f"{name} {version}" for name, version in sorted(installed.items()) if version != loaded]
    if wrong:
        fail(f"fabric manager at the loaded driver's version {loaded}", ", ".join(wrong), fix(node),
             because=DRIVER_CHECK)


def check_fabric_manager_is_running(node: Node) -> None:
    """On an NVSwitch board nvidia-fabricmanager runs: without it new CUDA jobs fail to start, and after a GPU
    reset every one does.

    Reads: provision_driver.fabric_manager; the fabric manager's packages and unit (systemctl is-enabled); its
    process (nv-fabricmanager).
    Next step: `provision apply INVENTORY --limit NODE --reboot` (re)starts it; journalctl -u nvidia-fabricmanager
    says why it stopped"""
    loaded, installed = wanted_here(node)
    if set(installed.values()) != {loaded}:
        pytest.skip(f"not judged while fabric manager is not the driver's version ({VERSION_CHECK} says so)")
    if not fabric.running(node.facts):
        unit = node.facts.fabric.unit if node.facts.fabric else ""
        fail(f"nvidia-fabricmanager {loaded} running", f"not running (its unit: {unit or 'not installed'})",
             f"{fix(node)}; {JOURNAL}", because=VERSION_CHECK)


def check_nvswitch_fabric_is_ready(node: Node) -> None:
    """On an NVSwitch board every GPU registers with the fabric nvidia-fabricmanager sets up; until it has, CUDA
    refuses to start on it ("system not yet initialized"): the service the GPUs need, judged by the GPUs.

    Reads: each GPU's fabric state and status (nvidia-smi --query-gpu fabric.state, fabric.status, read by the
    gpu capability).
    Next step: run nvidia-fabricmanager at the driver's exact version (provision_driver.fabric_manager; systemctl
    enable --now nvidia-fabricmanager); journalctl -u nvidia-fabricmanager says why it did not register the GPUs
    """
    gpus = [g for g in node.facts.nvidia.gpus if g.fabric_state not in NO_FABRIC]
    if not gpus:
        pytest.skip("no NVSwitch fabric on these GPUs (nvidia-smi: fabric.state N/A or Not Supported)")
    waiting = [f"{g.label} {g.bus_id} {g.fabric_state}" for g in gpus if g.fabric_state != "Completed"]
    failed = [f"{g.label} {g.bus_id} {g.fabric_status}" for g in gpus
              if g.fabric_state == "Completed" and g.fabric_status not in (None, "Success")]
    if waiting or failed:
        fail("every GPU registered with the NVSwitch fabric (fabric.state Completed, status Success)",
             "; ".join(waiting + failed),
             "nvidia-fabricmanager must run, at the driver's exact version: systemctl enable --now "
             f"nvidia-fabricmanager; {JOURNAL} it did not register them",
             because=(RUNNING_CHECK, VERSION_CHECK, "as_intended[fabric-manager]"),
             about=tuple(pci.slot(g.bus_id) for g in gpus))
