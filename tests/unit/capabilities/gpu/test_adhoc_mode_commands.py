"""`provision ecc on|off` and `provision compute-mode MODE`: validated like the inventory, refused in the command's
own words, and the boot file keeps the compute mode."""

from __future__ import annotations

import pytest
from builders.facts import facts, file
from builders.gpus import gpus
from builders.hosts import host

from provision.capabilities.gpu import boot
from provision.capabilities.gpu.adhoc import AdhocSettings, as_typed, check_change, gpu_chooser
from provision.core.errors import InputError


def h100s(**values):
    return gpus(2, "H100", **{"ecc_enabled": True, "ecc_pending": True, "compute_mode": "default", **values})


def test_the_commands_are_typed_back_as_given():
    assert as_typed({"ecc": False}) == "provision ecc off"
    assert as_typed({"compute_mode": "exclusive_process"}) == "provision compute-mode exclusive_process"


def test_a_mode_nvidia_smi_does_not_know_is_bad_input_naming_the_argument():
    with pytest.raises(InputError) as refused:
        check_change({"compute_mode": "exclusive_thread"}, "MODE")
    [problem] = refused.value.problems
    assert problem.key == "MODE" and "exclusive_process" in problem.message


def test_ecc_on_cards_without_ecc_is_refused_once_with_their_gpus_listed():
    with pytest.raises(InputError) as refused:
        AdhocSettings({"ecc": True}, gpu_chooser(None), from_inventory=False)(host(), facts(gpus=gpus(3, "RTX 3090")))
    [problem] = refused.value.problems
    assert problem.key == "provision ecc on"
    assert problem.message == "GPU0-2 (NVIDIA GeForce RTX 3090): has no ECC memory (its ECC mode reads N/A)"


def test_a_compute_mode_goes_into_the_boot_file_for_the_chosen_gpus_only():
    text = boot.render(host(provision_gpu={"persistence": True}), facts(gpus=h100s()))
    hook = AdhocSettings({"compute_mode": "prohibited"}, gpu_chooser("1"), from_inventory=False)
    tuned = hook(host(), facts(gpus=h100s(), files={boot.CONF: file(boot.CONF, text)}))
    lines = [line.partition("  #")[0] for line in boot.render(tuned, facts(gpus=h100s()), text).splitlines()]
    assert "gpu=GPU-2330-0000 index=0 persistence=on" in lines
    assert "gpu=GPU-2330-0001 index=1 persistence=on compute_mode=prohibited" in lines


def test_the_inventory_saying_otherwise_is_a_warning():
    hook = AdhocSettings({"compute_mode": "default"}, gpu_chooser(None), from_inventory=True)
    hook(host(provision_gpu={"compute_mode": "exclusive_process"}), facts(gpus=h100s()))
    assert hook.warnings == ["node1 GPU0, GPU1: the inventory says provision_gpu.compute_mode exclusive_process "
                             "(`provision compute-mode exclusive_process`); the next `provision apply` sets that back"]
