"""A driver move held back where the next boot could not load the new driver (driver/heldback.py): the nvidia-driver
task refuses it at plan time with the reboot refusal's fixing command, so the host keeps the driver it runs; where
the module comes with the move (DKMS with the next kernel's headers, Ubuntu's prebuilt package in the same apt-get)
it moves as before. The driver's apt-get also takes out held fabric manager packages of another driver version,
which Ubuntu ties to their driver's exact version."""

from __future__ import annotations

from builders.facts import facts
from builders.hosts import host

from provision.capabilities import registry
from provision.capabilities.driver import heldback
from provision.capabilities.driver import packages as driver
from provision.capabilities.driver.facts import DriverFacts
from provision.capabilities.driver.nextboot import DkmsModule, NextBoot
from provision.capabilities.driver.tasks import NvidiaDriver
from provision.capabilities.fabric.facts import FabricFacts
from provision.core.facts import SystemFacts
from provision.core.plan import FAILED

NEW, OLD = "6.8.0-100-generic", "6.8.0-45-generic"  # the next boot's kernel, the running one
KEPT, MOVED = "580.159.04", "570.195.03"
OLD_MODULE = f"/lib/modules/{OLD}/kernel/nvidia-580/nvidia.ko"
PACKAGES = {"nvidia-driver-580": f"{KEPT}-0ubuntu1"}
FM = {"nvidia-fabricmanager-580": f"{KEPT}-0ubuntu1", "libnvidia-nscq-580": f"{KEPT}-0ubuntu1"}


def boot(**fields) -> NextBoot:
    """NEW boots next (the newest, GRUB's top entry); OLD, the running kernel, has the 580 module."""
    return NextBoot(**{"kernels": [OLD, NEW], "grub": True, "modules": {OLD: [OLD_MODULE]}, **fields})


def node(**values):
    return host("gpu-1", provision_driver={"version": MOVED, "packages": ["nvidia-driver-{branch}"], **values})


def at_580(next_boot: NextBoot | None, *, fabric: dict[str, str] | None = None, held=()):
    """A host with driver 580 installed, held and loaded, and this next boot; these fabric manager packages (as the
    fabric section reads them: the host's held list covers only the packages the tasks name, the pinned branch's)."""
    return facts(system=SystemFacts(uid=0, os_id="ubuntu"), packages=dict(PACKAGES), held=list(PACKAGES),
                 driver=DriverFacts(loaded=KEPT, packages=dict(PACKAGES), held=list(PACKAGES), next_boot=next_boot),
                 fabric=FabricFacts(nvswitches=["0"], packages=fabric or {}, held=list(held)))


def test_a_move_whose_next_kernel_would_lack_the_module_is_refused_with_the_reboot_refusals_command():
    found, inventory = at_580(boot()), node()
    plan = NvidiaDriver().plan(inventory, found)
    assert plan.changes == [] and not plan.failed
    (item,) = plan.refused
    assert (item.target, item.status, item.before, item.after) == ("nvidia-driver-570", FAILED,
                                                                     "not installed (installed: nvidia-driver-580)", MOVED)
    (refusal,) = registry.reboot_refusals(inventory, found)
    fix = refusal.split("; fix: ")[1]
    assert fix == (f"`apt-get install linux-headers-{NEW} && dkms autoinstall -k {NEW}` where the driver is built by "
                   f"DKMS, or `apt-get install linux-modules-nvidia-580-{NEW}` where it comes as prebuilt modules")
    # ^ the branch the host keeps: the pinned one's module package depends on a driver the move did not install
    assert item.message == (
        f"refused: driver {MOVED} is not installed, the host keeps driver {KEPT}: the next boot's kernel {NEW} "
        f"(GRUB_DEFAULT=0: the top entry, the newest /boot/vmlinuz-*) would have no nvidia module of it (no DKMS, no "
        "prebuilt linux-modules-nvidia package), and until then nvidia-smi and CUDA would answer 'Driver/library "
        f"version mismatch'; fix: {fix}, then apply again")
    assert item.cause == heldback.NEXT_BOOT_CHECK  # verify files it under the next boot's finding: one cause


def test_dkms_builds_the_new_driver_where_the_next_kernels_headers_are_installed():
    dkms = [DkmsModule("nvidia", KEPT, OLD, "installed")]
    (change,) = NvidiaDriver().plan(node(), at_580(boot(dkms=dkms, headers=[OLD, NEW]))).changes
    assert change.commands[0][-2:] == ["nvidia-driver-570=570.195.03-*", "nvidia-driver-580-"]


def test_dkms_without_the_next_kernels_headers_is_refused_even_where_the_old_module_is_built_there():
    dkms = [DkmsModule("nvidia", KEPT, OLD, "installed"), DkmsModule("nvidia", KEPT, NEW, "installed")]
    built = boot(dkms=dkms, headers=[OLD], modules={OLD: [OLD_MODULE], NEW: [f"/lib/modules/{NEW}/updates/dkms/nvidia.ko"]})
    (item,) = NvidiaDriver().plan(node(), at_580(built)).refused
    assert f"the driver is a DKMS module and {NEW}'s headers are not installed" in item.message
    assert item.message.endswith(f"fix: `apt-get install linux-headers-{NEW} && dkms autoinstall -k {NEW}` (the "
                                 "driver is a DKMS module), then apply again")
    assert item.cause == ""  # the next kernel has a module now: the reboot is not refused, nothing to file it under


def test_prebuilt_modules_come_in_the_drivers_own_apt_get_for_the_next_kernel():
    prebuilt = boot(module_packages={f"linux-modules-nvidia-580-server-{OLD}": "6.8.0-45.45"})
    (change,) = NvidiaDriver().plan(node(server=True), at_580(prebuilt)).changes
    assert f"linux-modules-nvidia-570-server-{NEW}" in change.commands[0]
    there = boot(module_packages={f"linux-modules-nvidia-570-{NEW}": "6.8.0-100.100"})
    (change,) = NvidiaDriver().plan(node(), at_580(there)).changes
    assert f"linux-modules-nvidia-570-{NEW}" in change.commands[0]  # installed already: it moves with its driver
    dkms = boot(module_packages=there.module_packages, dkms=[DkmsModule("nvidia", KEPT, OLD, "installed")], headers=[NEW])
    (change,) = NvidiaDriver().plan(node(), at_580(dkms)).changes
    assert not [word for word in change.commands[0] if word.startswith("linux-modules")]  # DKMS builds it


def test_the_other_hosts_move_as_before():
    unknown = NextBoot()  # no /boot/vmlinuz-*: which kernel boots next is not known, nothing is judged
    shipped = boot(modules={OLD: [OLD_MODULE], NEW: [f"/lib/modules/{NEW}/kernel/nvidia/nvidia.ko"]})
    for next_boot in (None, unknown, shipped):
        (change,) = NvidiaDriver().plan(node(), at_580(next_boot)).changes
        assert change.after == f"{MOVED}, loaded at the next boot"
    fresh = facts(system=SystemFacts(uid=0, os_id="ubuntu"), driver=DriverFacts(next_boot=boot()))
    assert len(NvidiaDriver().plan(node(), fresh).changes) == 1  # a first install keeps no driver: not refused


def test_the_gpus_of_a_host_held_back_run_the_driver_it_keeps():
    assert driver.what_the_gpus_wait_for(node().settings.driver, at_580(boot())) == ""
    assert driver.what_the_gpus_wait_for(node().settings.driver, at_580(None)).startswith(f"driver {MOVED}, which")


def test_held_fabric_manager_of_another_driver_version_goes_in_the_drivers_apt_get_unheld_first():
    found = at_580(None, fabric=FM, held=list(FM))
    (change,) = NvidiaDriver().plan(node(), found).changes
    unhold, install, _ = change.commands
    assert unhold == ["apt-mark", "unhold", "libnvidia-nscq-580", "nvidia-fabricmanager-580"]
    assert install[-3:] == ["nvidia-driver-580-", "libnvidia-nscq-580-", "nvidia-fabricmanager-580-"]
    assert change.after == f"{MOVED}, loaded at the next boot, libnvidia-nscq-580 nvidia-fabricmanager-580 removed"
    for leave in (at_580(None, fabric=FM), found):  # not held: apt's resolver takes it; fabric_manager false: not ours
        inventory = node() if leave is not found else node(fabric_manager=False)
        (change,) = NvidiaDriver().plan(inventory, leave).changes
        assert len(change.commands) == 2 and not [w for w in change.commands[0] if "fabricmanager" in w]
