"""The BMC end to end on a lab of its own (tests/lab/bmc.yaml: one 4x V100 node, its BMC OpenIPMI's ipmi_sim,
reached by the real ipmitool over lanplus): a clean node passes the BMC checks; each BMC fault fails its own check
with one finding naming the PSU, fan or part and what happened (a PSU's own overheating and a memory sensor gone
non-recoverable logged as the severity sensors of real GPU nodes log them), and nothing else; after `lab fault NODE clear` (the
sensors healthy, `ipmitool sel clear`) it passes. An event accepted with `apply --accept-bmc-events` is judged
no more, a later one is; a failed PSU stays failed through the node's reboot."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.lab

NODE = "lab-v100-1"
BMC_YAML = Path(__file__).parent / "bmc.yaml"
PSU_CHECK = "power_supplies_report_no_failure"
FAN_CHECK = "fans_report_no_failure"
LOG_CHECK = "no_power_or_cooling_failure_in_the_bmc_log_since_the_last_good_run"


@pytest.fixture(scope="module")
def bmc_lab(lab_alone):
    with lab_alone("bmc", lambda cluster: cluster.lab("up", "--like", str(BMC_YAML))) as cluster:
        code, result = cluster.apply()
        assert code == 0, result
        yield cluster


def verify(lab) -> tuple[int, dict]:
    """`provision verify --json` of the node: (exit code, its verdict)."""
    proc = lab.provision("verify", str(lab.inventory), "--ssh-config", str(lab.ssh_config), "--json")
    assert proc.stdout.strip(), proc.stderr
    (verdict,) = json.loads(proc.stdout)["hosts"]
    return proc.returncode, verdict


def passes(lab) -> dict:
    code, verdict = verify(lab)
    assert code == 0 and not verdict["failures"], verdict["failures"]
    return verdict


def test_a_clean_node_passes_the_bmc_checks_read_over_lanplus(bmc_lab):
    verdict = passes(bmc_lab)
    assert {PSU_CHECK, FAN_CHECK, LOG_CHECK} <= set(verdict["passed"])
    conf = bmc_lab.node_file(NODE, "/etc/provision/bmc.conf").read_text()
    password = bmc_lab.node_file(NODE, "/etc/provision/bmc.password").read_text().strip()
    assert "host 127.0.0.1" in conf and password not in conf and len(password) == 16
    said = bmc_lab.ssh(NODE, "ipmitool -I lanplus -H 127.0.0.1 -U provision -f /etc/provision/bmc.password -C 3 "
                             "sdr type 'Power Supply'")
    assert said.returncode == 0 and "PSU2 Status      | 62h | ok  | 10.2 | Presence detected" in said.stdout
    assert password not in bmc_lab.lab("status", "--json").stdout


@pytest.mark.parametrize("fault, check, words, consequences", [
    ("psu-failure", LOG_CHECK, "Power Supply PSU1 Status: failed (entry ", []),
    ("ac-lost", LOG_CHECK, "Power Supply PSU1 Status: lost its AC input (entry ", []),
    ("psu-sensor", PSU_CHECK, "PSU1 Status (#0x61): failed [Presence detected, Failure detected]", [LOG_CHECK]),
    ("fan-failed", FAN_CHECK, "FAN1 (#0x71): 300 RPM, below its lower non-recoverable threshold", [LOG_CHECK]),
    ("psu-overheat", LOG_CHECK, "Temperature PSU1 Over Temp: non-recoverable (entry ", []),
    ("memory-nonrecoverable", LOG_CHECK, "Memory DIMM Status: non-recoverable (entry ", []),
], ids=["psu-failure", "ac-lost", "psu-sensor", "fan-failed", "psu-overheat", "memory-nonrecoverable"])
def test_a_bmc_fault_fails_its_check_with_one_finding_until_cleared(bmc_lab, fault, check, words, consequences):
    bmc_lab.lab("fault", NODE, fault)
    try:
        code, verdict = verify(bmc_lab)
        assert code == 1 and [f["check"] for f in verdict["findings"]] == [check], verdict["failures"]
        [finding] = verdict["findings"]
        assert finding["found"].startswith(words), finding["found"]
        assert [c["check"] for c in finding["consequences"]] == consequences  # the log's events of that part
        assert finding["severity"] == "critical" and finding["next_step"]
        assert finding["remedy"] == "service"  # a person repairs it: `provision recover` neither resets nor reboots
    finally:
        bmc_lab.lab("fault", NODE, "clear")
    passes(bmc_lab)


def test_an_accepted_event_is_judged_no_more_and_a_later_one_is(bmc_lab):
    bmc_lab.lab("fault", NODE, "psu-failure")
    try:
        assert verify(bmc_lab)[0] == 1
        code, result = bmc_lab.apply("--accept-bmc-events")
        assert code == 0, result
        record = bmc_lab.node_file(NODE, "/var/lib/provision/bmc-sel").read_text()
        assert "Failure detected | Deasserted" in record  # the log's newest entry
        passes(bmc_lab)
        bmc_lab.lab("fault", NODE, "ac-lost")
        code, verdict = verify(bmc_lab)
        [finding] = verdict["findings"]
        assert code == 1 and finding["found"].startswith("Power Supply PSU1 Status: lost its AC input ("), finding
        assert "since the entry recorded as the last good run's" in finding["expected"]
        assert "failed" not in finding["found"]
    finally:
        bmc_lab.lab("fault", NODE, "clear")
    passes(bmc_lab)  # the log cleared: the recorded entry is gone, and nothing came after


def test_a_failed_psu_stays_failed_through_the_nodes_reboot(bmc_lab):
    bmc_lab.lab("fault", NODE, "psu-sensor")
    try:
        bmc_lab.lab("reboot", NODE)
        code, verdict = verify(bmc_lab)
        assert code == 1 and [f["check"] for f in verdict["findings"]] == [PSU_CHECK], verdict["failures"]
    finally:
        bmc_lab.lab("fault", NODE, "clear")
    passes(bmc_lab)
