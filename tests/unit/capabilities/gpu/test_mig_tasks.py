"""The MIG tasks on the real H200's profiles: the mode, pending until a reset; the layout once the mode is on,
idempotent, re-made only where nothing runs; a layout the GPU cannot take refused before anything changes."""

from __future__ import annotations

from builders.facts import facts
from builders.hosts import host
from builders.mig import h200_gpu, h200_mig, mig_facts
from provision.capabilities.gpu.mig_tasks import MigLayout, MigMode, pending_reasons
from provision.core.plan import FAILED

TWO = ["3g.71gb", "3g.71gb"]


def commands(plan):
    return [c for change in plan.changes for c in change.commands]


def gpu_uuid():
    return h200_gpu().uuid


def on(layout=TWO, **blocks):
    return host(provision_gpu={"mig": layout, **blocks})


def test_mode_off_is_turned_on_and_then_pending():
    gpu = h200_gpu(mode=False)
    plan = MigMode().plan(on(), facts(gpus=[gpu], mig=mig_facts(h200_mig())))
    assert commands(plan) == [["nvidia-smi", "-i", gpu.uuid, "-mig", "1"]]
    assert plan.changes[0].before == "Disabled" and plan.changes[0].after == "Enabled"
    pending = facts(gpus=[h200_gpu(mode=False, pending=True)], mig=mig_facts(h200_mig()))
    assert plan.changes[0].verify(pending) is None  # pending is in place: the reset is the reboot's
    again = MigMode().plan(on(), pending)
    assert again.changes == [] and again.unchanged[0].after == "Enabled, pending a GPU reset or reboot (apply --reboot)"
    assert pending_reasons(on(), pending) == [
        "GPU0 MIG mode Enabled is pending (now Disabled): it takes effect at a GPU reset or reboot"]


def test_the_layout_waits_for_the_mode():
    pending = facts(gpus=[h200_gpu(mode=False, pending=True)], mig=mig_facts(h200_mig()))
    plan = MigLayout().plan(on(), pending)
    assert plan.changes == [] and "waits, pending a GPU reset or reboot" in plan.unchanged[0].after


def test_the_layout_is_made_once_the_mode_is_on():
    gpu = h200_gpu()
    plan = MigLayout().plan(on(), facts(gpus=[gpu], mig=mig_facts(h200_mig())))
    assert commands(plan) == [["nvidia-smi", "mig", "-i", gpu.uuid, "-cgi", "3g.71gb:0,3g.71gb:4", "-C"]]
    made = facts(gpus=[gpu], mig=mig_facts(h200_mig(TWO)))
    assert plan.changes[0].verify(made) is None
    assert plan.changes[0].verify(facts(gpus=[gpu], mig=mig_facts(h200_mig()))) == (
        "GPU0 MIG layout reads no GPU instances, not 3g.71gb, 3g.71gb")
    again = MigLayout().plan(on(), made)
    assert again.changes == [] and again.unchanged[0].after == "3g.71gb, 3g.71gb"


def test_a_different_layout_is_destroyed_then_made():
    gpu = h200_gpu()
    plan = MigLayout().plan(on(["1g.18gb"] * 7), facts(gpus=[gpu], mig=mig_facts(h200_mig(TWO))))
    smi = ["nvidia-smi", "mig", "-i", gpu.uuid]
    assert commands(plan) == [[*smi, "-dci"], [*smi, "-dgi"], [*smi, "-cgi", ",".join(f"1g.18gb:{s}" for s in range(7)), "-C"]]


def test_instances_without_their_compute_instance_are_made_again():
    plan = MigLayout().plan(on(), facts(gpus=[h200_gpu()], mig=mig_facts(h200_mig(TWO, compute=False))))
    assert [c[-2:] for c in commands(plan)] == [[gpu_uuid(), "-dgi"], ["3g.71gb:0,3g.71gb:4", "-C"]]


def test_never_under_running_processes():
    busy = facts(gpus=[h200_gpu()], mig=mig_facts(h200_mig(TWO, processes=["4242 python"])))
    plan = MigLayout().plan(on(["7g.141gb"]), busy)
    assert plan.changes == [] and plan.refused[0].status == FAILED
    assert "processes use GPU0 (4242 python)" in plan.refused[0].message
    off = MigMode().plan(on("disabled"), busy)
    assert off.changes == [] and "4242 python" in off.refused[0].message


def test_disabled_destroys_the_instances_then_turns_the_mode_off():
    gpu = h200_gpu()
    plan = MigMode().plan(on("disabled"), facts(gpus=[gpu], mig=mig_facts(h200_mig(TWO))))
    assert commands(plan) == [["nvidia-smi", "mig", "-i", gpu.uuid, "-dci"], ["nvidia-smi", "mig", "-i", gpu.uuid, "-dgi"],
                             ["nvidia-smi", "-i", gpu.uuid, "-mig", "0"]]
    assert MigLayout().plan(on("disabled"), facts(gpus=[gpu], mig=mig_facts(h200_mig(TWO)))).changes == []


def test_a_layout_the_gpu_cannot_take_is_an_input_error():
    plan = MigMode().plan(on(["3g.40gb"]), facts(gpus=[h200_gpu(mode=False)], mig=mig_facts(h200_mig())))
    assert plan.changes == [] and "it has no GPU instance profile 3g.40gb; its profiles: 1g.18gb" in plan.problems[0]


def test_a_gpu_without_mig():
    rtx = facts(gpus=[h200_gpu(mode=None, pending=None)], mig=mig_facts())
    assert MigMode().plan(on("disabled"), rtx).changes == [] and MigMode().plan(on("disabled"), rtx).problems == []
    assert "does not support MIG" in MigMode().plan(on(), rtx).problems[0]


def test_only_the_gpus_an_override_names():
    gpus = [h200_gpu(0, mode=False), h200_gpu(1, mode=False)]
    plan = MigMode().plan(host(provision_gpu={"overrides": [{"index": 1, "mig": ["7g.141gb"]}]}),
                          facts(gpus=gpus, mig=mig_facts(h200_mig(), h200_mig())))
    assert [change.target for change in plan.changes] == ["GPU1"]


def test_asks_for_the_mig_sections():
    assert "mig-profiles" in MigMode().fact_sections(on()) and MigLayout().fact_sections(host()) == []
    assert MigMode().fact_sections(host(provision_gpu={"power_limit": 300})) == []
    assert MigMode().fact_sections(host(provision_gpu={"overrides": [{"index": 1, "mig": "disabled"}]}))
