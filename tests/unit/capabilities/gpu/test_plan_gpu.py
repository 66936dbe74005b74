"""Planning persistence and power limits: pure functions of (facts, settings), on parsed real output."""

from __future__ import annotations

from dataclasses import replace
from builders.facts import facts
from builders.gpus import gpu
from builders.hosts import host
from realdata import h100_query_output

from provision.capabilities.gpu import smi as parsers
from provision.capabilities.gpu.model import GpuFacts, NvidiaFacts
from provision.capabilities.host import HostFacts
from provision.capabilities.gpu.tasks import Persistence, PowerLimit


def real_h100() -> GpuFacts:
    [gpu], _ = parsers.parse_query_gpu(h100_query_output())
    return gpu


def v100(index: int, power: float = 300.0, persistence: bool = False) -> GpuFacts:
    """A V100 with persistence off: the state the persistence tests start from."""
    return gpu(index, "V100", power_limit=power, persistence=persistence)


def test_power_limit_changes_only_the_gpus_that_differ():
    plan = PowerLimit().plan(host(provision_gpu={"power_limit": 200}), facts(gpus=[v100(0, 200), v100(1, 300)]))
    assert [(c.target, c.before, c.after) for c in plan.changes] == [("GPU1", "300.00 W", "200.00 W")]
    assert plan.changes[0].commands == [["nvidia-smi", "-i", "GPU-1db1-0001", "-pl", "200"]]
    assert [i.target for i in plan.unchanged] == ["GPU0"]


def test_power_limit_out_of_the_gpus_range_is_a_problem_naming_gpu_and_range():
    plan = PowerLimit().plan(host(provision_gpu={"power_limit": 100}), facts(gpus=[real_h100()]))
    assert plan.changes == []
    [problem] = plan.problems
    assert "GPU0 (NVIDIA H100 80GB HBM3)" in problem and "100 W" in problem and "200..700 W" in problem


def test_power_limit_default_restores_the_gpus_default():
    plan = PowerLimit().plan(host(provision_gpu={"power_limit": "default"}),
                             facts(gpus=[replace(real_h100(), power_limit=500.0)]))
    assert [(c.before, c.after) for c in plan.changes] == [("500.00 W", "700.00 W")]


def test_per_gpu_override_by_index():
    settings = {"power_limit": 200, "overrides": [{"index": 2, "power_limit": 180}]}
    plan = PowerLimit().plan(host(provision_gpu=settings), facts(gpus=list(v100(i) for i in range(4))))
    assert [(c.target, c.after) for c in plan.changes] == [
        ("GPU0", "200.00 W"), ("GPU1", "200.00 W"), ("GPU2", "180.00 W"), ("GPU3", "200.00 W")]


def test_power_limit_not_supported_is_a_problem():
    rtx3090 = gpu(0, "RTX 3090", power_limit=None, power_min=None, power_max=None)
    plan = PowerLimit().plan(host(provision_gpu={"power_limit": 250}), facts(gpus=[rtx3090]))
    assert "does not support changing its power limit" in plan.problems[0]


def test_no_gpu_settings_skips_and_no_driver_fails():
    assert PowerLimit().plan(host(provision_gpu=None), facts(gpus=[v100(0)])).skipped
    assert Persistence().plan(host(provision_gpu={"power_limit": 200}), facts(gpus=[v100(0)])).skipped
    missing = HostFacts(nvidia=NvidiaFacts(state="missing"))
    assert "install the NVIDIA driver" in Persistence().plan(host(provision_gpu={"persistence": True}), missing).failed


def test_persistence_uses_nvidia_smi_pm_without_the_daemon():
    plan = Persistence().plan(host(provision_gpu={"persistence": True}),
                              facts(gpus=[v100(0), v100(1, persistence=True)]))
    assert [c.commands for c in plan.changes] == [[["nvidia-smi", "-i", "GPU-1db1-0000", "-pm", "1"]]]
    assert [i.target for i in plan.unchanged] == ["GPU1"]


def test_persistence_prefers_the_daemon_where_installed():
    read = facts(gpus=[v100(0), v100(1)], persistenced="/usr/bin/nvidia-persistenced")
    [change] = Persistence().plan(host(provision_gpu={"persistence": True}), read).changes
    assert change.commands == [["/usr/bin/nvidia-persistenced"]] and change.target == "host"
    read.system.systemd_running = True
    [change] = Persistence().plan(host(provision_gpu={"persistence": True}), read).changes
    assert change.commands == [["systemctl", "start", "nvidia-persistenced"]]  # the boot unit Wants= it at boot


def test_persistence_off_uses_pm_0():
    plan = Persistence().plan(host(provision_gpu={"persistence": False}), facts(gpus=[real_h100()]))
    assert plan.changes[0].commands == [["nvidia-smi", "-i", real_h100().uuid, "-pm", "0"]]


def test_verify_reads_the_fresh_facts():
    plan = PowerLimit().plan(host(provision_gpu={"power_limit": 200}), facts(gpus=[v100(0)]))
    change = plan.changes[0]
    assert change.verify(facts(gpus=[v100(0, 200)])) is None
    assert "reads 300.00 W" in change.verify(facts(gpus=[v100(0, 300)]))
