"""Exit codes are bit flags a script can test one by one."""

from provision.results import UNREACHABLE, HostResult, exit_code
from provision.tasks.base import CHANGED, FAILED, OK


def hosts(*statuses: str) -> list[HostResult]:
    return [HostResult(f"h{i}", status) for i, status in enumerate(statuses)]


def test_each_condition_has_its_bit_and_they_add_up():
    assert exit_code(hosts(OK, OK)) == 0
    assert exit_code(hosts(OK, FAILED)) == 1
    assert exit_code(hosts(UNREACHABLE, OK)) == 4
    assert exit_code(hosts(FAILED, UNREACHABLE)) == 5


def test_check_with_drift_is_a_gate_and_an_apply_that_changed_is_success():
    assert exit_code(hosts(CHANGED, OK), check=True) == 8
    assert exit_code(hosts(CHANGED, UNREACHABLE), check=True) == 12
    assert exit_code(hosts(OK, OK), check=True) == 0
    assert exit_code(hosts(CHANGED, OK)) == 0
