"""dcgmi diag as verify --active's load (provision_active.dcgm_diag; capabilities/active/dcgm.py): the setting, the node
script that runs it, dcgmi's JSON read (2.x/3.x and 4.x), and gpus_hold_up_under_load's findings from it.

No dcgmi capture is in ../shared/real-outputs. The fixtures below are written after the formats dcgmi writes:
- 3.x: NVIDIA/DCGM dcgmi/Diag.cpp at DCGM 3.3.9 (HelperJsonBuildOutput: "gpu_id" as text, "info" a string, a
  Deployment test's one result naming a GPU only with an error, its warnings keyed "warnings"), and the real
  `dcgmi diag -r 3 -j` of a T400 in NVIDIA/DCGM issue 139 (results {"gpu_id": "0", "status": "Skip"});
- nvvs's own: the "real output" in NVIDIA/DCGM nvvs/src/tests/JsonResultTests.cpp (a warning line before the
  JSON, nulls between tests, "gpu_ids" as "0,1,..." or a number, PASS);
- 2.x: the results of facebookresearch/gcm's check_dcgmi tests (status only, Warn);
- 4.x: NVIDIA/DCGM testing/python3/dcgm_diag_schema.json and dcgmi/Diag.cpp at 4.6.0 (root "DCGM Diagnostic",
  entity_group/entity_id, "info" a list, test_summary, entity_groups and metadata beside the root);
- no host engine: dcgmi/Command.cpp's two "Error:" lines, errorString(DCGM_ST_CONNECTION_NOT_VALID).
"""

from __future__ import annotations

import json
import subprocess
from types import SimpleNamespace

import pytest

from builders.facts import facts
from builders.gpus import gpu
from builders.hosts import host
from provision.capabilities.active import dcgm, run
from provision.capabilities.active.judge import Target
from provision.capabilities.active.settings import ActiveSettings
from provision.capabilities.host import parse_host_settings
from provision.commands import active
from provision.core.checks import CRITICAL, ERROR, WARNING

TARGETS = [Target(f"GPU-{i}", f"GPU{i}", f"00000000:{i + 1:02X}:00.0", cap=300.0) for i in range(2)]

V3 = """\
{
\t"DCGM GPU Diagnostic" :
\t{
\t\t"test_categories" :
\t\t[
\t\t\t{
\t\t\t\t"category" : "Deployment",
\t\t\t\t"tests" :
\t\t\t\t[
\t\t\t\t\t{ "name" : "Denylist", "results" : [ { "status" : "Pass" } ] },
\t\t\t\t\t{
\t\t\t\t\t\t"name" : "Persistence Mode",
\t\t\t\t\t\t"results" : [ { "gpu_id" : 1, "status" : "Fail", "warnings" : [ {
\t\t\t\t\t\t\t"warnings" : "Persistence mode for GPU 1 is currently disabled.",
\t\t\t\t\t\t\t"error_id" : 29, "error_category" : 8, "error_severity" : 5 } ] } ]
\t\t\t\t\t}
\t\t\t\t]
\t\t\t},
\t\t\t{
\t\t\t\t"category" : "Integration",
\t\t\t\t"tests" : [ { "name" : "PCIe", "results" : [
\t\t\t\t\t{ "gpu_id" : "0", "status" : "Skip" }, { "gpu_id" : "1", "status" : "Skip" } ] } ]
\t\t\t},
\t\t\t{
\t\t\t\t"category" : "Stress",
\t\t\t\t"tests" : [ { "name" : "Targeted Power", "results" : [
\t\t\t\t\t{ "gpu_id" : "0", "status" : "Pass", "info" : "GPU 0 max power 298.1 W" },
\t\t\t\t\t{ "gpu_id" : "1", "status" : "Fail", "warnings" : [ {
\t\t\t\t\t\t"warning" : "Clocks are being throttled for GPU 1 because of clocks event reasons: HW power brake",
\t\t\t\t\t\t"error_id" : 63, "error_category" : 5, "error_severity" : 2 } ],
\t\t\t\t\t  "info" : "GPU 1 max power 221.4 W" } ] } ]
\t\t\t}
\t\t]
\t},
\t"Driver Version Detected" : "550.54.15",
\t"GPU Device IDs" : [ "20b5", "20b5" ],
\t"version" : "3.3.5"
}
"""

V4 = json.dumps({
    "DCGM Diagnostic": {"test_categories": [
        {"category": "Deployment", "tests": [{
            "name": "software",
            "results": [{"entity_group": "GPU", "entity_group_id": 1, "entity_id": i, "status": "Pass"}
                        for i in range(2)],
            "test_summary": {"status": "Pass"}}]},
        {"category": "Hardware", "tests": [{
            "name": "memory",
            "results": [
                {"entity_group": "GPU", "entity_group_id": 1, "entity_id": 0, "status": "Pass"},
                {"entity_group": "GPU", "entity_group_id": 1, "entity_id": 1, "status": "Fail",
                 "warnings": [{"warning": "A double-bit ECC error was detected on GPU 1.", "error_id": 3,
                               "error_category": 3, "error_severity": 6}],
                 "info": ["Allocated 15.0 GB of 16.0 GB"]}],
            "test_summary": {"status": "Fail"}}]},
        {"category": "Stress", "tests": [{
            "name": "targeted_stress",
            "results": [{"entity_group": "GPU", "entity_group_id": 1, "entity_id": i, "status": "Pass"}
                        for i in range(2)],
            "test_summary": {"status": "Fail", "warnings": [{
                "warning": "The test could not be started on any GPU.", "error_id": 18, "error_category": 4,
                "error_severity": 4}]}}]}]},
    "entity_groups": [{"entity_group": "GPU", "entity_group_id": 1, "entities": [
        {"entity_id": i, "device_id": "1db1", "serial_num": f"032191800{i}"} for i in range(2)]}],
    "metadata": {"version": "4.2.3", "Driver Version Detected": "570.148.08"}}, indent=4)

NO_HOST_ENGINE = ("Error: unable to establish a connection to the specified host: localhost\n"
                  "Error: Unable to connect to host engine. Host engine connection invalid/disconnected.\n")


def test_dcgmi_3x_json_reads_into_one_result_per_test_and_gpu():
    diag = dcgm.read(2, V3, 226)
    assert diag.version == "3.3.5" and not diag.error and not diag.not_applicable
    assert [(r.test, r.gpu, r.status, r.severity) for r in diag.results] == [
        ("Denylist", None, "pass", None), ("Persistence Mode", 1, "fail", dcgm.CONFIG),
        ("PCIe", 0, "skip", None), ("PCIe", 1, "skip", None),
        ("Targeted Power", 0, "pass", None), ("Targeted Power", 1, "fail", dcgm.ISOLATE)]
    assert diag.results[1].warnings == ("Persistence mode for GPU 1 is currently disabled.",)  # "warnings" key
    assert diag.results[5].info == ("GPU 1 max power 221.4 W",)


def test_dcgmi_4x_json_reads_its_entities_and_a_test_that_failed_only_in_its_summary():
    diag = dcgm.read(3, "\n" + V4 + "\n", 226)
    assert diag.version == "4.2.3" and not diag.error
    failed = [r for r in diag.results if r.status == "fail"]
    assert [(r.test, r.gpu, r.warnings, r.info, r.severity) for r in failed] == [
        ("memory", 1, ("A double-bit ECC error was detected on GPU 1.",), ("Allocated 15.0 GB of 16.0 GB",),
         dcgm.RESET),
        ("targeted_stress", None, ("The test could not be started on any GPU.",), (), 4)]
    assert len(diag.results) == 7


def test_nvvs_and_2x_shapes_read_too():
    nvvs = ('WARNING: THIS SHOULD NOT HAPPEN\n{"DCGM GPU Diagnostic": {"test_categories": [{"category": "Deployment",'
            ' "tests": [{"name": "Denylist", "results": [{"gpu_ids": "0,1", "status": "PASS"}]}, null]}, {"category":'
            ' "Custom", "tests": [{"name": "software", "results": [{"gpu_ids": 0, "status": "PASS"},'
            ' {"gpu_ids": 1, "status": "WARN", "warnings": ["slow"]}]}]}], "version": "3.1.0"}}')
    diag = dcgm.read(1, nvvs, 0)
    assert [(r.gpu, r.status) for r in diag.results] == [(None, "pass"), (0, "pass"), (1, "warn")]
    assert diag.version == "3.1.0" and diag.results[2].warnings == ("slow",)
    old = ('{"DCGM GPU Diagnostic": {"test_categories": [{"category": "Deployment", "tests": [{"name": "Blacklist",'
           ' "results": [{"status": "Pass"}]}, {"name": "Persistence Mode", "results": [{"status": "Warn"}]}]}]}}')
    assert [(r.test, r.gpu, r.status) for r in dcgm.read(1, old, 0).results] == [
        ("Blacklist", None, "pass"), ("Persistence Mode", None, "warn")]


def test_no_dcgmi_or_no_host_engine_is_not_applicable_and_anything_else_unreadable_is_said_so():
    missing = dcgm.read(2, "", 127, "sh: 1: dcgmi: not found")
    assert missing.not_applicable == "dcgmi is not installed on the node (sh: 1: dcgmi: not found)"
    unreachable = dcgm.read(2, NO_HOST_ENGINE, 255)
    assert unreachable.not_applicable.startswith("dcgmi could not reach nv-hostengine (Error: unable to establish")
    assert "systemctl start nvidia-dcgm" in unreachable.not_applicable and not unreachable.error
    paused = dcgm.read(2, '{"DCGM Diagnostic": {"version": "4.2.3", "runtime_error": '
                          '"Error: Diagnostic could not be run while DCGM is paused."}}', 255)
    assert paused.error == "dcgmi diag could not run: Error: Diagnostic could not be run while DCGM is paused."
    for text, why in [
            ("Segmentation fault\n", "no JSON (exit 139: Segmentation fault)"),
            ('{"body": {}}', "none of 'DCGM Diagnostic' or 'DCGM GPU Diagnostic' in it (keys: body)"),
            ('{"DCGM Diagnostic": {"tests": [{"name": "memory", "results": []}]}}', "test_categories: not an array"),
            ('{"DCGM Diagnostic": {"test_categories": []}}', "no test result in it"),
            ('{"DCGM GPU Diagnostic": {"test_categories": [{"tests": [{"name": "PCIe", "results": [{"status": '
             '"Exploded"}]}]}]}}', "status 'Exploded' of PCIe"),  # not taken for a pass
            ('{"DCGM Diagnostic": {"test_categories": [{"tests": [{"name": "PCIe", "results": [{"gpu_id": "gpu0", '
             '"status": "Pass"}]}]}]}}', "GPU id 'gpu0'"),
            (V4[:200], "not JSON")]:
        said = dcgm.read(2, text, 139 if text.startswith("Seg") else 0)
        assert said.error.startswith("could not read dcgmi's output: ") and why in said.error, said
        assert not said.results and not said.not_applicable


def test_each_failed_test_is_a_finding_of_its_gpu_and_warnings_and_skips_are_notes():
    said = dcgm.judged(dcgm.read(2, V3, 226), TARGETS, set())
    config, power = said.findings
    assert config.expected == "GPU1 (0000:02:00.0) passing dcgmi diag -r 2's Persistence Mode test"
    assert config.found == "GPU1 (0000:02:00.0): Persistence Mode failed: Persistence mode for GPU 1 is currently disabled."
    assert config.severity == ERROR and "a setting, not the hardware" in config.fix
    assert power.found == ("GPU1 (0000:02:00.0): Targeted Power failed: Clocks are being throttled for GPU 1 "
                           "because of clocks event reasons: HW power brake")
    assert power.about == ("0000:02:00",) and power.severity == CRITICAL and "cannot run work" in power.fix
    assert said.notes == ["dcgmi diag -r 2 skipped PCIe on GPU0 (0000:01:00.0), GPU1 (0000:02:00.0)"]
    v4 = dcgm.judged(dcgm.read(3, V4, 226), TARGETS, set())
    ecc, summary = v4.findings
    assert ecc.severity == CRITICAL and "nvidia-smi -r -i 1" in ecc.fix
    assert summary.expected == "the node passing dcgmi diag -r 3's targeted_stress test" and summary.about == ()
    # a GPU the sampler found lost: dcgmi's failures on it follow from that finding, not said twice
    assert [f.expected for f in dcgm.judged(dcgm.read(3, V4, 226), TARGETS, {("0000:02:00",)}).findings] == [
        summary.expected]
    warned = dcgm.judged(dcgm.read(1, '{"DCGM GPU Diagnostic": {"test_categories": [{"tests": [{"name": "SM Stress",'
                                      ' "results": [{"gpu_id": "7", "status": "Warn", "warnings": [{"warning": '
                                      '"low"}]}]}]}]}}', 0), TARGETS, set())
    assert warned.findings == [] and warned.notes == ["dcgmi diag -r 1: SM Stress on dcgmi's GPU 7 warned: low"]
    broken = dcgm.judged(dcgm.read(2, "Segmentation fault", 139), TARGETS, set())
    assert [(f.expected, f.found) for f in broken.findings] == [
        ("dcgmi diag -r 2 to run and report", "could not read dcgmi's output: no JSON (exit 139: Segmentation fault)")]
    assert dcgm.NEXT[dcgm.MONITOR][0] == WARNING  # DCGM: it can run work, watched


def test_the_setting_takes_a_level_1_to_4_and_not_beside_load_command():
    assert ActiveSettings.model_validate({"dcgm_diag": 3}).dcgm_diag == 3
    for wrong, said in [({"dcgm_diag": 5}, "got 5: input should be less than or equal to 4; allowed: 1, 2, 3 or 4"),
                        ({"dcgm_diag": 0}, "got 0: input should be greater than or equal to 1"),
                        ({"dcgm_diag": "2"}, "got '2': input should be a valid integer"),
                        ({"dcgm_diag": 2, "load_command": ["/usr/local/sbin/burn"]},
                         "load_command and dcgm_diag are two loads; the node runs one")]:
        _, [problem] = parse_host_settings({"active": wrong}, "inv.yaml", "host a")
        assert problem.message.startswith(said), problem


def test_the_node_runs_dcgmi_diag_under_the_sampler_for_as_long_as_its_level_takes():
    argv, stdin = run.load_argv(None, "python3", 60, dcgm_diag=2)
    assert argv == ["dcgmi", "diag", "-r", "2", "-j"] and stdin is None
    script = run.node_script(argv, 500)
    assert "dcgmi diag -r 2 -j <&3" in script and "-lms 500" in script
    assert subprocess.run(["sh", "-n", "-c", script], capture_output=True).returncode == 0
    assert run.load_seconds(60, 3) == dcgm.LIMIT_S[3] and run.load_seconds(60) == 60
    calls = []  # what active.one() runs on the node, and for how long at most
    conn = SimpleNamespace(run=lambda argv, stdin=None, timeout=None: calls.append((argv, timeout))
                           or SimpleNamespace(stdout="", stderr=""))
    state = SimpleNamespace(
        host=host("h100-1", provision_active={"dcgm_diag": 3}), facts=facts(gpus=[gpu(0, "H100")]), conn=conn)
    active.one(state, 60)
    [(argv, timeout)] = calls
    assert "dcgmi diag -r 3 -j" in argv[2] and timeout == dcgm.LIMIT_S[3] + active.SLACK_S


def test_what_the_node_printed_reads_back_with_dcgmis_report():
    m = run.MARK
    text = "\n".join([f"{m}samples", "timestamp, uuid, power.draw [W], utilization.gpu [%]",
                      "2026/11/25 17:00:00.000, GPU-0, 190.00, 100", "2026/11/25 17:01:30.000, GPU-0, 80.00, 0",
                      f"{m}load 226", V4, f"{m}stderr"])
    found = run.parse(text, 60, TARGETS, dcgm_diag=3)
    assert found.load == {} and found.dcgm is not None and found.dcgm.version == "4.2.3" and found.load_rc == 226
    assert found.seconds == 90.0  # what was sampled: dcgmi's level set the length, not --duration
    assert run.parse(text, 60, TARGETS).dcgm is None  # without the setting, the load's JSON line as before


def checked(found: run.ActiveRun):
    from provision.capabilities.active.checks import check_gpus_hold_up_under_load
    from provision.core.checks import CheckFailed

    node = SimpleNamespace(active=found, notes=[])
    try:
        check_gpus_hold_up_under_load(node)
    except CheckFailed as failed:
        return failed.findings, node.notes
    except pytest.skip.Exception as skipped:
        return f"skip: {skipped.msg}", node.notes
    return None, node.notes


def test_the_check_skips_a_node_without_dcgmi_and_files_dcgmis_failures_without_the_throughput_rules():
    skipped, _ = checked(run.ActiveRun(5, TARGETS, load_rc=127, load_stderr="sh: 1: dcgmi: not found",
                                       dcgm=dcgm.read(2, "", 127, "sh: 1: dcgmi: not found")))
    assert skipped == "skip: not applicable: dcgmi is not installed on the node (sh: 1: dcgmi: not found)"
    # dcgmi's own exit 3 is not provision's NOT_APPLICABLE: its report is judged
    findings, notes = checked(run.ActiveRun(5, TARGETS, load_rc=run.NOT_APPLICABLE, dcgm=dcgm.read(2, V3, 3)))
    assert [f.found.split(":")[0] for f in findings] == [
        "nvidia-smi -lms recorded nothing", "GPU1 (0000", "GPU1 (0000"]  # no "the load exited" (no JSON line)
    assert notes == ["dcgmi diag -r 2 skipped PCIe on GPU0 (0000:01:00.0), GPU1 (0000:02:00.0)"]
    assert checked(run.ActiveRun(5, TARGETS, load_rc=0, dcgm=dcgm.read(1, V3.replace('"Fail"', '"Pass"'), 0),
                                 samples={}))[0][0].found == "nvidia-smi -lms recorded nothing"
