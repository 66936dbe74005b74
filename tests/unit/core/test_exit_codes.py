"""Exit codes are bit flags a script can test one by one."""

import signal

from provision.core.results import NOT_STARTED, UNREACHABLE, HostResult, TaskResult, exit_code
from provision.core.plan import CHANGED, FAILED, OK, SKIPPED


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


def test_a_reboot_pending_is_its_own_bit_not_a_failure():
    pending = HostResult("gpu-1", reboot_pending=["driver 580.159.04 is installed, no NVIDIA module is loaded"])
    pending.tasks = [TaskResult("nvidia-driver", CHANGED), TaskResult("gpu-power-limit", SKIPPED)]
    pending.settle()
    assert pending.status == CHANGED and exit_code([pending]) == 16
    assert exit_code([pending, *hosts(FAILED)]) == 17  # a script tells the two apart
    lost = HostResult("gpu-2", UNREACHABLE, reboot_pending=["..."])  # did not come back: unreachable says it
    assert exit_code([lost]) == 4


def test_a_stopped_run_exits_as_shells_do():
    assert exit_code(hosts(CHANGED, NOT_STARTED), stopped_by=signal.SIGINT) == 130
    assert exit_code(hosts(CHANGED, FAILED), stopped_by=signal.SIGTERM) == 143
