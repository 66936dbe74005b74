"""What a unit sets again at every boot is its capability's declaration (Capability.boot_units): verify's
as_intended asks after the unit for a task that alters that state, and names no unit itself."""

from __future__ import annotations

import dataclasses

from provision.capabilities import gpu, registry
from provision.capabilities.capability import BootUnit
from provision.capabilities.registry import units_setting_again


def test_a_task_altering_what_a_boot_unit_sets_again_is_told_of_that_unit():
    assert units_setting_again(frozenset({"nvidia.power_limit"})) == ["provision-gpu-tuning.service"]
    assert units_setting_again(registry.TASK_TYPES["gpu-power-limit"].alters) == ["provision-gpu-tuning.service"]


def test_other_state_of_the_same_fact_field_or_an_undeclared_task_is_not():
    # The fabric manager's task alters the GPUs' list too: the boot file does not set it again.
    assert units_setting_again(frozenset({"packages", "nvidia.gpus"})) == []
    assert units_setting_again(frozenset({"*"})) == []


def test_a_boot_unit_setting_an_unknown_fact_key_fails_the_fold():
    typo = dataclasses.replace(gpu.CAPABILITY, boot_units=(BootUnit("provision-gpu-tuning.service",
                                                                     frozenset({"nvidia.power_limits"})),))
    folded = tuple(typo if c is gpu.CAPABILITY else c for c in registry.CAPABILITIES)
    assert registry.declaration_problems(folded) == [
        "unknown fact key: gpu's provision-gpu-tuning.service sets 'nvidia.power_limits' again"]
