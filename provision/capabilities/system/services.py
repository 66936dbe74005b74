"""A systemd unit enabled at boot (and started now where systemd runs).

`systemctl enable` works without a running systemd (it only makes the
.wants/ links), which is how images are built and how lab nodes get their
boot units; starting needs systemd, so it happens only where systemd runs.
With `root: DIR` the unit is enabled in the tree under DIR (`systemctl
--root`), never started: an image being prepared, or the demo's sandbox.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from provision.core.errors import Problem
from provision.core.facts import UnitRef
from provision.core.plan import Change, Item, OK, Plan, Task

if TYPE_CHECKING:  # types only
    from provision.capabilities.host import HostFacts
    from provision.inventory.model import Host


class ServiceEnabled(Task):
    """Playbook params: unit (a unit name), start (start it now where systemd runs; default true), when,
    root (an absolute directory: enable the unit in that tree instead of the host's own)."""

    name = "service"
    tags = frozenset({"services"})
    plans_from = frozenset({"units.enabled", "system"})
    alters = frozenset({"units.enabled", "daemons"})
    PARAMS = ("unit", "start", "when", "root")

    def check_params(self, file: str) -> list[Problem]:
        problems = []
        if not isinstance(self.params.get("unit"), str) or "." not in self.params.get("unit", ""):
            problems.append(Problem(file, f"task {self.name}", "unit", "is required: a unit name like foo.service"))
        root = self.params.get("root")
        if root is not None and not (isinstance(root, str) and root.startswith("/")):
            problems.append(Problem(file, f"task {self.name}", "root", f"must be an absolute path, got {root!r}"))
        for key in sorted(set(self.params) - set(self.PARAMS)):
            problems.append(Problem(file, f"task {self.name}", key, "unknown parameter",
                                    f"allowed: {', '.join(self.PARAMS)}"))
        return problems

    @property
    def unit(self) -> UnitRef:
        return UnitRef(self.params["unit"], self.params.get("root"))

    def unit_names(self, host: Host) -> list[UnitRef]:
        return [self.unit] if self.applies(host) else []

    def plan_where_set(self, host: Host, facts: HostFacts) -> Plan:
        plan = Plan()
        unit = self.unit
        state = facts.units.get(unit.key, "not-found")
        if state == "enabled":
            plan.unchanged.append(Item(unit.name, OK, "unit", after="enabled"))
            return plan
        now = facts.system.systemd_running and self.params.get("start", True) and unit.root is None
        plan.changes.append(Change(
            target=unit.name, what="unit", before=state, after="enabled and started" if now else "enabled",
            commands=[unit.systemctl("enable", *(["--now"] if now else []))],
            verify=lambda f: None if f.units.get(unit.key) == "enabled" else f"{unit.name} is {f.units.get(unit.key)}",
        ))
        return plan
