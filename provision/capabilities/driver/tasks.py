"""The NVIDIA driver from apt: nouveau kept off the GPUs, the package source, the pinned packages, held.

Three tasks, in this order in the site playbook: nouveau-blacklist (a modprobe.d file; the initramfs is rebuilt
when it changes, since nouveau loads from there), driver-repository (source: local: one apt source file) and
nvidia-driver (the packages at the pinned version, installed, upgraded or downgraded in one apt-get, then held).
A new driver's module loads at the next boot: until then the run reports the host's reboot as pending
(provision/capabilities/driver/packages.py), and `apply --reboot` reboots such hosts (provision/commands/reboot.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from provision.capabilities.driver import heldback
from provision.capabilities.driver import packages as driver
from provision.capabilities.driver.pinned import Pin, plan_hold
from provision.capabilities.driver.settings import DriverSettings
from provision.capabilities.system.apt import APT_INSTALL, APT_UPDATE, apt_mark
from provision.core.plan import FAILED, OK, BlockTask, Change, FileWrite, Item, Plan
from provision.capabilities.system.files import plan_written

if TYPE_CHECKING:  # types only
    from provision.capabilities.host import HostFacts
    from provision.inventory.model import Host

NOUVEAU_CONF = "/etc/modprobe.d/provision-blacklist-nouveau.conf"
NOUVEAU_TEXT = ("# Managed by provision (provision_driver.blacklist_nouveau): the NVIDIA driver, not nouveau, takes the GPUs.\n"
                "blacklist nouveau\noptions nouveau modeset=0\n")
# nouveau loads from the initramfs on Debian and Ubuntu: the blacklist counts there only once it is rebuilt.
REBUILD_INITRAMFS = ["sh", "-c", "if command -v update-initramfs >/dev/null; then update-initramfs -u; "
                                 "else echo 'no update-initramfs: no initramfs to rebuild'; fi"]
SOURCE_LIST = "/etc/apt/sources.list.d/provision-nvidia.list"


class DriverTask(BlockTask[DriverSettings]):
    """A task of the driver block: skipped without one, or where not_wanted() says why; else plan_driver()."""

    tags = frozenset({"driver"})
    settings_blocks = frozenset({"driver"})

    def not_wanted(self, wanted: DriverSettings) -> str:
        return ""

    def plan_with(self, host: Host, facts: HostFacts, wanted: DriverSettings) -> Plan:
        plan = Plan(skipped=self.not_wanted(wanted))
        if not plan.skipped:
            self.plan_driver(plan, wanted, facts)
        return plan

    def plan_driver(self, plan: Plan, wanted: DriverSettings, facts: HostFacts) -> None:
        raise NotImplementedError


class NouveauBlacklist(DriverTask):
    """Playbook: `task: nouveau-blacklist`: nouveau never binds the GPUs (provision_driver.blacklist_nouveau, default on)."""

    name = "nouveau-blacklist"
    plans_from = frozenset()  # its own file
    alters = frozenset({"initramfs"})  # and its file

    def not_wanted(self, wanted: DriverSettings) -> str:
        return "" if wanted.blacklist_nouveau else "provision_driver.blacklist_nouveau is false"

    def file_paths(self, host: Host) -> list[str]:
        wanted = host.settings.driver
        return [NOUVEAU_CONF] if wanted and not self.not_wanted(wanted) else []

    def plan_driver(self, plan: Plan, wanted: DriverSettings, facts: HostFacts) -> None:
        plan_written(plan, FileWrite(NOUVEAU_CONF, NOUVEAU_TEXT), facts)
        for change in plan.changes:
            change.after_write = [REBUILD_INITRAMFS]
            change.after += ", initramfs rebuilt"


class DriverRepository(DriverTask):
    """Playbook: `task: driver-repository`: with provision_driver.source: local, the apt source line of provision_driver.repository,
    then apt-get update (the index of a source that just changed)."""

    name = "driver-repository"
    plans_from = frozenset()  # its own file
    alters = frozenset({"apt_index"})  # and its file: what apt may install, not what is installed

    def not_wanted(self, wanted: DriverSettings) -> str:
        return "" if wanted.source == "local" else f"provision_driver.source is {wanted.source}"

    def file_paths(self, host: Host) -> list[str]:
        wanted = host.settings.driver
        return [SOURCE_LIST] if wanted and not self.not_wanted(wanted) else []

    def plan_driver(self, plan: Plan, wanted: DriverSettings, facts: HostFacts) -> None:
        plan_written(plan, FileWrite(SOURCE_LIST, f"# Managed by provision (provision_driver.repository)\n{wanted.repository}\n"),
                     facts)
        for change in plan.changes:
            change.after_write = [APT_UPDATE]


class NvidiaDriver(DriverTask):
    """Playbook: `task: nvidia-driver`: the driver's packages at the pinned version (provision_driver.version, or the
    newest of provision_driver.branch), from one apt-get that installs, upgrades or downgrades them; held (provision_driver.hold)."""

    name = "nvidia-driver"
    plans_from = frozenset({"packages", "held", "driver", "system", "nvidia.gpus", "fabric"})
    # alters anything ("*"): packages, modules, units; nvidia-smi may be there, or no longer match the loaded module

    def package_names(self, host: Host) -> list[str]:
        wanted = host.settings.driver
        return driver.candidate_names(wanted) if wanted else []

    def plan_driver(self, plan: Plan, wanted: DriverSettings, facts: HostFacts) -> None:
        plan.problems += driver.unfit_for_the_gpus(wanted, facts)  # input errors: the run stops before any change
        try:
            names = driver.package_names(wanted, facts.system.os_id)
        except ValueError as exc:
            plan.failed = str(exc)
            return
        if wanted.source == "cuda" and not facts.packages.get("cuda-keyring"):
            plan.failed = ("provision_driver.source cuda: NVIDIA's CUDA repository is not set up here (no cuda-keyring package): "
                           "install it (developer.download.nvidia.com/compute/cuda/repos/<distro>/<arch>/"
                           "cuda-keyring_1.1-1_all.deb), or use source: local with your mirror")
            return
        pin = driver_pin(wanted, names)
        have = {name: version for name in names if (version := facts.packages.get(name))}  # the installed ones
        if len(have) == len(names) and all(pin.holds(version) for version in have.values()):
            plan.unchanged += [Item(name, OK, pin.what, after=version) for name, version in have.items()]
            plan_hold(plan, wanted, names, facts)
            return
        installed = [f"{name} {version}" for name, version in have.items()]
        other = sorted(set(facts.driver.packages) - set(names))
        before = ", ".join(installed) or (f"not installed (installed: {', '.join(other)})" if other else "not installed")
        held_back = heldback.refusal(wanted, facts)
        if held_back is not None:  # the host keeps the driver it runs, rather than a mismatch until a boot it cannot take
            plan.refused.append(Item(" ".join(names), FAILED, "driver packages", before, pin.version,
                                     held_back.reason, cause=held_back.cause))
            return
        loaded = facts.driver.loaded
        specs = [f"{name}={pin.apt_version}" if pin.apt_version else name for name in names]
        specs += heldback.module_packages(wanted, facts)  # the next kernel's prebuilt module of this driver
        # Another version's held packages (the branch pinned before; its fabric manager, which Ubuntu ties to that
        # driver's exact kernel-common package): apt's resolver never removes a held package to make room, so
        # they are unheld and named for removal (NAME-) in the same apt-get.
        fabric_out = other_fabric_manager(wanted, facts)
        specs += [f"{name}-" for name in [*facts.driver.held, *fabric_out] if name not in names]
        plan.changes.append(Change(
            target=" ".join(names), what="driver packages", before=before,
            after=pin.version + ("" if loaded and wanted.version == loaded else ", loaded at the next boot") +
            (f", {' '.join(fabric_out)} removed" if fabric_out else ""),
            # One apt-get: it resolves everything before it changes anything, so a package or version that does
            # not exist fails here and leaves the host as it was. Held packages (ours, the old branch's) may move.
            prepare=[APT_UPDATE],
            commands=[*([apt_mark("unhold", fabric_out)] if fabric_out else []),
                      [*APT_INSTALL, "--allow-downgrades", "--allow-change-held-packages", *specs],
                      *([apt_mark("hold", names)] if wanted.hold else [])],
            verify=lambda f: pin.misses(f.packages, f.held, wanted.hold)))


def other_fabric_manager(wanted: DriverSettings, facts: HostFacts) -> list[str]:
    """Held fabric manager packages (and NSCQ) of another driver version than the pinned one, where provision
    manages fabric manager: Ubuntu's nvidia-fabricmanager-N depends on nvidia-kernel-common-N at its driver's exact
    version, so apt cannot move that driver while they stay held (the fabric-manager task installs the new one's
    after it)."""
    if wanted.fabric_manager is False or facts.fabric is None:
        return []
    return sorted(name for name, version in facts.fabric.packages.items()
                  if name in facts.fabric.held and not driver.is_pinned(wanted, version))


def driver_pin(wanted: DriverSettings, names: list[str]) -> Pin:
    """The driver's packages as a pin: provision_driver.version exactly, or any version of its branch."""
    return Pin("driver package", tuple(names), wanted.version or f"branch {wanted.branch}",
               f"{wanted.version}-*" if wanted.version else "", matches=lambda version: driver.is_pinned(wanted, version))
