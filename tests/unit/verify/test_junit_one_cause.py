"""verify's JUnit XML, one cause one failure (provision/output/junit.py): on XML pytest itself writes for checks
named as verify's suite names them, the checks that fail only because of another finding are skipped test cases
naming their cause, the cause's failure lists them, and the suite's counts follow."""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET

from provision.output import junit
from provision.verify import FAIL, Verdict

from builders.failures import lost_gpu_failures

# The checks of lost_gpu_failures() on one node, each failing as verify's checks do (pytest's own test ids).
CHECKS = '''
import pytest

NODE = pytest.mark.parametrize("node", ["rtx4090-1"])

@NODE
def check_nvidia_smi_reads_the_gpus(node): raise AssertionError("exit 15")
@NODE
def check_every_gpu_of_the_last_good_run_is_here(node): raise AssertionError("GPU3 is lost")
@NODE
def check_no_gpu_is_lost(node): raise AssertionError("GPU3 0000:31:00.0: Unknown Error")
@NODE
def check_no_xid_errors_since_boot(node): raise AssertionError("Xid 79 x2; Xid 48")
@NODE
def check_gpu_count_is_as_the_inventory_says(node): pass

@pytest.mark.parametrize(("node", "task"), [("rtx4090-1", "gpu-boot-conf"), ("rtx4090-1", "gpu-power-limit")],
                         ids=["rtx4090-1-gpu-boot-conf", "rtx4090-1-gpu-power-limit"])
def check_as_intended(node, task): raise AssertionError(task)
'''


def pytest_junit(tmp_path) -> bytes:
    (tmp_path / "checks.py").write_text(CHECKS)
    (tmp_path / "pytest.ini").write_text("[pytest]\npython_files = checks.py\npython_functions = check_*\n")
    xml = tmp_path / "junit.xml"
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
                    "--junitxml", str(xml), "checks.py"], cwd=tmp_path, capture_output=True, timeout=120)
    return xml.read_bytes()


def test_consequences_are_under_their_cause_not_failures_of_their_own(tmp_path):
    before = ET.fromstring(pytest_junit(tmp_path))
    assert before.find("testsuite").get("failures") == "6"  # pytest's own: every failing check a failure
    data = junit.regroup(ET.tostring(before), [Verdict("rtx4090-1", FAIL, failures=lost_gpu_failures())])
    suite = ET.fromstring(data).find("testsuite")
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    failed = sorted(name for name, c in cases.items() if c.find("failure") is not None)
    # the lost GPU; the Xid check, which has a cause of its own (GPU1's Xid 48); the power limit's drift
    assert failed == ["check_as_intended[rtx4090-1-gpu-power-limit]", "check_no_gpu_is_lost[rtx4090-1]",
                      "check_no_xid_errors_since_boot[rtx4090-1]"]
    assert (suite.get("failures"), suite.get("skipped")) == ("3", "3")
    skipped = cases["check_as_intended[rtx4090-1-gpu-boot-conf]"].find("skipped")
    assert skipped.get("type") == junit.CONSEQUENCE
    assert skipped.get("message") == ("follows from no_gpu_is_lost: expected every GPU readable, found GPU3 "
                                      "0000:31:00.0: Unknown Error")
    text = cases["check_no_gpu_is_lost[rtx4090-1]"].find("failure").text
    assert "Following from it (not failures of their own):\n- nvidia_smi_reads_the_gpus: expected" in text
    assert text.count("\n- ") == 4 and "GPU3 0000:31:00.0: Unknown Error" in text  # pytest's own text kept
    assert cases["check_gpu_count_is_as_the_inventory_says[rtx4090-1]"].find("skipped") is None  # passed: as is
    assert junit.regroup(b"not xml", []) == b"not xml"
