"""The bmc-event-record task: with `apply --accept-bmc-events`, the BMC's event log is judged up to now.

verify judges the log's power and cooling failures since the last good run (checks.py). After a repair (a PSU
replaced, its feed fixed), the operator says so: `provision apply INVENTORY --limit HOST --accept-bmc-events`
records the log's newest entry on the node, and verify judges only the entries after it. The flag adds this task
to the run (its RunFlag's adds_task, commands/playbook.py with_flag_tasks: no shipped playbook lists it); a playbook that names it does
nothing without the flag. apply does not read the BMC otherwise (a slow BMC would slow every run), so it never
records events nobody looked at.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from provision.capabilities.bmc import facts as bmc_facts
from provision.capabilities.bmc import ipmi
from provision.capabilities.capability import RunFlag
from provision.core.plan import Change, Plan, Task

if TYPE_CHECKING:  # types only
    from provision.capabilities.host import HostFacts
    from provision.inventory.model import Host

ACCEPT_BMC_EVENTS = RunFlag(
    "accept_bmc_events", "--accept-bmc-events",
    "The power and cooling failures the BMC logged are dealt with (a PSU replaced, its feed fixed): record the BMC "
    "event log's newest entry; verify then judges only the entries after it.", adds_task="bmc-event-record")
ACCEPT = ACCEPT_BMC_EVENTS.option


class BmcEventRecord(Task):
    name = "bmc-event-record"
    tags = frozenset({"bmc"})
    plans_from = frozenset()  # its own record
    alters = frozenset({"bmc.record"})

    def file_paths(self, host: Host) -> list[str]:
        return [bmc_facts.record_path()] if ACCEPT_BMC_EVENTS.set_for(host) else []

    def plan_where_set(self, host: Host, facts: HostFacts) -> Plan:
        plan = Plan()
        if not ACCEPT_BMC_EVENTS.set_for(host):
            plan.skipped = f"the BMC's event log is recorded as judged only with {ACCEPT}"
            return plan
        path = bmc_facts.record_path()
        was = facts.files.get(path)
        entry = ipmi.recorded_entry(was.text) if was is not None and was.text is not None else None
        before = ("no record" if was is None or not was.exists else
                  f"entry {entry.id} ({entry.when})" if entry else "a record of an empty log")
        plan.changes.append(Change(
            target="host", what="BMC event log record", before=before,
            after="the log's newest entry: verify judges only the entries after it",
            commands=[bmc_facts.record_argv()], verify=lambda f, path=path: _check_record(f, path)))
        return plan


def _check_record(facts: HostFacts, path: str) -> str | None:
    written = facts.files.get(path)
    if written is None or not written.exists or ipmi.RECORD_HEADER not in (written.text or ""):
        return f"{path} was not written"
    return None
