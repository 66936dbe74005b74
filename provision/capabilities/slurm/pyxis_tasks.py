"""The tasks of provision_slurm.containers: enroot and pyxis pinned and held, then pyxis's line in the plugin stack
and enroot's paths. slurmd reads the plugin stack when it starts: the slurm-daemons task restarts it where the
stack's files or the plugin's package changed since it started (pyxis.slurmd_reads)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from provision.capabilities.driver.pinned import plan_pinned
from provision.capabilities.slurm.pyxis import (
    ENROOT_DROP_IN, PACKAGES_CHECK, PLUGSTACK_CHECK, PYXIS_PACKAGE, PYXIS_SHIPPED_CONF, TMPFILES,
    SlurmContainers, enroot_drop_in, includes_drop_ins, plugin_lines, plugin_path, plugstack_dir, plugstack_paths,
    tmpfiles)
from provision.capabilities.slurm.settings import SlurmSettings
from provision.capabilities.slurm.tasks import SlurmTask
from provision.capabilities.system.files import plan_file
from provision.core.plan import OK, FileWrite, Item, Plan

if TYPE_CHECKING:  # types only
    from provision.capabilities.host import HostFacts
    from provision.inventory.model import Host

NOT_SET = "provision_slurm.containers is not set"


class ContainerTask(SlurmTask):
    """A task of provision_slurm.containers: skipped where it is not set."""

    def plan_with(self, host: Host, facts: HostFacts, slurm: SlurmSettings) -> Plan:
        if slurm.containers is None:
            plan = Plan()
            plan.skipped = NOT_SET
            return plan
        return self.plan_containers(slurm, slurm.containers, facts)

    def plan_containers(self, slurm: SlurmSettings, containers: SlurmContainers, facts: HostFacts) -> Plan:
        raise NotImplementedError


class EnrootPyxis(ContainerTask):
    """Playbook: `task: enroot-pyxis`: enroot (and enroot+caps) at provision_slurm.containers.enroot and
    nvslurm-plugin-pyxis at .pyxis, each set from one apt-get, held (.hold); on every node of the cluster, since
    srun loads pyxis too."""

    name = "enroot-pyxis"
    tags = frozenset({"slurm", "packages", "containers"})
    plans_from = frozenset({"packages", "held"})
    alters = frozenset({"packages", "held"})

    def package_names(self, host: Host) -> list[str]:
        slurm = host.settings.slurm
        return slurm.containers.package_names() if slurm and slurm.containers else []

    def plan_containers(self, slurm: SlurmSettings, containers: SlurmContainers, facts: HostFacts) -> Plan:
        plan = Plan()
        plan_pinned(plan, containers, containers.enroot_pin(), facts)
        plan_pinned(plan, containers, containers.pyxis_pin(), facts)  # it depends on enroot: after it
        return plan


class PyxisPlugstack(ContainerTask):
    """Playbook: `task: pyxis-plugstack`: pyxis's plugin line (as its package ships it) in
    CONF_DIR/plugstack.conf.d/pyxis.conf, with plugstack.conf including that folder; enroot's paths in
    /etc/enroot/enroot.conf.d/provision.conf, and their directories (tmpfiles.d, made again at every boot)."""

    name = "pyxis-plugstack"
    tags = frozenset({"slurm", "files", "containers"})
    plans_from = frozenset({"packages"})  # the package's own plugstack line, read as a file once it is installed
    alters = frozenset()  # its files only

    def file_paths(self, host: Host) -> list[str]:
        slurm = host.settings.slurm
        if slurm is None or slurm.containers is None:
            return []
        return [PYXIS_SHIPPED_CONF, *plugstack_paths(slurm.conf_dir), ENROOT_DROP_IN, TMPFILES]

    def plan_containers(self, slurm: SlurmSettings, containers: SlurmContainers, facts: HostFacts) -> Plan:
        plan = Plan()
        self.plan_plugstack(plan, slurm.conf_dir, facts)
        if plan.failed or plan.skipped:  # no half of it: enroot's files go with the plugin that uses them
            return plan
        for want, after in ((FileWrite(ENROOT_DROP_IN, enroot_drop_in(containers)), []),
                            (FileWrite(TMPFILES, tmpfiles(containers)), [["systemd-tmpfiles", "--create", TMPFILES]])):
            change, item = plan_file(want, facts.files.get(want.path))
            if change:
                change.after_write, change.cause = after, PLUGSTACK_CHECK
                plan.changes.append(change)
            plan.unchanged += [item] if item else []
        return plan

    @staticmethod
    def plan_plugstack(plan: Plan, conf_dir: str, facts: HostFacts) -> None:
        shipped = (facts.files[PYXIS_SHIPPED_CONF].text if PYXIS_SHIPPED_CONF in facts.files else None) or ""
        if not shipped:  # a state, not a failure: --check before the install, or an install that failed (its own)
            plan.skipped = (f"waits for {PYXIS_PACKAGE}, which the enroot-pyxis task installs: its plugin line is "
                            f"read from {PYXIS_SHIPPED_CONF}")
            return
        if plugin_path(shipped) is None:
            plan.failed = (f"{PYXIS_SHIPPED_CONF} names no spank_pyxis.so: is {PYXIS_PACKAGE} pyxis's own package "
                           "(make deb)?")
            plan.failed_check = PACKAGES_CHECK
            return
        stack, drop_in = plugstack_paths(conf_dir)
        current = facts.files[stack].text if stack in facts.files else None
        if current is not None and plugin_path(current):
            plan.unchanged.append(Item(stack, OK, "plugin stack", after=f"names {plugin_path(current)} itself"))
            return
        if current is not None and not includes_drop_ins(current, conf_dir):
            plan.failed = (f"{stack} does not include {plugstack_dir(conf_dir)}: add the line `include "
                           f"{plugstack_dir(conf_dir)}/*.conf` to it (provision leaves a plugstack.conf it did not "
                           "write as it is)")
            plan.failed_check = PLUGSTACK_CHECK
            return
        header = "# Written by provision (provision_slurm.containers): pyxis's plugin line, as its package ships it.\n"
        wanted = [FileWrite(drop_in, header + "\n".join(plugin_lines(shipped)) + "\n")]
        if current is None:  # Debian's slurm-wlm-basic-plugins ships one; a Slurm built from source does not
            wanted.append(FileWrite(stack, f"include {plugstack_dir(conf_dir)}/*.conf\n"))
        for want in wanted:
            change, item = plan_file(want, facts.files.get(want.path))
            if change:
                change.cause = PLUGSTACK_CHECK
                plan.changes.append(change)
            plan.unchanged += [item] if item else []
