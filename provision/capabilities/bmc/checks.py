"""BMC checks: the power supplies and fans as the BMC's sensors read them now, and the power and cooling failures its
event log holds since the last good run (a brownout that tripped a PSU and came back leaves only that), with any
part the log says went non-recoverable.

"Since the last good run": the node keeps the log's newest entry at the last acceptance in
/var/lib/provision/bmc-sel (`provision apply --accept-bmc-events` writes it, after the repair); the entries after
it are judged. No record yet: the whole log. The recorded entry gone (the log cleared with `ipmitool sel clear`,
or overwritten): every entry left. See ipmi.since_record.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, overload

from collections import Counter
from dataclasses import replace

import pytest

from provision.capabilities.bmc import ipmi
from provision.core.checks import CRITICAL, SERVICE, WARNING, Finding, fail_each, note

if TYPE_CHECKING:  # types only
    from provision.verify.model import Node

PSU_CHECK = "power_supplies_report_no_failure"
FAN_CHECK = "fans_report_no_failure"
LOG_CHECK = "no_power_or_cooling_failure_in_the_bmc_log_since_the_last_good_run"
# Every BMC finding is a part or its power or air: a person repairs it (a supply, its feed, a fan, the airflow),
# and neither a GPU reset nor a reboot does; the logged events stay until accepted after the repair.
REMEDY = SERVICE
# The sensor check whose failure, on the same sensor, a logged event of this type is evidence of.
LEAD = {"Power Supply": PSU_CHECK, "Fan": FAN_CHECK, "Cooling Device": FAN_CHECK}


@overload
def bmc_answer(node: Node, what: Literal["sel"]) -> list[ipmi.SelEntry]: ...
@overload
def bmc_answer(node: Node, what: Literal["psu", "fan"]) -> list[ipmi.SdrSensor]: ...
def bmc_answer(node: Node, what: str) -> list[ipmi.SelEntry] | list[ipmi.SdrSensor]:
    """The BMC's answer to one command (sel, psu, fan), or skip saying why there is none to judge."""
    bmc = node.facts.bmc
    if bmc is None:
        pytest.skip("the BMC was not read")
    if bmc.absent:
        pytest.skip(f"not applicable: no BMC: {bmc.message}")
    why = bmc.unusable(what)
    if why:
        pytest.skip(f"cannot read the BMC{f' ({bmc.via})' if bmc.via else ''}: {why}")
    answers: dict[str, list[ipmi.SelEntry] | list[ipmi.SdrSensor] | None] = {"sel": bmc.sel, "psu": bmc.psus,
                                                                                "fan": bmc.fans}
    return answers[what] or []


def severity(troubles: list[ipmi.Trouble]) -> str:
    """Critical, but a predicted failure alone: the part still works."""
    return WARNING if all(t.meaning == "predicted to fail" for t in troubles) else CRITICAL


def sensor_findings(node: Node, check: str, sensor_type: str, sensors: list[ipmi.SdrSensor], expected: str) -> None:
    """One finding per sensor in trouble; a redundancy lost follows from the parts of its kind that failed."""
    findings, failed = [], []
    redundancy = []
    for sensor in sensors:
        troubles = ipmi.sensor_troubles(sensor, sensor_type)
        if not troubles:
            # A PSU that does not read may be one pulled out (check_ipmi_sensor_v3 issue #66, a Supermicro); an
            # empty fan header reads so on every board that has one, and "Disabled" is a part not fitted.
            if sensor_type == "Power Supply" and sensor.status == "ns" and sensor.reading == "No Reading":
                note(node, f"{sensor.name} ({sensor.number}): no reading: a power supply pulled out, or one the "
                           "BMC cannot see")
            continue
        finding = Finding(expected, f"{sensor.name} ({sensor.number}): "
                          f"{', '.join(dict.fromkeys(t.meaning for t in troubles))} [{sensor.reading}]",
                          ipmi.NEXT_STEP[troubles[0].kind], about=sensor.subjects, severity=severity(troubles),
                          remedy=REMEDY)
        if all(t.kind == ipmi.REDUNDANCY for t in troubles):
            redundancy.append(finding)  # a redundancy state follows from a part of its own that failed
        else:
            failed.append(sensor)
            findings.append(finding)
    leads = tuple(f"{check}:{sensor.name}" for sensor in failed)
    findings += [replace(f, because=leads) for f in redundancy]
    fail_each(findings)


def check_power_supplies_report_no_failure(node: Node) -> None:
    """Reads: the BMC's power supply sensors (ipmitool sdr type "Power Supply", as root).
    Next step: check the failed supply's feed (cord, PDU, circuit) or replace it; drain the node until every supply
    works"""
    sensors = bmc_answer(node, "psu")
    if not sensors:
        pytest.skip('not applicable: the BMC lists no power supply sensor (ipmitool sdr type "Power Supply")')
    sensor_findings(node, PSU_CHECK, "Power Supply", sensors,
                    "every power supply present, fed and working, as the BMC's sensors read now")


def check_fans_report_no_failure(node: Node) -> None:
    """Reads: the BMC's fan sensors (ipmitool sdr type Fan, as root).
    Next step: replace or reseat the fan and check the airflow"""
    sensors = bmc_answer(node, "fan")
    if not sensors:
        pytest.skip("not applicable: the BMC lists no fan sensor (ipmitool sdr type Fan)")
    sensor_findings(node, FAN_CHECK, "Fan", sensors,
                    "every fan turning above its critical thresholds, as the BMC's sensors read now")


def check_no_power_or_cooling_failure_in_the_bmc_log_since_the_last_good_run(node: Node) -> None:
    """One finding per sensor that logged trouble (a power supply, fan, voltage or temperature failure, a power
    supply's own overheating, any part the BMC declared non-recoverable); a PSU or fan failing now is the cause of its own events (filed
    under that sensor check's finding), and a redundancy lost follows from the parts that logged a failure.

    Reads: the BMC's event log (ipmitool sel, as root) after the entry recorded at the last acceptance
    (/var/lib/provision/bmc-sel).
    Next step: repair what the entry names (a supply's feed, a fan, the cooling); then `provision apply INVENTORY
    --limit NODE --accept-bmc-events` records the log as judged
    """
    entries = bmc_answer(node, "sel")
    after, since = ipmi.since_record(entries, node.facts.bmc.record if node.facts.bmc else None)  # read: bmc_answer
    logged: dict[tuple[str, str], list[tuple[ipmi.SelEntry, ipmi.Trouble]]] = {}
    for entry in after:
        found = ipmi.trouble(entry.sensor_type, entry.event, entry.direction, sensor=entry.sensor)
        if found:
            logged.setdefault((entry.sensor_type, entry.sensor), []).append((entry, found))
    accept = (f"once repaired, `{node.apply_command('--accept-bmc-events')}` "
              "records the log as judged (or clear it on the node: ipmitool sel clear)")
    failed = [sensor for (_kind, sensor), hits in logged.items()
              if any(t.kind != ipmi.REDUNDANCY for _e, t in hits)]
    findings = []
    for (kind, sensor), hits in logged.items():
        said = Counter(t.meaning for _e, t in hits)
        first, last = hits[0][0], hits[-1][0]
        when = first.when if len(hits) == 1 else f"{first.when} to {last.when}"
        troubles = [t for _e, t in hits]
        leads: tuple[str, ...] = (f"{LEAD[kind]}:{sensor}",) if kind in LEAD else ()
        if all(t.kind == ipmi.REDUNDANCY for t in troubles):
            leads += tuple(f"{LOG_CHECK}:{other}" for other in failed)
        findings.append(Finding(
            f"no power supply, fan, voltage or temperature failure, and no part gone non-recoverable, in the BMC's "
            f"event log {since}",
            f"{kind + ' ' if kind else ''}{sensor}: "
            + "; ".join(f"{meaning}{f' x{n}' if n > 1 else ''}" for meaning, n in said.items()) + f" ({when})",
            f"{ipmi.NEXT_STEP[troubles[0].kind]}; {accept}", because=leads, about=(sensor,),
            severity=severity(troubles), remedy=REMEDY))
    fail_each(findings)
