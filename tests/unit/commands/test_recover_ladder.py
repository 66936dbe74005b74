"""The recovery ladder (commands/recovery/ladder.py): a node's causes to its one next step, and up a rung for a
cause the step did not clear."""

from __future__ import annotations

from provision.commands.recovery.ladder import DONE, LEFT, after, gpus_to_reset, next_step
from provision.core.checks import APPLY, CRITICAL, ERROR, REBOOT, RESET, SERVICE, WARNING
from provision.verify import FAIL, PASS, Verdict
from provision.verify.model import Failure

GPU0, GPU1 = "00000000:18:00.0", "00000000:2A:00.0"


def reset_required(gpu: str = GPU0) -> Failure:
    return Failure("no_gpu_asks_for_recovery", "no recovery action", "GPU Recovery Action: Reset", about=[gpu],
                   remedy=RESET)


def drifted() -> Failure:
    return Failure("as_intended[gpu-power-limit]", "GPU0 power limit 500 W", "GPU0 power limit 700 W",
                   severity=ERROR)


def fallen_off() -> Failure:
    return Failure("no_gpu_is_lost", "every GPU readable", "GPU 0000:2A:00.0 has fallen off the bus", about=[GPU1])


def node(*failures: Failure) -> Verdict:
    return Verdict("gpu-1", FAIL if failures else PASS, failures=list(failures))


def test_a_passing_node_needs_nothing() -> None:
    assert next_step(node()).action == DONE


def test_each_cause_asks_for_its_remedy_and_the_node_takes_the_largest() -> None:
    assert next_step(node(drifted())).action == APPLY
    assert next_step(node(drifted(), reset_required())).action == RESET
    # a critical finding that names no remedy: one reboot before a person looks
    assert next_step(node(reset_required(), fallen_off())).action == REBOOT


def test_the_step_says_which_causes_asked_for_it() -> None:
    step = next_step(node(drifted(), reset_required()))
    assert step.why() == "no_gpu_asks_for_recovery: GPU Recovery Action: Reset (remedy reset)"
    assert step.drains and not next_step(node(drifted())).drains


def test_a_cause_the_reset_left_climbs_to_a_reboot_and_one_the_reboot_left_to_service() -> None:
    first = next_step(node(reset_required()))
    second = next_step(node(reset_required()), [after(first)])
    assert second.action == REBOOT
    assert second.why() == "no_gpu_asks_for_recovery: GPU Recovery Action: Reset (still there after the reset)"
    third = next_step(node(reset_required()), [after(first), after(second)])
    assert third.action == SERVICE and [r.about for r in third.replace] == [(GPU0,)]


def test_a_new_cause_after_a_step_starts_at_its_own_remedy() -> None:
    rebooted = after(next_step(node(fallen_off())))
    # the boot lost a setting: apply converges it; the reboot did not "fail" at it
    assert next_step(node(drifted()), [rebooted]).action == APPLY


def test_a_drift_apply_did_not_mend_climbs_to_a_reset() -> None:
    applied = after(next_step(node(drifted())))
    assert applied.action == APPLY
    assert next_step(node(drifted()), [applied]).action == RESET


def test_a_warning_gets_apply_and_no_more() -> None:
    slow = Failure("pcie_links_at_full_speed", "x16", "x8", about=[GPU0], severity=WARNING)
    applied = after(next_step(node(slow)))
    assert applied.action == APPLY
    assert next_step(node(slow), [applied]).action == LEFT
    assert next_step(node(slow, drifted()), [applied]).action == APPLY


def test_a_person_is_service_at_once() -> None:
    psu = Failure("bmc_sel_has_no_fault", "no PSU fault", "PS1 Transition to Non-recoverable", remedy=SERVICE)
    step = next_step(node(psu, drifted()))
    assert step.action == SERVICE and step.replace == ()


def test_the_gpus_to_reset_are_those_the_causes_name_or_all_of_them() -> None:
    two = next_step(node(reset_required(GPU0), reset_required(GPU1), drifted()))
    assert gpus_to_reset(two, nvswitch=False) == ("0000:18:00.0", "0000:2a:00.0")
    assert gpus_to_reset(two, nvswitch=True) == ()  # an NVSwitch board resets every GPU together
    unnamed = next_step(node(Failure("no_reset_required_in_kernel_log", "none", "NV_ERR_RESET_REQUIRED",
                                     remedy=RESET, severity=CRITICAL)))
    assert gpus_to_reset(unnamed, nvswitch=False) == ()


def test_a_gpu_named_by_its_slot_is_reset_by_its_address_and_other_subjects_are_not_gpus() -> None:
    step = next_step(node(reset_required("0000:3b:00"), Failure("nic", "up", "down", about=["ens803f1"],
                                                                remedy=RESET)))
    assert gpus_to_reset(step, nvswitch=False) == ()  # a reset cause that names no GPU: every GPU
    assert gpus_to_reset(next_step(node(reset_required("0000:3b:00"))), nvswitch=False) == ("0000:3b:00.0",)
