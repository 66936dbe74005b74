"""NCCL's configuration: /etc/nccl.conf and an environment file for launch wrappers, both from the inventory's
nccl block, written only once the node's interfaces are what the settings mean (provision/capabilities/nccl/interfaces.py).

A node where NCCL would use a port that is down, missing, slow or not the fabric fails this task with the
interfaces named, and nothing is written there: a wrong file is worse than the old one. Other nodes go on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from provision.capabilities.nccl import interfaces as nccl
from provision.capabilities.nccl.settings import NcclSettings
from provision.core.plan import BlockTask, Plan
from provision.capabilities.system.files import plan_rendered

if TYPE_CHECKING:  # types only
    from provision.capabilities.host import HostFacts
    from provision.inventory.model import Host

TEMPLATES = {"conf_path": "nccl.conf.j2", "env_file": "nccl.env.j2"}


class NcclFiles(BlockTask[NcclSettings]):
    """Playbook: `task: nccl-files` (no parameters)."""

    name = "nccl-files"
    plans_from = frozenset({"interfaces", "rdma"})  # and its own files
    alters = frozenset()  # its files only
    tags = frozenset({"nccl"})
    settings_blocks = frozenset({"nccl"})

    def template_names(self) -> list[tuple[str, str]]:
        return [("task", name) for name in TEMPLATES.values()]

    def file_paths(self, host: Host) -> list[str]:
        settings = host.settings.nccl
        return [getattr(settings, key) for key in TEMPLATES] if settings else []

    def plan_with(self, host: Host, facts: HostFacts, settings: NcclSettings) -> Plan:
        plan = Plan()
        wrong = nccl.node_problems(settings, facts)
        if wrong:
            plan.failed = "; ".join(map(str, wrong)) + " (nothing written)"
            plan.failed_check = "nccl_interfaces_are_up_at_speed"
            return plan
        assert facts.interfaces is not None  # unread, they are one of node_problems' findings
        selection = nccl.select(settings.socket_ifname, facts.interfaces)
        context = {"host": host, "settings": host.settings, "variables": settings.variables(),
                   "selection": selection.describe()}
        files = [(getattr(settings, key), template, "0644") for key, template in TEMPLATES.items()]
        plan_rendered(plan, self.template_folder(), files, context, facts)
        return plan
