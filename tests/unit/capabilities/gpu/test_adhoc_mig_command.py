"""`provision mig off|on|PROFILE,...`: its tasks, validated like the inventory, refused in the command's own words
against the GPU's real H200 profiles (builders/mig.py), `on` keeping the layout the boot file gives each GPU, and
the boot file carrying the new layout with its placements."""

from __future__ import annotations

import pytest
from builders.facts import facts, file
from builders.gpus import gpus
from builders.hosts import host
from builders.mig import h200_gpu, h200_mig, mig_facts

from provision.capabilities.gpu import boot
from provision.capabilities.gpu.adhoc import MIG_ON, AdhocSettings, AfterTheSetting, as_typed, check_change, gpu_chooser, \
    setter_names
from provision.capabilities.gpu.mig_facts import SECTION_NAMES
from provision.core.errors import InputError
from provision.core.plan import Task


def h200s(mode: bool = True):
    return [h200_gpu(0, mode), h200_gpu(1, mode)]


def h200_facts(*layouts, mode: bool = True, conf: str | None = None):
    files = {boot.CONF: file(boot.CONF, conf)} if conf is not None else {}
    return facts(gpus=h200s(mode), mig=mig_facts(*(h200_mig(layout) for layout in layouts)), files=files)


def tuned(change, chosen=None, conf=None, layouts=((), ())):
    """The host's gpu block as the command makes it on two H200s."""
    hook = AdhocSettings(change, gpu_chooser(chosen), from_inventory=False)
    return hook(host(), h200_facts(*layouts, conf=conf)).settings.gpu


def test_the_command_sets_the_mode_then_the_layout():
    assert setter_names({"mig": "disabled"}) == {"gpu-mig-mode", "gpu-mig-layout"}
    assert setter_names({"compute_mode": "default"}) == {"gpu-compute-mode"}


def test_the_command_is_typed_back_as_given():
    assert as_typed({"mig": ["3g.71gb", "3g.71gb"]}) == "provision mig 3g.71gb,3g.71gb"
    assert as_typed({"mig": "disabled"}) == "provision mig off"
    assert as_typed({"mig": MIG_ON}) == as_typed({"mig": []}) == "provision mig on"


def test_a_name_that_is_no_profile_is_bad_input_naming_the_argument():
    with pytest.raises(InputError) as refused:
        check_change({"mig": ["MIG 3g.71gb"]}, "LAYOUT")
    [problem] = refused.value.problems
    assert problem.key == "LAYOUT" and "without nvidia-smi's \"MIG \"" in problem.message
    check_change({"mig": MIG_ON}, "LAYOUT")  # the command's own word, not an inventory value


def test_a_layout_the_gpus_cannot_take_is_refused_once_in_the_commands_words():
    with pytest.raises(InputError) as refused:
        tuned({"mig": ["4g.71gb", "4g.71gb"]})
    [problem] = refused.value.problems
    assert problem.key == "provision mig 4g.71gb,4g.71gb"
    assert problem.message.startswith("GPU0, GPU1 (NVIDIA H200): 2 x 4g.71gb, but it takes at most 1; its profiles: "
                                      "1g.18gb (1 slice, at most 7)")


def test_a_gpu_without_mig_refuses_on_but_off_asks_nothing_of_it():
    others = facts(gpus=gpus(2))  # no MIG listing: nvidia-smi mig -lgip lists no profile for them
    with pytest.raises(InputError) as refused:
        AdhocSettings({"mig": MIG_ON}, gpu_chooser(None), from_inventory=False)(host(), others)
    assert "it lists no MIG profile (nvidia-smi mig -lgip): it does not support MIG" in refused.value.problems[0].message
    AdhocSettings({"mig": "disabled"}, gpu_chooser(None), from_inventory=False)(host(), others)


def test_on_keeps_the_layout_the_boot_file_gives_each_gpu_and_none_where_it_gives_none():
    [one, other] = h200s()
    conf = boot.render(host(provision_gpu={"overrides": [{"uuid": other.uuid, "mig": ["3g.71gb", "3g.71gb"]}]}),
                       h200_facts((), ("3g.71gb", "3g.71gb")))
    block = tuned({"mig": MIG_ON}, conf=conf, layouts=((), ("3g.71gb", "3g.71gb")))
    assert block.for_gpu(0, one.uuid, one.name).mig == []
    assert block.for_gpu(1, other.uuid, other.name).mig == ["3g.71gb", "3g.71gb"]


def test_the_boot_file_gets_the_layout_pinned_for_the_chosen_gpus_only():
    block = tuned({"mig": ["3g.71gb", "1g.18gb"]}, chosen="1")
    text = boot.render(host(provision_gpu=block.model_dump(exclude_none=True)), h200_facts((), ()))
    [first, second] = [line.partition("  #")[0] for line in text.splitlines() if line.startswith("gpu=")]
    assert "mig=" not in first and second.endswith(" mig=3g.71gb:0,1g.18gb:4")


def test_the_boot_tasks_read_the_mig_listings_their_line_is_pinned_by():
    class Boot(Task):
        name = "gpu-boot-conf"

    after = AfterTheSetting(Boot(), [], check=False)
    assert set(SECTION_NAMES) <= set(after.fact_sections(host()))


def test_the_inventory_saying_otherwise_is_a_warning_in_the_commands_words():
    hook = AdhocSettings({"mig": "disabled"}, gpu_chooser("0"), from_inventory=True)
    hook(host(provision_gpu={"mig": ["3g.71gb", "3g.71gb"]}), h200_facts((), ()))
    [warning] = hook.warnings
    assert warning.startswith("node1 GPU0: the inventory says provision_gpu.mig")
    assert warning.endswith("(`provision mig 3g.71gb,3g.71gb`); the next `provision apply` sets that back")
