"""A systemd unit enabled at boot (and started now where systemd runs).

`systemctl enable` works without a running systemd (it only makes the
.wants/ links), which is how images are built and how lab nodes get their
boot units; starting needs systemd, so it happens only where systemd runs.
"""

from __future__ import annotations

from provision.errors import Problem
from provision.tasks.base import Change, Item, OK, Plan, Task


class ServiceEnabled(Task):
    """Playbook params: unit (a unit name), start (start it now where systemd runs; default true), when."""

    name = "service"
    tags = frozenset({"services"})

    def check_params(self, file):
        problems = []
        if not isinstance(self.params.get("unit"), str) or "." not in self.params.get("unit", ""):
            problems.append(Problem(file, f"task {self.name}", "unit", "is required: a unit name like foo.service"))
        for key in sorted(set(self.params) - {"unit", "start", "when"}):
            problems.append(Problem(file, f"task {self.name}", key, "unknown parameter", "allowed: unit, start, when"))
        return problems

    def applies(self, host) -> bool:
        when = self.params.get("when")
        return not when or getattr(host.settings, when, None) is not None

    def unit_names(self, host):
        return [self.params["unit"]] if self.applies(host) else []

    def plan(self, host, facts):
        plan = Plan()
        unit = self.params["unit"]
        if not self.applies(host):
            plan.skipped = f"{self.params['when']} not set"
            return plan
        state = facts.units.get(unit, "not-found")
        if state == "enabled":
            plan.unchanged.append(Item(unit, OK, "unit", after="enabled"))
            return plan
        now = facts.system.systemd_running and self.params.get("start", True)
        plan.changes.append(Change(
            target=unit, what="unit", before=state, after="enabled and started" if now else "enabled",
            commands=[["systemctl", "enable", *(["--now"] if now else []), unit]],
            verify=lambda f: None if f.units.get(unit) == "enabled" else f"{unit} is {f.units.get(unit)}",
        ))
        return plan
