"""One cause, one finding: verify files a check that fails only because of another check's finding under it
(followed to the root, by check or by check and subject), keeps an unconfirmed lead a finding of its own, and
says so in the terminal (-v too), in --json (a versioned schema) and in --prometheus (read back with
prometheus-client's own parser)."""

from __future__ import annotations

import json
import re

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from provision.core.checks import CRITICAL, CheckFailed, Finding, fail_each
from provision.output import prometheus, report, verify_json
from provision.verify import FAIL, PASS, UNREACHABLE, Failure, Verdict, by_cause

from builders.failures import SLOT, lost_gpu_failures

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def test_a_lost_gpu_is_one_finding_with_the_checks_that_fail_because_of_it_under_it():
    causes = by_cause(lost_gpu_failures())
    assert [(c.failure.check, [x.check for x in c.consequences]) for c in causes] == [
        ("no_gpu_is_lost", ["nvidia_smi_reads_the_gpus", "every_gpu_of_the_last_good_run_is_here",
                            "no_xid_errors_since_boot", "as_intended[gpu-boot-conf]"]),  # the last through a chain
        ("no_xid_errors_since_boot", []),  # its lead (GPU1's memory check) did not fail here: a finding of its own
        ("as_intended[gpu-power-limit]", []),
    ]


def test_a_lead_naming_another_subject_of_the_check_is_not_confirmed():
    failures = [Failure("no_gpu_is_lost", "e", "GPU3", about=[SLOT]),
                Failure("no_xid_errors_since_boot", "e", "GPU5 Xid 79", because=["no_gpu_is_lost:0000:51:00"])]
    assert [c.failure.check for c in by_cause(failures)] == ["no_gpu_is_lost", "no_xid_errors_since_boot"]


def test_leads_in_a_circle_end_at_a_cause():
    failures = [Failure("a", "e", "f", because=["b"]), Failure("b", "e", "f", because=["a"])]
    causes = by_cause(failures)
    assert [(c.failure.check, [x.check for x in c.consequences]) for c in causes] == [("a", ["b"])]


def test_a_check_with_several_causes_fails_with_one_finding_each():
    try:
        fail_each([Finding("up", "ens803f1 is down", "check its cable"),
                   Finding("up", "ens803f0 1000 Mb/s", "move the cable")])
    except CheckFailed as failed:
        assert [f.fix for f in failed.findings] == ["check its cable", "move the cable"]
        assert failed.found == "ens803f1 is down"  # the first, for the callers that read one
    else:
        raise AssertionError("fail_each did not fail")
    fail_each([])  # nothing found: passes


def verdicts() -> list[Verdict]:
    return [Verdict("rtx4090-1", FAIL, passed=["a"] * 8, skipped=["slurm_node_is_in_service: not a Slurm node"],
                    failures=lost_gpu_failures()),
            Verdict("v100-1", PASS, passed=["a", "b"]),
            Verdict("rtx3090-2", UNREACHABLE, "cannot connect")]


def test_prometheus_names_a_port_or_sensor_as_a_part_and_a_gpu_by_its_bus_id():
    port = Failure("rdma_ports_are_up_at_rate_without_errors", "mlx5_0 port 1 ACTIVE", "DOWN", about=["mlx5_0:1"])
    read = samples(generate_latest(prometheus.registry_for([Verdict("ib-1", FAIL, failures=[port])])).decode())
    [series] = read["provision_verify_failure"]
    assert (series.labels["gpu"], series.labels["part"]) == ("", "mlx5_0:1")


def printed(capsys, monkeypatch, verbose: bool) -> list[str]:
    monkeypatch.setenv("COLUMNS", "100")
    report.print_verdicts(verdicts(), verbose)
    return ANSI.sub("", capsys.readouterr().out).splitlines()


def test_the_terminal_shows_each_cause_once_with_its_consequences_named(capsys, monkeypatch):
    lines = printed(capsys, monkeypatch, verbose=False)
    assert lines[0] == ("rtx4090-1  FAIL  3 findings (6 of 14 checks failed), 1 not applicable (-v says why)")
    failed = [line for line in lines if line.startswith("    failed ")]
    assert [line.split()[1] for line in failed] == ["no_gpu_is_lost:", "no_xid_errors_since_boot:",
                                                   "as_intended[gpu-power-limit]:"]
    said = " ".join(" ".join(lines).split())
    assert ("because of it: nvidia_smi_reads_the_gpus, every_gpu_of_the_last_good_run_is_here, "
            "no_xid_errors_since_boot, as_intended[gpu-boot-conf]") in said
    assert "exit 15" not in said  # the consequences' own words are -v's
    assert "passed a" not in said and max(len(line) for line in lines) <= 100


def test_verbose_gives_the_consequences_words_and_every_check_that_passed_or_did_not_apply(capsys, monkeypatch):
    lines = printed(capsys, monkeypatch, verbose=True)
    said = " ".join(" ".join(lines).split())
    assert "because of it: nvidia_smi_reads_the_gpus: exit 15 every_gpu_of_the_last_good_run_is_here: GPU3 is lost" \
        in said
    assert "    n/a    slurm_node_is_in_service: not a Slurm node" in lines
    assert lines.count("    passed a") == 8 + 1 and "    passed b" in lines  # rtx4090-1's and v100-1's
    assert lines[0].endswith("1 not applicable")


def test_json_carries_findings_with_their_consequences_under_a_versioned_schema():
    data = json.loads(json.dumps(verify_json.to_json(verdicts(), [])))
    assert data["schema"] == verify_json.SCHEMA == "provision-verify/1"
    host = data["hosts"][0]
    assert [f["check"] for f in host["findings"]] == ["no_gpu_is_lost", "no_xid_errors_since_boot",
                                                      "as_intended[gpu-power-limit]"]
    lost = host["findings"][0]
    assert lost["severity"] == CRITICAL and lost["next_step"] == "reboot node1" and lost["about"] == [SLOT]
    assert [c["check"] for c in lost["consequences"]][0] == "nvidia_smi_reads_the_gpus"
    assert set(lost["consequences"][0]) == {"check", "severity", "expected", "found", "about", "remedy"}
    assert lost["remedy"] == "reboot"  # critical, and the check named no remedy: its severity's default
    assert len(host["failures"]) == 7 and host["failures"][0]["because"] == ["no_gpu_is_lost"]
    assert data["hosts"][2] | {} == {"host": "rtx3090-2", "status": "unreachable", "message": "cannot connect",
                                     "findings": [], "failures": [], "passed": [], "skipped": [], "notes": [],
                                     "not_tested": [], "figures": []}  # verify --active's (test_active_untested_verdicts.py)


def samples(text: str) -> dict[str, list]:
    """metric name -> its samples, as Prometheus's own text parser reads them."""
    found: dict[str, list] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found.setdefault(sample.name, []).append(sample)
    return found


def test_prometheus_textfile_parses_with_one_series_per_check_and_gpu(tmp_path):
    path = tmp_path / "provision.prom"
    prometheus.write(str(path), verdicts())
    assert not [p for p in tmp_path.iterdir() if p != path]  # the temporary file renamed over, none left
    read = samples(path.read_text())
    up = {s.labels["host"]: s.value for s in read["provision_verify_up"]}
    assert up == {"rtx4090-1": 1, "v100-1": 1, "rtx3090-2": 0}
    assert {s.labels["host"]: s.value for s in read["provision_verify_healthy"]} == {"rtx4090-1": 0, "v100-1": 1}
    findings = {(s.labels["host"], s.labels["severity"]): s.value for s in read["provision_verify_findings"]}
    assert findings[("rtx4090-1", "critical")] == 2 and findings[("rtx4090-1", "error")] == 1
    failures = {(s.labels["check"], s.labels["gpu"], s.labels["cause"]) for s in read["provision_verify_failure"]}
    assert ("nvidia_smi_reads_the_gpus", SLOT, "no_gpu_is_lost") in failures  # the cause's GPU
    assert {s.labels["part"] for s in read["provision_verify_failure"]} == {""}
    assert ("no_xid_errors_since_boot", SLOT, "no_gpu_is_lost") in failures
    assert ("no_xid_errors_since_boot", "", "no_xid_errors_since_boot") in failures
    passed = {(s.labels["host"], s.labels["check"]): s.value for s in read["provision_verify_check_passed"]}
    assert passed[("rtx4090-1", "no_gpu_is_lost")] == 0 and passed[("v100-1", "b")] == 1
    assert ("rtx4090-1", "slurm_node_is_in_service") not in passed  # not applicable: no series
    assert read["provision_verify_last_run_timestamp_seconds"][0].value > 1.7e9
