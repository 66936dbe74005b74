"""Each verify check's verdict on parsed facts (the suite's functions called directly, no pytest session)."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest

from provision.facts.model import GpuFacts, HostFacts, LostGpu, NvidiaFacts
from provision.settings import GpuSettings, HostSettings
from provision.tasks.gpu import PowerLimit
from provision.verify import CheckFailed, Node
from provision.verify.suite import checks_gpu as checks


def gpu(index: int, **values) -> GpuFacts:
    return replace(GpuFacts(index=index, uuid=f"GPU-{index}", name="NVIDIA GeForce RTX 4090",
                            bus_id=f"00000000:{index + 1:02X}:00.0", power_limit=400.0, power_default=450.0,
                            power_min=150.0, power_max=450.0, pcie_width_current=16, pcie_width_max=16), **values)


def node(nvidia: NvidiaFacts, gpu_block: dict | None = None) -> Node:
    inventory = SimpleNamespace(name="rig", accept_gpu_changes=False, settings=HostSettings(
        gpu=GpuSettings.model_validate(gpu_block if gpu_block is not None else {"power_limit": 400})))
    return Node("rig", inventory, HostFacts(nvidia=nvidia), [PowerLimit()], host=None, inventory_path="basement.yaml")


def verdict(check, *args) -> CheckFailed | None:
    try:
        check(*args)
    except CheckFailed as failed:
        return failed
    return None


def test_nvidia_smi_exit_codes_carry_their_meaning():
    assert verdict(checks.check_nvidia_smi_reads_the_gpus, node(NvidiaFacts(state="ok", exit_code=0, gpus=[gpu(0)]))) \
        is None
    failed = verdict(checks.check_nvidia_smi_reads_the_gpus,
                     node(NvidiaFacts(state="error", exit_code=9, message="NVIDIA-SMI has failed")))
    assert "exit 9 (the NVIDIA driver is not loaded): NVIDIA-SMI has failed" in failed.found
    lost = NvidiaFacts(state="ok", exit_code=15, gpus=[gpu(0)], lost=[LostGpu("0000:02:00.0", "Unable to ...")])
    assert "exit 15 (a GPU has fallen off the bus" in verdict(checks.check_nvidia_smi_reads_the_gpus, node(lost)).found
    assert "0000:02:00.0: Unable to ..." in verdict(checks.check_no_gpu_is_lost, node(lost)).found


def test_a_link_trained_narrow_fails_and_a_slow_idle_generation_does_not():
    idle = NvidiaFacts(state="ok", gpus=[gpu(0, pcie_gen_current=1, pcie_gen_max=4)])
    assert verdict(checks.check_pcie_links_run_at_full_width, node(idle)) is None
    riser = NvidiaFacts(state="ok", gpus=[gpu(0), gpu(3, pcie_width_current=8)])
    failed = verdict(checks.check_pcie_links_run_at_full_width, node(riser))
    assert failed.found == "GPU3 00000000:04:00.0 x8 of x16" and "riser" in failed.fix
    missing = NvidiaFacts(state="ok", gpus=[gpu(0, pcie_width_current=None)])  # [N/A]: a state, not a failure
    assert verdict(checks.check_pcie_links_run_at_full_width, node(missing)) is None


def test_as_intended_is_the_tasks_plan_with_nothing_to_change():
    converged = node(NvidiaFacts(state="ok", gpus=[gpu(0), gpu(1)]))
    assert verdict(checks.check_as_intended, converged, PowerLimit()) is None
    drifted = node(NvidiaFacts(state="ok", gpus=[gpu(0), gpu(1, power_limit=450.0)]))
    failed = verdict(checks.check_as_intended, drifted, PowerLimit())
    assert (failed.expected, failed.found) == ("GPU1 power limit 400.00 W", "GPU1 power limit 450.00 W")
    assert failed.fix.startswith("provision apply basement.yaml --limit rig")


def test_a_host_without_a_gpu_block_skips_the_gpu_checks():
    bare = node(NvidiaFacts(state="missing"))
    bare.inventory.settings = HostSettings()
    with pytest.raises(pytest.skip.Exception):
        checks.check_no_gpu_is_lost(bare)
