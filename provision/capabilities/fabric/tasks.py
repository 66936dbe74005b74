"""NVIDIA Fabric Manager with the driver (provision_driver.fabric_manager): on NVSwitch boards, its packages at the
driver's exact version, held, its service enabled, and started once the driver of that version is loaded.

One task, `fabric-manager`, right after `nvidia-driver` in the site playbook, so in the same batch as the driver:
installed before the reboot that loads a new driver, and started by it (the service is enabled). It is a task of
its own rather than more packages in the driver's apt-get because whether a host wants it comes from its facts
(NVSwitch present) and a failure to install it (a source without fabric manager packages) must not undo or hold
back the driver itself. It starts the service only when the loaded driver is the fabric manager's version: before
the reboot that loads a new driver it would only abort on the mismatch, and the driver's own pending reboot
(driver/packages.py) already covers that host. Where no systemd runs it cannot start it at all: the host's
reboot is pending until it does (packages.reboot_pending).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from provision.capabilities.driver import heldback
from provision.capabilities.driver.pinned import Pin, plan_pinned
from provision.capabilities.driver.tasks import DriverTask
from provision.capabilities.fabric import packages as fabric
from provision.capabilities.fabric.facts import UNIT
from provision.capabilities.system.apt import APT_INSTALL
from provision.core.plan import OK, Change, Item, Plan

if TYPE_CHECKING:  # types only
    from provision.capabilities.driver.settings import DriverSettings
    from provision.capabilities.host import HostFacts
    from provision.inventory.model import Host

# The checks that report what this task would change (verify files as_intended's findings under them).
VERSION_CHECK = "fabric_manager_is_the_drivers_version"
RUNNING_CHECK = "fabric_manager_is_running"


class FabricManager(DriverTask):
    """Playbook: `task: fabric-manager`: where the host has NVSwitches (provision_driver.fabric_manager auto, or
    true), nvidia-fabricmanager and libnvidia-nscq at the driver's exact version from one apt-get, held
    (provision_driver.hold), nvidia-fabricmanager.service enabled, and (re)started when the loaded driver is
    that version and systemd runs."""

    name = "fabric-manager"
    tags = frozenset({"driver", "fabric"})
    plans_from = frozenset({"packages", "held", "driver", "system", "fabric", "daemons"})
    # Once it runs, the GPUs register with the fabric (their fabric.state): the GPUs' facts change too.
    alters = frozenset({"packages", "held", "fabric", "daemons", "nvidia.gpus"})

    def not_wanted(self, wanted: DriverSettings) -> str:
        return "provision_driver.fabric_manager is false: left alone" if wanted.fabric_manager is False else ""

    def package_names(self, host: Host) -> list[str]:
        wanted = host.settings.driver
        return fabric.candidate_names(wanted) if wanted and not self.not_wanted(wanted) else []

    def fact_sections(self, host: Host) -> list[str]:
        return ["daemons"]  # whether it runs

    def plan_driver(self, plan: Plan, wanted: DriverSettings, facts: HostFacts) -> None:
        plan.problems += fabric.board_problems(wanted, facts)  # input errors: the run stops before any change
        plan.skipped = "" if plan.problems else fabric.not_wanted(wanted, facts)
        if plan.problems or plan.skipped:
            return
        kept = heldback.as_kept(wanted, facts)  # the driver's move refused here: held back with it, at the driver kept
        if kept is not wanted:
            plan.unchanged.append(Item("fabric manager", OK, "held back", after=f"driver {kept.version}'s",
                                       message=f"the driver's move to {wanted.version or 'branch ' + str(wanted.branch)} "
                                               f"is refused here (nvidia-driver says why): it stays with {kept.version}"))
            wanted = kept
        try:
            names = fabric.package_names(wanted, facts.system.os_id)
        except ValueError as exc:
            plan.failed, plan.failed_check = str(exc), VERSION_CHECK
            return
        version = fabric.the_drivers_version(wanted, facts)
        if version is None:
            plan.skipped = (f"driver branch {wanted.branch} is not installed yet: fabric manager follows its exact "
                            "version once the nvidia-driver task has installed it")
            return
        self.plan_other_branch_out(plan, names, facts)
        plan_pinned(plan, wanted, Pin("fabric manager package", tuple(names), version, f"{version}-*",
                                      cause=VERSION_CHECK), facts)
        # Its packages change (not only their hold): the running one is the old binary.
        installing = any(change.what != "apt hold" for change in plan.changes)
        self.plan_enabled(plan, facts)
        self.plan_started(plan, version, installing, facts)

    @staticmethod
    def plan_other_branch_out(plan: Plan, names: list[str], facts: HostFacts) -> None:
        """Another branch's (or naming's) fabric manager packages removed first: they conflict with these
        (Provides/Conflicts nvidia-fabricmanager), and apt's resolver never removes a held package to make room."""
        others = sorted(set(facts.fabric.packages if facts.fabric else {}) - set(names))
        if others:
            plan.changes.append(Change(
                target=" ".join(others), what="fabric manager packages of another branch", before="installed",
                after="removed", commands=[[*APT_INSTALL, "--allow-change-held-packages", *(f"{n}-" for n in others)]],
                verify=lambda f: None if f.fabric is None or not set(others) & set(f.fabric.packages)
                else f"still installed: {' '.join(sorted(set(others) & set(f.fabric.packages)))}"))

    @staticmethod
    def plan_enabled(plan: Plan, facts: HostFacts) -> None:
        """The FM guide: the package installs the unit, the administrator enables it (it then starts at each boot)."""
        state = facts.fabric.unit if facts.fabric else ""
        if state == "enabled":
            plan.unchanged.append(Item(UNIT, OK, "unit", after="enabled"))
            return
        plan.changes.append(Change(
            target=UNIT, what="unit", before=state or "not installed", after="enabled",
            commands=[["systemctl", "enable", UNIT]],
            verify=lambda f: None if f.fabric and f.fabric.unit == "enabled" else f"{UNIT} is not enabled"))

    @staticmethod
    def plan_started(plan: Plan, version: str, installing: bool, facts: HostFacts) -> None:
        """Restarted where systemd runs and the loaded driver is its version: not running, or its packages just
        changed (the running one is the old binary)."""
        loaded = facts.driver.loaded
        if loaded != version or not facts.system.systemd_running:
            return  # a new driver loads at the next boot (the driver's pending reboot); no systemd: packages.reboot_pending
        if fabric.running(facts) and not installing:
            plan.unchanged.append(Item("nvidia-fabricmanager", OK, "service", after="running"))
            return
        plan.changes.append(Change(
            target="nvidia-fabricmanager", what="service", before="running" if fabric.running(facts) else "not running",
            after=f"running with driver {loaded}", commands=[["systemctl", "restart", UNIT]],
            cause=VERSION_CHECK if installing else RUNNING_CHECK,  # a new version restarts it
            verify=lambda f: None if fabric.running(f)
            else f"{UNIT} did not stay up: journalctl -u nvidia-fabricmanager says why"))
