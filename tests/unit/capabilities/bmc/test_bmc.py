"""The BMC: ipmitool's event log and sensors read (capabilities/bmc/ipmi.py), the facts section, the checks and the
record task. Lines below are short, hand-written in the shapes real servers print; ipmi.py's docstring says
where each shape was seen (a Dell, a DGX-1, an HP iLO, a Supermicro, ipmi_sim)."""

from __future__ import annotations

import os
import subprocess
from types import SimpleNamespace

import pytest

from builders.facts import facts
from builders.hosts import host
from provision.capabilities.bmc import checks, facts as bmc_facts, ipmi
from provision.capabilities.bmc.facts import BmcFacts
from provision.capabilities.bmc.tasks import BmcEventRecord
from provision.capabilities.registry import FACTS, TASK_TYPES
from provision.core.checks import CRITICAL, SERVICE, WARNING
from provision.core.facts import FileFacts, Section
from provision.verify import Failure, Node, by_cause
from paths import REPO

from builders.checks import verdict

# --- sel elist ----------------------------------------------------------------------------------------------


def test_sel_lines_of_every_shape_parse():
    entries = ipmi.parse_sel("\n".join([
        "  11 | 02/06/2020 | 18:30:50 | Power Supply #0xFB | Power Supply AC lost | Asserted",  # no SDR name
        "  30 | 11/15/2019 | 18:50:40 | Power Unit Pwr Unit Status | Power off/down | Asserted",
        "  33 | 11/15/2019 | 18:52:23 | Fan Processor 1 Fan | Lower Non-critical going low  | Asserted",
        "  23 | 11/11/2025 | 01:22:54 PM WET | Power Supply #0xc1 | Failure detected () | Asserted",
        "   a | 01/01/2000 | 00:31:18 | System Firmware Progress #0x05 | Secondary CPU Initialization | Asserted",
        "   3 |  Pre-Init  |0000001897| Fan FAN2 | Lower Critical going low  | Asserted | Reading 400 < Threshold 800 RPM",
        "  1b | OEM record e0 | 000000000000000000000000",
        "Unable to Get Channel Cipher Suites",
        "",
    ]))
    assert [(e.id, e.sensor_type, e.sensor, e.event, e.direction) for e in entries] == [
        ("11", "Power Supply", "#0xfb", "Power Supply AC lost", "Asserted"),
        ("30", "Power Unit", "Pwr Unit Status", "Power off/down", "Asserted"),
        ("33", "Fan", "Processor 1 Fan", "Lower Non-critical going low", "Asserted"),
        ("23", "Power Supply", "#0xc1", "Failure detected", "Asserted"),
        ("a", "System Firmware Progress", "#0x05", "Secondary CPU Initialization", "Asserted"),
        ("3", "Fan", "FAN2", "Lower Critical going low", "Asserted"),
        ("1b", "", "OEM record e0", "000000000000000000000000", ""),
    ]
    assert entries[3].when == "11/11/2025 01:22:54 PM WET"
    assert entries[5].when == "entry 3 (BMC clock not set)"
    assert ipmi.parse_sel("SEL has no entries") == []


def test_an_entry_without_a_direction_or_a_known_type_is_kept_as_it_is():
    (entry,) = ipmi.parse_sel("   2 | 04/12/2026 | 09:16:02 | Unknown #0x0c | Initiated by power up")
    assert (entry.sensor_type, entry.sensor, entry.event, entry.direction) == ("", "Unknown #0x0c",
                                                                              "Initiated by power up", "")
    assert ipmi.trouble(entry.sensor_type, entry.event, entry.direction) is None


@pytest.mark.parametrize("sensor_type, event, direction, meaning, kind", [
    ("Power Supply", "Failure detected", "Asserted", "failed", ipmi.PSU),
    ("Power Supply", "Power Supply AC lost", "Asserted", "lost its AC input", ipmi.FEED),
    ("Power Supply", "AC lost or out-of-range", "Asserted", "AC input lost or out of range", ipmi.FEED),
    ("Power Supply", "Predictive failure", "Asserted", "predicted to fail", ipmi.PSU),
    ("Power Supply", "Presence detected", "Deasserted", "removed (presence deasserted)", ipmi.PSU),
    ("Power Supply", "Redundancy Lost", "Asserted", "redundancy lost", ipmi.REDUNDANCY),
    ("Power Unit", "AC lost", "Asserted", "AC power lost", ipmi.FEED),
    ("Power Unit", "Non-Redundant: Insufficient Resources", "Asserted", "not enough left to run", ipmi.REDUNDANCY),
    ("Fan", "Lower Critical going low", "Asserted", "Lower Critical going low", ipmi.FAN),
    ("Fan", "Lower Non-recoverable going low", "Asserted", "Lower Non-recoverable going low", ipmi.FAN),
    ("Fan", "Transition to Critical from less severe", "Asserted", "critical", ipmi.FAN),
    ("Voltage", "Lower Critical going low", "Asserted", "Lower Critical going low", ipmi.VOLTAGE),
    ("Temperature", "Upper Critical going high", "Asserted", "Upper Critical going high", ipmi.HEAT),
])
def test_power_and_cooling_failures_mean_trouble(sensor_type, event, direction, meaning, kind):
    assert ipmi.trouble(sensor_type, event, direction) == ipmi.Trouble(meaning, kind)


@pytest.mark.parametrize("sensor_type, event, direction", [
    ("Power Supply", "Presence detected", "Asserted"),  # every boot logs it
    ("Power Supply", "Failure detected", "Deasserted"),  # the end of a failure: its start is the event
    ("Power Supply", "Fully Redundant", "Asserted"),
    ("Power Unit", "Power off/down", "Asserted"),  # someone's action
    ("Fan", "Lower Non-critical going low", "Asserted"),  # quiet fans trip it
    ("Fan", "Lower Critical going high", "Asserted"),  # back above the threshold
    ("Memory", "Uncorrectable ECC", "Asserted"),  # not this capability's
    ("Event Logging Disabled", "Log area reset/cleared", "Asserted"),
])
def test_other_events_are_not_power_or_cooling_trouble(sensor_type, event, direction):
    assert ipmi.trouble(sensor_type, event, direction) is None


# Real `sel elist` lines of severity sensors (generic reading type 07h): GPU nodes whose PSU overheated or whose PSU
# fan slowed (philip-bee-h/vault_backup, vault_backup/000_workbench/02-dead-nodes.md: A100 and L40S nodes), and an
# OpenPower BMC's processor and memory, printed without a direction (open-power/op-build issue #644).
ARGON = """\
  1c | 12/10/2024 | 02:50:36 | Temperature PSU1 Over Temp | Transition to Non-recoverable | Asserted
  1d | 12/10/2024 | 02:50:39 | Temperature PSU1 Over Temp | Transition to Non-recoverable | Deasserted
  9a | 03/09/2025 | 17:57:40 | Fan PSU1 Slow FAN1 | Transition to Non-recoverable | Asserted
  9b | 03/09/2025 | 17:57:42 | Fan PSU1 Slow FAN1 | Transition to Non-recoverable | Deasserted
  34 | 03/01/2025 | 10:30:57 | Power Supply PSU1 PWR Detect | Failure detected | Asserted
  35 | 03/01/2025 | 10:31:05 | Power Supply PSU1 PWR Detect | Presence detected | Asserted
  96 | 03/06/2025 | 13:32:36 | Power Unit PowerUnit | Power off/down | Asserted
"""
OP_BUILD = """\
 15e | 09/15/2016 | 05:07:52 | Processor #0x4e | Transition to Non-recoverable
 160 | 09/15/2016 | 05:07:55 | Memory #0x4b | Transition to Non-recoverable
 161 | 09/15/2016 | 05:07:56 | Watchdog 2 | Hard reset | Asserted
"""


def test_a_psus_own_heat_and_fan_and_any_part_gone_non_recoverable_are_trouble_their_end_is_not():
    meant = [(e.sensor, ipmi.trouble(e.sensor_type, e.event, e.direction, sensor=e.sensor))
             for e in ipmi.parse_sel(ARGON + OP_BUILD)]
    assert meant == [
        ("PSU1 Over Temp", ipmi.Trouble("non-recoverable", ipmi.PSU_HEAT)), ("PSU1 Over Temp", None),
        ("PSU1 Slow FAN1", ipmi.Trouble("non-recoverable", ipmi.PSU_HEAT)), ("PSU1 Slow FAN1", None),
        ("PSU1 PWR Detect", ipmi.Trouble("failed", ipmi.PSU)), ("PSU1 PWR Detect", None),
        ("PowerUnit", None),  # someone's power-off
        ("#0x4e", ipmi.Trouble("non-recoverable", ipmi.BEYOND)), ("#0x4b", ipmi.Trouble("non-recoverable", ipmi.BEYOND)),
        ("Watchdog 2", None)]


@pytest.mark.parametrize("sensor_type, sensor, event, trouble", [
    ("Temperature", "PS1 Temp", "Upper Critical going high", ipmi.Trouble("Upper Critical going high", ipmi.PSU_HEAT)),
    ("Temperature", "PSU0_TEMP", "Upper Non-recoverable going high",
     ipmi.Trouble("Upper Non-recoverable going high", ipmi.PSU_HEAT)),
    ("Temperature", "CPU1 Temp", "Upper Critical going high", ipmi.Trouble("Upper Critical going high", ipmi.HEAT)),
    ("Temperature", "GPS1 Temp", "Upper Critical going high", ipmi.Trouble("Upper Critical going high", ipmi.HEAT)),
    ("Temperature", "Inlet Temp", "Transition to Non-recoverable", ipmi.Trouble("non-recoverable", ipmi.HEAT)),
    ("Voltage", "PSU1 12V", "Transition to Critical from less severe", ipmi.Trouble("critical", ipmi.VOLTAGE)),
    ("Power Supply", "PSU2 Status", "Transition to Non-recoverable from less severe",
     ipmi.Trouble("non-recoverable", ipmi.PSU)),
    ("Chassis", "#0xc4", "Transition to Critical from less severe", None),  # a health summary, not a part
    ("Temperature", "PSU1 Over Temp", "Transition to Critical from Non-recoverable", None),  # better, not worse
    ("Fan", "PSU2 Slow FAN1", "Transition to OK", None),
])
def test_severity_and_threshold_events_by_sensor(sensor_type, sensor, event, trouble):
    assert ipmi.trouble(sensor_type, event, "Asserted", sensor=sensor) == trouble


# --- sdr type -----------------------------------------------------------------------------------------------

DELL = """\
PS Redundancy    | 77h | ok  |  7.1 | Fully Redundant
Status           | 85h | ok  | 10.1 | Presence detected
Status           | 86h | ok  | 10.2 | Presence detected
"""
DGX1 = """\
PSU Alert        | 34h | ns  | 208.1 | Event-Only
PSU Redundancy   | E8h | ok  | 21.1 | Non-Redundant: Insufficient Resources
PSU1 Status      | E0h | ok  | 10.1 | Presence detected, Power Supply AC lost
PSU3 Status      | E2h | ok  | 10.3 | Presence detected
"""
ILO = """\
Power Supply 1   | 06h | ok  | 10.1 | 0 Watts, Presence detected, Failure detected
Power Supply 2   | 07h | ok  | 10.2 | 95 Watts, Presence detected
Power Supplies   | 08h | ok  | 10.3 | Non-Redundant: Sufficient from Redundant
"""
FANS = """\
FAN1             | 71h | ok  | 29.1 | 7200 RPM
FAN2             | 72h | lnr | 29.2 | 400 RPM
Fan3B            | 33h | cr  |  7.1 | 0 RPM
FAN4             | 74h | lnc | 29.4 | 1100 RPM
FAN5             | 75h | ns  | 29.5 | No Reading
"""


def test_sdr_lines_parse_with_their_number_as_the_log_names_it():
    psu1 = ipmi.parse_sdr(DGX1)[2]
    assert (psu1.name, psu1.number, psu1.status, psu1.entity) == ("PSU1 Status", "#0xe0", "ok", "10.1")
    assert psu1.states == ["Presence detected", "Power Supply AC lost"] and psu1.subjects == ("PSU1 Status", "#0xe0")
    assert ipmi.parse_sdr('Sensor Type "Nonexistent" not found.\nGet SDR 0000 command failed') == []
    assert [s.reading for s in ipmi.parse_sdr("CMOS Battery     | 10h | ok  |  7.1 |")] == [""]


def test_a_failed_state_counts_though_the_status_says_ok():
    dgx = {s.name: ipmi.sensor_troubles(s, "Power Supply") for s in ipmi.parse_sdr(DGX1)}
    assert dgx["PSU1 Status"] == [ipmi.Trouble("lost its AC input", ipmi.FEED)]
    assert dgx["PSU Redundancy"] == [ipmi.Trouble("not enough left to run", ipmi.REDUNDANCY)]
    assert dgx["PSU Alert"] == [] and dgx["PSU3 Status"] == []
    ilo = {s.name: ipmi.sensor_troubles(s, "Power Supply") for s in ipmi.parse_sdr(ILO)}
    assert ilo == {"Power Supply 1": [ipmi.Trouble("failed", ipmi.PSU)], "Power Supply 2": [],
                   "Power Supplies": [ipmi.Trouble("redundancy lost", ipmi.REDUNDANCY)]}
    assert all(not ipmi.sensor_troubles(s, "Power Supply") for s in ipmi.parse_sdr(DELL))


def test_a_fan_past_a_critical_threshold_fails_and_a_non_critical_or_absent_one_does_not():
    fans = {s.name: ipmi.sensor_troubles(s, "Fan") for s in ipmi.parse_sdr(FANS)}
    assert fans["FAN2"] == [ipmi.Trouble("400 RPM, below its lower non-recoverable threshold", ipmi.FAN)]
    assert fans["Fan3B"] == [ipmi.Trouble("0 RPM, critical", ipmi.FAN)]
    assert fans["FAN1"] == fans["FAN4"] == fans["FAN5"] == []


# --- since the last good run ------------------------------------------------------------------------------

LOG = ipmi.parse_sel("""\
   1 | 11/20/2026 | 10:00:00 | Power Supply PSU1 Status | Presence detected | Asserted
   2 | 11/21/2026 | 03:12:09 | Power Supply PSU2 Status | Power Supply AC lost | Asserted
   3 | 11/21/2026 | 03:12:15 | Power Supply PSU2 Status | Power Supply AC lost | Deasserted
""")


def record(line: str) -> str:
    return f"{ipmi.RECORD_HEADER}\n{line}\n"


def test_a_fan_sensor_named_for_a_power_supply_is_that_supplys_and_a_supplys_status_stays_a_supplys():
    psu_fan, = ipmi.parse_sdr("PSU1 Slow FAN1    | 5Ah | cr  | 10.1 | 0 RPM")
    assert [t.kind for t in ipmi.sensor_troubles(psu_fan, "Fan")] == [ipmi.PSU_HEAT]
    psu, = ipmi.parse_sdr("PSU1 Status      | 61h | cr  | 10.1 | ")
    assert [t.kind for t in ipmi.sensor_troubles(psu, "Power Supply")] == [ipmi.PSU]


def test_entries_after_the_recorded_one_are_judged():
    after, since = ipmi.since_record(LOG, record(LOG[1].line))
    assert after == LOG[2:] and "11/21/2026 03:12:09" in since
    assert ipmi.since_record(LOG, None) == (LOG, "(the whole log: no good run recorded yet)")
    assert ipmi.since_record(LOG, record("empty"))[0] == LOG
    gone = record("  9 | 01/02/2026 | 10:00:00 | Power Supply PSU1 Status | Presence detected | Asserted")
    assert ipmi.since_record(LOG, gone) == (LOG, "since the log was cleared (the recorded entry is gone)")
    assert ipmi.since_record(LOG, "# only a comment\n")[0] == LOG


def test_a_twin_of_the_recorded_entry_is_newer_and_ids_are_not_compared():
    """ipmi_sim numbers from 1 again after a restart, and a clock never set repeats its times: the first entry
    equal to the record is the recorded one."""
    boot = "   1 |  Pre-Init  |0000000003| Power Supply PSU1 Status | Presence detected | Asserted"
    log = ipmi.parse_sel("\n".join([boot, "   2 |  Pre-Init  |0000000090| Power Supply PSU2 Status | "
                                          "Failure detected | Asserted", boot]))
    assert ipmi.since_record(log, record(boot))[0] == log[1:]


# --- the facts section ------------------------------------------------------------------------------------


def test_the_section_is_read_by_verify_alone_and_never_names_a_password():
    assert "bmc" in FACTS.sections("verify") and "bmc" not in FACTS.sections("apply")
    assert "bmc" not in FACTS.sections("facts")
    assert "ipmitool" in bmc_facts.snippet() and " -P " not in bmc_facts.snippet()


def section(text: str, rc: int = 0) -> BmcFacts:
    return bmc_facts.parse_bmc(Section(rc, text))


def test_the_section_says_how_the_bmc_was_reached_or_why_not():
    found = section("via: lanplus 127.0.0.1 port 623 (as /etc/provision/bmc.conf says)\n@@record\n"
                    f"{ipmi.RECORD_HEADER}\nempty\n@@sel\nSEL has no entries\n@@rc 0\n@@psu\n{DELL}@@rc 0\n"
                    "@@fan\nError: Unable to establish IPMI v2 / RMCP+ session\n@@rc 1\n")
    assert found.via.startswith("lanplus 127.0.0.1") and found.sel == [] and len(found.psus) == 3
    assert found.record == f"{ipmi.RECORD_HEADER}\nempty" and found.fans is None
    assert found.errors == {"fan": "ipmitool exited 1: Error: Unable to establish IPMI v2 / RMCP+ session"}
    assert found.unusable("fan") and not found.unusable("psu")
    slow = section("via: the open interface (/dev/ipmi0)\n@@record\n@@sel\n@@rc 124\n@@psu\n")
    assert slow.record is None and "no answer from the BMC within 25 s" in slow.errors["sel"]
    assert "batch ended" in slow.errors["psu"]
    none = section(f"none: {bmc_facts.NO_BMC}")
    assert none.absent and none.message == bmc_facts.NO_BMC and none.unusable("sel") == bmc_facts.NO_BMC
    root = section("unreadable: ipmitool needs root to reach the BMC: run verify as root")
    assert not root.absent and root.via is None and root.message.startswith("ipmitool needs root")
    assert section("sh: 1: Syntax error", rc=2).message == "sh: 1: Syntax error"


FAKE_IPMITOOL = """#!/bin/sh
echo "$*" >> "$IPMITOOL_ARGS"
case "$*" in
  *"sel elist last 1") printf '%s\\n' "${LAST:-   7 | 11/21/2026 | 03:12:15 | Fan FAN1 | Lower Critical going low | Asserted}"
                      exit "${FAIL:-0}" ;;
  *"sel elist") echo "   1 | 11/20/2026 | 10:00:00 | Power Supply PSU1 Status | Presence detected | Asserted" ;;
  *Power*) echo "PSU1 Status      | 61h | ok  | 10.1 | Presence detected" ;;
  *Fan) echo "FAN1             | 71h | ok  | 29.1 | 7200 RPM" ;;
esac
"""


@pytest.fixture
def lanplus(tmp_path, monkeypatch):
    """A node whose BMC is reached over lanplus as its conf says, with a stand-in ipmitool that notes its args."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ipmitool").write_text(FAKE_IPMITOOL)
    (bin_dir / "ipmitool").chmod(0o755)
    conf = tmp_path / "bmc.conf"
    conf.write_text("# the lab's BMC\nhost 127.0.0.1\nport 623\nuser provision\n"
                    f"password_file {tmp_path / 'bmc.password'}\ncipher_suite 3\n")
    (tmp_path / "bmc.password").write_text("s3cret\n")
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("IPMITOOL_ARGS", str(tmp_path / "args"))
    return SimpleNamespace(conf=conf, record=tmp_path / "var" / "bmc-sel", args=tmp_path / "args")


def run_sh(script: str, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(["sh", "-c", script, "test", *args], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=30)


@pytest.mark.skipif(any(os.path.exists(d) for d in bmc_facts.DEVICES), reason="this machine has a BMC")
def test_the_read_reaches_the_bmc_over_lanplus_with_the_password_in_a_file(lanplus):
    out = run_sh(bmc_facts.READ, str(lanplus.conf), str(lanplus.record), "5", bmc_facts.NO_BMC)
    found = bmc_facts.parse_bmc(Section(out.returncode, out.stdout))
    assert found.via == f"lanplus 127.0.0.1 port 623 (as {lanplus.conf} says)"
    assert [e.sensor for e in found.sel] == ["PSU1 Status"] and found.psus[0].name == "PSU1 Status"
    assert found.fans[0].name == "FAN1" and found.record is None and found.errors == {}
    args = lanplus.args.read_text().splitlines()
    assert args[0] == f"-I lanplus -H 127.0.0.1 -p 623 -U provision -f {lanplus.conf.parent / 'bmc.password'} " \
                      "-C 3 sel elist"
    assert "s3cret" not in out.stdout + lanplus.args.read_text()
    lanplus.conf.write_text("user provision\n")
    out = run_sh(bmc_facts.READ, str(lanplus.conf), str(lanplus.record), "5", bmc_facts.NO_BMC)
    assert out.stdout == f"none: {lanplus.conf} names no host\n"
    out = run_sh(bmc_facts.READ, str(lanplus.conf.parent / "missing.conf"), str(lanplus.record), "5",
                 bmc_facts.NO_BMC)
    assert out.stdout == f"none: {bmc_facts.NO_BMC}\n" and out.returncode == 0


@pytest.mark.skipif(any(os.path.exists(d) for d in bmc_facts.DEVICES), reason="this machine has a BMC")
def test_the_record_is_the_logs_newest_entry_or_empty_and_a_silent_bmc_fails_it(lanplus):
    argv = bmc_facts.record_argv()
    argv[4:6] = [str(lanplus.conf), str(lanplus.record)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0 and "recorded, via lanplus 127.0.0.1" in done.stdout
    assert ipmi.recorded_entry(lanplus.record.read_text()).sensor == "FAN1"
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30, env={**os.environ,
                                                                                 "LAST": "SEL has no entries"})
    assert lanplus.record.read_text() == f"{ipmi.RECORD_HEADER}\nempty\n"
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30,
                          env={**os.environ, "LAST": "Error: Unable to establish IPMI v2 / RMCP+ session",
                               "FAIL": "1"})
    assert done.returncode == 1 and "Unable to establish" in done.stdout
    assert lanplus.record.read_text() == f"{ipmi.RECORD_HEADER}\nempty\n"  # left as it was
    argv[4] = str(lanplus.conf.parent / "missing.conf")
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    assert done.returncode == 1 and done.stdout == f"none: {bmc_facts.NO_BMC}\n"


# --- the checks ---------------------------------------------------------------------------------------------


def node(bmc: BmcFacts | None) -> Node:
    return Node("v100-1", host("v100-1"), facts(bmc=bmc), [], host=None, inventory_path="basement.yaml")


def bmc(sel: str = "", psus: str = DELL, fans: str = FANS.splitlines()[0], record: str | None = None) -> BmcFacts:
    return BmcFacts(via="the open interface (/dev/ipmi0)", record=record, sel=ipmi.parse_sel(sel),
                    psus=ipmi.parse_sdr(psus), fans=ipmi.parse_sdr(fans))


ALL = (checks.check_power_supplies_report_no_failure, checks.check_fans_report_no_failure,
       checks.check_no_power_or_cooling_failure_in_the_bmc_log_since_the_last_good_run)


def test_a_healthy_bmc_passes_every_check():
    clean = node(bmc(sel=LOG[0].line))
    assert [verdict(check, clean) for check in ALL] == [None, None, None]


@pytest.mark.parametrize("found, why", [
    (None, "the BMC was not read"),
    (BmcFacts(absent=True, message=bmc_facts.NO_BMC), f"not applicable: no BMC: {bmc_facts.NO_BMC}"),
    (BmcFacts(message="ipmitool needs root to reach the BMC"), "cannot read the BMC: ipmitool needs root"),
    (BmcFacts(via="lanplus 10.0.0.9", errors={"sel": "x", "psu": "x", "fan": "ipmitool exited 1: Error"}),
     "cannot read the BMC (lanplus 10.0.0.9): "),
])
def test_without_a_bmc_to_read_the_checks_do_not_apply_and_say_why(found, why):
    for check in ALL:
        with pytest.raises(pytest.skip.Exception, match=why.replace("(", r"\(").replace(")", r"\)")):
            check(node(found))


def test_no_sensors_of_a_kind_is_not_applicable():
    with pytest.raises(pytest.skip.Exception, match="not applicable: the BMC lists no fan sensor"):
        checks.check_fans_report_no_failure(node(bmc(fans="")))


def test_a_psu_without_ac_fails_with_its_name_and_the_redundancy_it_costs_follows_from_it():
    failed = verdict(checks.check_power_supplies_report_no_failure, node(bmc(psus=DGX1)))
    psu1, redundancy = failed.findings
    assert psu1.found == "PSU1 Status (#0xe0): lost its AC input [Presence detected, Power Supply AC lost]"
    assert "PDU" in psu1.fix and psu1.severity == CRITICAL and psu1.about == ("PSU1 Status", "#0xe0")
    assert redundancy.because == ("power_supplies_report_no_failure:PSU1 Status",)
    causes = by_cause([Failure(checks.PSU_CHECK, f.expected, f.found, f.fix, list(f.because), list(f.about))
                       for f in failed.findings])
    assert len(causes) == 1 and len(causes[0].consequences) == 1


def test_a_fan_below_its_threshold_fails_and_an_empty_fan_header_is_not_even_a_note():
    target = node(bmc(fans=FANS))
    failed = verdict(checks.check_fans_report_no_failure, target)
    assert [f.found for f in failed.findings] == [
        "FAN2 (#0x72): 400 RPM, below its lower non-recoverable threshold [400 RPM]",
        "Fan3B (#0x33): 0 RPM, critical [0 RPM]"]
    assert "replace or reseat that fan" in failed.findings[0].fix
    assert target.notes == []


def test_a_power_supply_without_a_reading_is_a_note():
    target = node(bmc(psus=DGX1.replace("PSU3 Status      | E2h | ok  | 10.3 | Presence detected",
                                        "PSU3 Status      | E2h | ns  | 10.3 | No Reading")))
    assert verdict(checks.check_power_supplies_report_no_failure, target) is not None  # PSU1's AC
    assert target.notes == ["PSU3 Status (#0xe2): no reading: a power supply pulled out, or one the BMC cannot see"]


def test_a_logged_brownout_fails_once_per_sensor_until_accepted():
    sel = "\n".join([LOG[0].line, LOG[1].line, LOG[2].line,
                     "   4 | 11/21/2026 | 03:20:00 | Power Supply PSU2 Status | Power Supply AC lost | Asserted",
                     "   5 | 11/21/2026 | 03:20:01 | Power Supply PS Redundancy | Redundancy Lost | Asserted",
                     "   6 | 11/21/2026 | 03:20:02 | Power Supply #0x62 | Predictive failure | Asserted"])
    log_check = checks.check_no_power_or_cooling_failure_in_the_bmc_log_since_the_last_good_run
    failed = verdict(log_check, node(bmc(sel=sel)))
    psu2, redundancy, predicted = failed.findings
    assert psu2.found == ("Power Supply PSU2 Status: lost its AC input x2 "
                          "(11/21/2026 03:12:09 to 11/21/2026 03:20:00)")
    assert psu2.expected.endswith("event log (the whole log: no good run recorded yet)")
    assert psu2.because == ("power_supplies_report_no_failure:PSU2 Status",) and psu2.about == ("PSU2 Status",)
    assert "--limit v100-1 --accept-bmc-events" in psu2.fix and "basement.yaml" in psu2.fix
    assert redundancy.because == ("power_supplies_report_no_failure:PS Redundancy",
                                  f"{checks.LOG_CHECK}:PSU2 Status", f"{checks.LOG_CHECK}:#0x62")
    assert predicted.severity == WARNING and predicted.found.startswith("Power Supply #0x62: predicted to fail")
    accepted = node(bmc(sel=sel, record=record(LOG[2].line)))
    assert [f.found for f in verdict(log_check, accepted).findings][0].startswith(
        "Power Supply PSU2 Status: lost its AC input (11/21/2026 03:20:00)")
    assert verdict(log_check, node(bmc(sel=sel, record=record(sel.splitlines()[-1])))) is None


def test_a_failing_psu_is_one_cause_with_its_logged_events_under_it():
    """The sensor check names the PSU; the log's events of that PSU are filed under it (by its name or number)."""
    psus = "PSU1 Status      | 61h | ok  | 10.1 | Presence detected\n" \
           "PSU2 Status      | 62h | ok  | 10.2 | Presence detected, Failure detected\n"
    sel = "   5 |  Pre-Init  |0000001897| Power Supply #0x62 | Failure detected | Asserted"
    target = node(bmc(sel=sel, psus=psus))
    failures = []
    for check in ALL:
        failed = verdict(check, target)
        failures += [Failure(check.__name__.removeprefix("check_"), f.expected, f.found, f.fix, list(f.because),
                             list(f.about)) for f in (failed.findings if failed else [])]
    (cause,) = by_cause(failures)
    assert cause.failure.check == checks.PSU_CHECK and cause.failure.found.startswith("PSU2 Status (#0x62): failed")
    assert [c.check for c in cause.consequences] == [checks.LOG_CHECK]


def test_a_psu_that_overheated_and_a_part_gone_non_recoverable_fail_once_each_for_a_person_to_service():
    log_check = checks.check_no_power_or_cooling_failure_in_the_bmc_log_since_the_last_good_run
    failed = verdict(log_check, node(bmc(sel=ARGON + OP_BUILD)))
    heat, fan, psu, processor, memory = failed.findings
    assert heat.found == "Temperature PSU1 Over Temp: non-recoverable (12/10/2024 02:50:36)"
    assert heat.fix.startswith(ipmi.NEXT_STEP[ipmi.PSU_HEAT]) and "overheated" in heat.fix and heat.because == ()
    assert fan.found == "Fan PSU1 Slow FAN1: non-recoverable (03/09/2025 17:57:40)"
    assert fan.because == ("fans_report_no_failure:PSU1 Slow FAN1",)  # the fan check names it if it reads so now
    assert psu.found == "Power Supply PSU1 PWR Detect: failed (03/01/2025 10:30:57)"
    assert processor.found == "Processor #0x4e: non-recoverable (09/15/2016 05:07:52)"
    assert memory.fix.startswith(ipmi.NEXT_STEP[ipmi.BEYOND])
    assert "no part gone non-recoverable" in memory.expected
    assert {(f.severity, f.remedy) for f in failed.findings} == {(CRITICAL, SERVICE)}


def test_every_bmc_finding_is_for_a_person_the_redundancy_that_follows_too():
    """Neither a GPU reset nor a reboot mends a supply, its feed or a fan: `provision recover` must not try."""
    failed = verdict(checks.check_power_supplies_report_no_failure, node(bmc(psus=DGX1)))
    assert [f.remedy for f in failed.findings] == [SERVICE, SERVICE]
    assert failed.findings[1].because == ("power_supplies_report_no_failure:PSU1 Status",)
    assert {f.remedy for f in verdict(checks.check_fans_report_no_failure, node(bmc(fans=FANS))).findings} == {SERVICE}


# --- the record task ----------------------------------------------------------------------------------------


def test_the_record_task_writes_only_when_asked_and_checks_what_it_wrote(monkeypatch):
    monkeypatch.setenv("PROVISION_BMC_SEL_RECORD", "/var/lib/provision/bmc-sel")
    task = TASK_TYPES["bmc-event-record"]()
    assert isinstance(task, BmcEventRecord)
    v100 = host("v100-1")
    assert "--accept-bmc-events" in task.plan(v100, facts()).skipped and task.file_paths(v100) == []
    v100 = host("v100-1", flags={"accept_bmc_events"})
    assert task.file_paths(v100) == ["/var/lib/provision/bmc-sel"]
    was = FileFacts("/var/lib/provision/bmc-sel", exists=True, content=record(LOG[1].line).encode())
    (change,) = task.plan(v100, facts(files={was.path: was})).changes
    assert change.before == "entry 2 (11/21/2026 03:12:09)" and change.commands == [bmc_facts.record_argv()]
    assert task.plan(v100, facts()).changes[0].before == "no record"
    assert change.verify(facts(files={was.path: was})) is None
    assert change.verify(facts()) == "/var/lib/provision/bmc-sel was not written"


# --- the lab's BMC (provision_lab/bmc.py) -------------------------------------------------------------------


class LabNode:
    """A lab node's disk under tmp_path, and the commands run in it."""

    def __init__(self, root):
        self.root = root
        self.spec = SimpleNamespace(name="lab-v100-1")
        self.commands: list[list[str]] = []

    def write(self, path_in_node: str, content: str, mode: int = 0o644) -> None:
        path = self.root / path_in_node.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
        path.chmod(mode)

    def exec(self, argv, check=True, timeout=60):
        self.commands.append(argv)
        return SimpleNamespace(returncode=0, stdout="", stderr="")


def test_a_lab_node_gets_a_bmc_and_the_conf_provision_reaches_it_by(tmp_path):
    from provision_lab import bmc as lab_bmc

    assert lab_bmc.BMC_CONF == bmc_facts.CONF  # the lab keeps a copy: it imports no capability
    node = LabNode(tmp_path)
    lab_bmc.install(node)
    password = (tmp_path / "etc/provision/bmc.password").read_text().strip()
    lan = (tmp_path / "usr/lib/provision-lab/bmc/lan.conf").read_text()
    assert f'user 2 true "provision" "{password}" admin 10 md5' in lan and "addr 127.0.0.1 623" in lan
    conf = (tmp_path / "etc/provision/bmc.conf").read_text()
    assert "host 127.0.0.1\nport 623\nuser provision\npassword_file /etc/provision/bmc.password\n" in conf
    assert password not in conf and password not in lab_bmc.UNIT_FILE
    for secret in ("etc/provision/bmc.password", "etc/provision/bmc.conf", "usr/lib/provision-lab/bmc/lan.conf"):
        assert (tmp_path / secret).stat().st_mode & 0o777 == 0o600
    link = tmp_path / "etc/systemd/system/multi-user.target.wants" / lab_bmc.UNIT
    assert os.readlink(link) == f"/etc/systemd/system/{lab_bmc.UNIT}"
    assert "ExecStart=/usr/bin/ipmi_sim -n -c" in (tmp_path / f"etc/systemd/system/{lab_bmc.UNIT}").read_text()
    emu = (tmp_path / "usr/lib/provision-lab/bmc/bmc.emu").read_text()
    assert "sensor_add 0x20 0 0x62 0x08 0x6f" in emu and "sensor_add 0x20 0 0x74 0x04 0x01" in emu
    assert "sensor_add 0x20 0 0x66 0x01 0x07" in emu and "sensor_add 0x20 0 0x80 0x0c 0x07" in emu  # severity sensors
    sdrs = lab_bmc.sdrs()
    assert sdrs.count("sdr type 1\n") == 4 + 2 + 2 + 1 and 'id_string		"PSU2 Status"' in sdrs
    assert 'id_string		"PSU1 Over Temp"' in sdrs  # named as the real GPU nodes' (ARGON above)


def test_the_lab_bmc_faults_are_console_commands_and_a_failed_part_stays_failed_after_a_boot(tmp_path):
    from provision_lab import bmc as lab_bmc
    from provision_lab import faults

    node = LabNode(tmp_path)
    assert set(lab_bmc.FAULTS) <= set(faults.FAULTS)
    with pytest.raises(faults.LabError, match="has no BMC"):
        lab_bmc.inject(node, "psu-failure")
    lab_bmc.install(node)
    said = [lab_bmc.inject(node, kind) for kind in lab_bmc.FAULTS]
    assert said == ["psu-failure PSU1", "ac-lost PSU1", "psu-sensor PSU1", "fan-failed FAN1", "psu-overheat PSU1",
                    "memory-nonrecoverable DIMM"]
    sent = [argv[4:] for argv in node.commands]
    assert all(argv[:2] == ["python3", "-c"] for argv in node.commands)
    assert sent == [["sensor_set_bit 0x20 0 0x61 1 1 1", "sensor_set_bit 0x20 0 0x61 1 0 1"],
                    ["sensor_set_bit 0x20 0 0x61 3 1 1", "sensor_set_bit 0x20 0 0x61 3 0 1"],
                    ["sensor_set_bit 0x20 0 0x61 1 1 1"], ["sensor_set_value 0x20 0 0x71 3 1"],
                    ["sensor_set_bit 0x20 0 0x65 6 1 1", "sensor_set_bit 0x20 0 0x65 6 0 1"],
                    ["sensor_set_bit 0x20 0 0x80 6 1 1", "sensor_set_bit 0x20 0 0x80 6 0 1"]]
    node.commands.clear()
    recorded = ["psu-failure PSU1", "psu-sensor PSU1", "fan-failed FAN1", "nic-down ens803f0"]
    faults.after_boot(node, recorded)
    assert recorded == ["psu-failure PSU1", "psu-sensor PSU1", "fan-failed FAN1", "nic-down ens803f0"]
    assert [argv[4:] for argv in node.commands] == [["sensor_set_bit 0x20 0 0x61 1 1 0",
                                                     "sensor_set_value 0x20 0 0x71 3 0"]]
    node.commands.clear()
    lab_bmc.clear(node)
    assert node.commands[0][4:] == lab_bmc.nominal() and node.commands[1][-2:] == ["sel", "clear"]


def test_accepting_bmc_events_adds_the_record_task_to_any_playbook_once():
    from provision.commands.playbook import with_flag_tasks
    from provision.capabilities.gpu.tasks import PowerLimit

    accepted = frozenset({"accept_bmc_events"})
    tasks = with_flag_tasks([PowerLimit()], accepted)
    assert [t.name for t in tasks] == ["gpu-power-limit", "bmc-event-record"]
    assert with_flag_tasks(tasks, accepted) == tasks
    assert [t.name for t in with_flag_tasks([PowerLimit()], frozenset())] == ["gpu-power-limit"]
    shipped = (REPO / "playbooks").glob("*.yaml")
    assert not any("bmc-event-record" in book.read_text() for book in shipped)  # the flag's alone
