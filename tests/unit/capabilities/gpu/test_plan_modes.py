"""Planning ECC and compute mode: pure functions of (facts, settings), on the real H100's and H200's values."""

from __future__ import annotations

from builders.facts import facts
from builders.gpus import gpu, gpus
from builders.hosts import host

from provision.capabilities import registry
from provision.capabilities.gpu.modes import ComputeMode, EccMode, reboot_pending
from provision.capabilities.gpu.shown import lines


def h100s(n: int = 2, **values):
    """H100s as the real H200/H100 report their modes (h200-modes/q-modes.txt): ECC on, none pending, Default."""
    return gpus(n, "H100", **{"ecc_enabled": True, "ecc_pending": True, "compute_mode": "default",
                              "mig_mode": False, "mig_pending": False, **values})


def test_ecc_off_is_one_setter_for_every_gpu_and_reads_back_pending():
    plan = EccMode().plan(host(provision_gpu={"ecc": False}), facts(gpus=h100s()))
    assert [(c.target, c.before, c.after) for c in plan.changes] == [
        ("GPU0", "Enabled", "Enabled, Disabled at the next reboot or GPU reset"),
        ("GPU1", "Enabled", "Enabled, Disabled at the next reboot or GPU reset")]
    assert plan.changes[0].commands == [["nvidia-smi", "-e", "0"]] and plan.changes[1].commands == []
    after = facts(gpus=h100s(ecc_pending=False))
    assert [c.verify(after) for c in plan.changes] == [None, None]
    assert plan.changes[0].verify(facts(gpus=h100s())) == \
        "GPU0 ECC mode reads Enabled, not Disabled at the next reboot or GPU reset"


def test_a_pending_ecc_mode_plans_nothing_and_the_host_waits_for_its_reboot():
    pending = facts(gpus=h100s(ecc_pending=False))
    plan = EccMode().plan(host(provision_gpu={"ecc": False}), pending)
    assert plan.changes == [] and plan.problems == []
    assert [i.after for i in plan.unchanged] == ["Enabled, Disabled at the next reboot or GPU reset"] * 2
    assert reboot_pending(host(), pending) == ["GPU0 ECC mode Enabled, Disabled at the next reboot or GPU reset",
                                               "GPU1 ECC mode Enabled, Disabled at the next reboot or GPU reset"]
    assert registry.reboot_pending(host(), pending) == reboot_pending(host(), pending)  # the capability declares it


def test_ecc_as_wanted_is_left_alone_and_nothing_is_pending():
    plan = EccMode().plan(host(provision_gpu={"ecc": True}), facts(gpus=h100s()))
    assert plan.changes == [] and [i.after for i in plan.unchanged] == ["Enabled", "Enabled"]
    assert reboot_pending(host(), facts(gpus=h100s())) == []


def test_a_pending_change_the_inventory_does_not_want_is_set_back():
    """ECC on now, off pending (set by hand): the inventory says on, so -e 1 cancels the pending change."""
    plan = EccMode().plan(host(provision_gpu={"ecc": True}), facts(gpus=h100s(1, ecc_pending=False)))
    [change] = plan.changes
    assert (change.before, change.after, change.commands) == (
        "Enabled, Disabled at the next reboot or GPU reset", "Enabled", [["nvidia-smi", "-i", "GPU-2330-0000", "-e", "1"]])


def test_ecc_on_a_gpu_without_ecc_is_refused_naming_the_gpu():
    """A GeForce card reports its ECC mode as [N/A] (a real RTX 3090)."""
    plan = EccMode().plan(host(provision_gpu={"ecc": True}), facts(gpus=gpus(1, "RTX 3090")))
    assert plan.changes == []
    [problem] = plan.problems
    assert "GPU0 (NVIDIA GeForce RTX 3090)" in problem and "no ECC memory" in problem and "overrides" in problem


def test_ecc_per_gpu_override_by_uuid():
    cards = h100s()
    settings = {"ecc": True, "overrides": [{"uuid": cards[1].uuid, "ecc": False}]}
    plan = EccMode().plan(host(provision_gpu=settings), facts(gpus=cards))
    assert [(c.target, c.commands) for c in plan.changes] == [("GPU1", [["nvidia-smi", "-i", cards[1].uuid, "-e", "0"]])]


def test_compute_mode_changes_the_gpus_that_differ():
    cards = [*h100s(1), gpu(1, "H100", compute_mode="exclusive_process")]
    plan = ComputeMode().plan(host(provision_gpu={"compute_mode": "exclusive_process"}), facts(gpus=cards))
    [change] = plan.changes
    assert (change.target, change.before, change.after) == ("GPU0", "default", "exclusive_process")
    assert change.commands == [["nvidia-smi", "-i", "GPU-2330-0000", "-c", "EXCLUSIVE_PROCESS"]]
    assert change.verify(facts(gpus=[gpu(0, "H100", compute_mode="exclusive_process")])) is None
    assert change.verify(facts(gpus=cards)) == "GPU0 compute mode reads default, not exclusive_process"


def test_compute_mode_on_a_mig_enabled_gpu_is_refused_but_default_is_not():
    cards = h100s(1, mig_mode=True)
    plan = ComputeMode().plan(host(provision_gpu={"compute_mode": "prohibited"}), facts(gpus=cards))
    [problem] = plan.problems
    assert "MIG-enabled" in problem and "GPU0" in problem
    assert ComputeMode().plan(host(provision_gpu={"compute_mode": "default"}), facts(gpus=cards)).problems == []


def test_without_the_setting_the_tasks_are_skipped():
    assert EccMode().plan(host(provision_gpu={"persistence": True}), facts(gpus=h100s())).skipped == \
        "provision_gpu.ecc not set"
    assert ComputeMode().plan(host(provision_gpu={}), facts(gpus=h100s())).skipped == \
        "provision_gpu.compute_mode not set"


def test_provision_facts_shows_the_modes_once_per_set_of_gpus_alike():
    cards = [*h100s(), gpu(2, "H100", ecc_enabled=True, ecc_pending=False, compute_mode="exclusive_process")]
    no_ecc = gpu(3, "RTX 3090", compute_mode="default")  # a real RTX 3090: ECC [N/A], compute mode Default
    unread = gpu(4, "RTX 3090")  # neither reported (a driver without the fields): no line
    shown = [line.text for line in lines(host(), facts(gpus=[*cards, no_ecc, unread]))]
    assert [text for text in shown if text.startswith("modes")] == [
        "modes: GPU0, GPU1: ECC Enabled, compute mode default",
        "modes: GPU2: ECC Enabled, Disabled at the next reboot or GPU reset, compute mode exclusive_process",
        "modes: GPU3: ECC N/A, compute mode default"]
