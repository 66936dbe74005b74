"""GPUDirect RDMA's peer-memory module, nvidia-peermem, loaded now and at every boot where the driver block wants
it (provision_driver.peermem): `modprobe nvidia-peermem`, and /etc/modules-load.d so that each boot loads it again
(the driver's own boot does not: ../shared/reference/node-lifecycle-reference.md, section 3.2).

auto wants it where NCCL, as the nccl block sets it, would use GPUDirect RDMA between a GPU and an RDMA NIC
(gdr.py: NCCL_NET_GDR_LEVEL, the topology) and the kernel offers no DMA-BUF for it instead; true wants it on every
host of the block; false leaves it alone. The module of a driver not loaded yet (installed, a reboot away) cannot
load now: the modules-load.d file is written and the module is pending, loaded by the boot the driver waits for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from provision.capabilities.driver import nextboot, packages
from provision.capabilities.driver.settings import DriverSettings
from provision.capabilities.nccl.settings import NcclSettings
from provision.capabilities.system.files import plan_written
from provision.capabilities.topology import gdr
from provision.core.plan import OK, BlockTask, Change, FileWrite, Item, Plan

if TYPE_CHECKING:  # types only
    from provision.capabilities.host import HostFacts
    from provision.inventory.model import Host

MODULES_LOAD = gdr.MODULES_LOAD
MODULES_LOAD_TEXT = ("# Managed by provision (provision_driver.peermem): GPUDirect RDMA's peer-memory module, loaded at "
                     "every boot.\nnvidia-peermem\n")
LOADED = "/sys/module/nvidia_peermem/version"  # the file NCCL tests for (driver/facts.py PEER_MEMORY)
MODPROBE = ["modprobe", "nvidia-peermem"]
GDR_CHECK = "gpudirect_rdma_is_available_where_nccl_uses_it"  # the check that finds it missing where auto wants it


def wanted(host: Host, facts: HostFacts) -> tuple[bool, str]:
    """Whether this host wants nvidia_peermem loaded, and why (or why not)."""
    driver = host.settings.driver
    if driver is None:
        return False, "the inventory sets no driver block for this host"
    if driver.peermem is False:
        return False, "provision_driver.peermem is false: left alone"
    if driver.peermem is True:
        return True, "provision_driver.peermem is true"
    use = gdr.nccl_would_use(host.settings.nccl or NcclSettings(), facts)
    if isinstance(use, str):
        return False, f"provision_driver.peermem auto: {use}"
    if gdr.dma_buf(facts.driver):
        return False, ("provision_driver.peermem auto: the open kernel modules on Linux 5.12 or later give NCCL "
                       "DMA-BUF, no peer-memory module needed")
    return True, f"provision_driver.peermem auto: NCCL would use GPUDirect RDMA ({use.rule})"


def loaded(facts: HostFacts) -> bool:
    return LOADED in facts.driver.peer_memory


def pending(settings: DriverSettings | None, facts: HostFacts) -> str:
    """Why nvidia_peermem can load only at the next boot (its driver is not the loaded one yet); '' when it can now."""
    if not facts.driver.loaded:
        return "no NVIDIA module is loaded yet: nvidia_peermem loads with it at the next boot (modules-load.d)"
    reasons = packages.reboot_reasons(settings, facts)
    return f"nvidia_peermem loads with the installed driver at the next boot ({reasons[0]})" if reasons else ""


def left_alone(host: Host, facts: HostFacts) -> str:
    """Why GPUDirect RDMA's check does not judge this host now: peermem switched off on purpose, or a reboot away."""
    driver = host.settings.driver
    if driver is not None and driver.peermem is False:
        return "not judged: provision_driver.peermem is false (nvidia_peermem left alone on purpose)"
    why = "" if loaded(facts) or facts.driver.peer_memory else pending(driver, facts)
    return f"pending: {why}" if why else ""


def _why_not_loaded(output: str) -> str | None:
    if "Invalid argument" in output or "Unknown symbol" in output:
        return ("nvidia-peermem needs the InfiniBand stack's peer-memory client (MLNX_OFED or DOCA-OFED); without it "
                "its init fails with EINVAL: install the NIC vendor's stack, or set provision_driver.peermem: false")
    return None


def _not_loaded(facts: HostFacts) -> str | None:
    return None if loaded(facts) else f"modprobe nvidia-peermem ran, and {LOADED} is not there"


class NvidiaPeermem(BlockTask[DriverSettings]):
    """Playbook: `task: nvidia-peermem`: GPUDirect RDMA's peer-memory module where provision_driver.peermem wants it
    (auto, true), loaded now (modprobe) and at every boot (/etc/modules-load.d/provision-nvidia-peermem.conf)."""

    name = "nvidia-peermem"
    tags = frozenset({"driver", "rdma"})
    settings_blocks = frozenset({"driver"})
    plans_from = frozenset({"driver", "topology", "rdma"})
    # And its file. The module loaded shows in driver.peer_memory, which the driver's section reads after every
    # batch; "peermem" names that part alone, so that the GPU tasks (planning from the driver) share its batch.
    alters = frozenset({"peermem"})

    def file_paths(self, host: Host) -> list[str]:
        driver = host.settings.driver
        return [MODULES_LOAD] if driver and driver.peermem is not False else []

    def fact_sections(self, host: Host) -> list[str]:
        driver = host.settings.driver
        return ["topo"] if driver and driver.peermem == "auto" else []  # where NCCL would use GPUDirect RDMA

    def plan_with(self, host: Host, facts: HostFacts, block: DriverSettings) -> Plan:
        want, why = wanted(host, facts)
        if not want:
            return Plan(skipped=why)
        plan = Plan()
        plan_written(plan, FileWrite(MODULES_LOAD, MODULES_LOAD_TEXT), facts)
        later = pending(block, facts)
        if loaded(facts) or later:
            plan.unchanged.append(Item("nvidia_peermem", OK, "kernel module", after="loaded" if not later else
                                       "pending", message=later))
            return plan
        plan.changes.append(Change(
            target="nvidia_peermem", what="kernel module", before="not loaded", after="loaded", commands=[MODPROBE],
            verify=_not_loaded, explain=_why_not_loaded,
            # auto wants it exactly where GPUDirect RDMA's check finds it missing: one finding, that check's
            cause=GDR_CHECK if block.peermem == "auto" else ""))
        return plan


def next_boot_stranded(host: Host, facts: HostFacts) -> nextboot.Stranded | None:
    """The next boot's kernel has the NVIDIA module but not nvidia-peermem, where this host wants it (the driver's
    own module missing is the driver's refusal: one cause, said once)."""
    boot = facts.driver.next_boot
    if boot is None or not wanted(host, facts)[0] or nextboot.driver_stranded(host.settings.driver, facts):
        return None
    return nextboot.stranded(boot, nextboot.PEERMEM, *nextboot.module_package_of(host.settings.driver))


def reboot_refusals(host: Host, facts: HostFacts) -> list[str]:
    """Why this host must not be rebooted now (Capability.reboot_refusals): it would come back without GPUDirect RDMA."""
    found = next_boot_stranded(host, facts)
    return [found.reason] if found else []
