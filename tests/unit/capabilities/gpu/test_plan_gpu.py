"""Planning persistence and power limits: pure functions of (facts, settings), on parsed real output."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

from realdata import h100_query_output

from provision.capabilities.gpu import smi as parsers
from provision.capabilities.gpu.model import GpuFacts, NvidiaFacts
from provision.capabilities.host import HostFacts
from provision.core.facts import SystemFacts
from provision.capabilities.gpu.settings import GpuSettings
from provision.capabilities.host import HostSettings
from provision.capabilities.gpu.tasks import Persistence, PowerLimit


def real_h100() -> GpuFacts:
    [gpu], _ = parsers.parse_query_gpu(h100_query_output())
    return gpu


def v100(index: int, power: float = 300.0, persistence: bool = False) -> GpuFacts:
    return GpuFacts(index=index, uuid=f"GPU-v100-{index}", name="Tesla V100-SXM2-16GB",
                    bus_id=f"00000000:{index + 0x15:02X}:00.0", persistence=persistence,
                    power_limit=power, power_default=300.0, power_min=150.0, power_max=300.0)


def host_with(gpu: dict | None):
    settings = HostSettings(gpu=GpuSettings.model_validate(gpu) if gpu is not None else None)
    return SimpleNamespace(name="node1", settings=settings, flags=frozenset())


def facts_with(*gpus: GpuFacts, daemon: str | None = None, systemd: bool = False) -> HostFacts:
    return HostFacts(system=SystemFacts(uid=0, systemd_running=systemd),
                     nvidia=NvidiaFacts(state="ok", gpus=list(gpus), persistenced_path=daemon))


def test_power_limit_changes_only_the_gpus_that_differ():
    plan = PowerLimit().plan(host_with({"power_limit": 200}), facts_with(v100(0, 200), v100(1, 300)))
    assert [(c.target, c.before, c.after) for c in plan.changes] == [("GPU1", "300.00 W", "200.00 W")]
    assert plan.changes[0].commands == [["nvidia-smi", "-i", "GPU-v100-1", "-pl", "200"]]
    assert [i.target for i in plan.unchanged] == ["GPU0"]


def test_power_limit_out_of_the_gpus_range_is_a_problem_naming_gpu_and_range():
    plan = PowerLimit().plan(host_with({"power_limit": 100}), facts_with(real_h100()))
    assert plan.changes == []
    [problem] = plan.problems
    assert "GPU0 (NVIDIA H100 80GB HBM3)" in problem and "100 W" in problem and "200..700 W" in problem


def test_power_limit_default_restores_the_gpus_default():
    plan = PowerLimit().plan(host_with({"power_limit": "default"}), facts_with(replace(real_h100(), power_limit=500.0)))
    assert [(c.before, c.after) for c in plan.changes] == [("500.00 W", "700.00 W")]


def test_per_gpu_override_by_index():
    settings = {"power_limit": 200, "overrides": [{"index": 2, "power_limit": 180}]}
    plan = PowerLimit().plan(host_with(settings), facts_with(*(v100(i) for i in range(4))))
    assert [(c.target, c.after) for c in plan.changes] == [
        ("GPU0", "200.00 W"), ("GPU1", "200.00 W"), ("GPU2", "180.00 W"), ("GPU3", "200.00 W")]


def test_power_limit_not_supported_is_a_problem():
    gpu = replace(v100(0), power_limit=None, power_min=None, power_max=None, name="NVIDIA GeForce RTX 3090")
    plan = PowerLimit().plan(host_with({"power_limit": 250}), facts_with(gpu))
    assert "does not support changing its power limit" in plan.problems[0]


def test_no_gpu_settings_skips_and_no_driver_fails():
    assert PowerLimit().plan(host_with(None), facts_with(v100(0))).skipped
    assert Persistence().plan(host_with({"power_limit": 200}), facts_with(v100(0))).skipped
    missing = HostFacts(nvidia=NvidiaFacts(state="missing"))
    assert "install the NVIDIA driver" in Persistence().plan(host_with({"persistence": True}), missing).failed


def test_persistence_uses_nvidia_smi_pm_without_the_daemon():
    plan = Persistence().plan(host_with({"persistence": True}), facts_with(v100(0), v100(1, persistence=True)))
    assert [c.commands for c in plan.changes] == [[["nvidia-smi", "-i", "GPU-v100-0", "-pm", "1"]]]
    assert [i.target for i in plan.unchanged] == ["GPU1"]


def test_persistence_prefers_the_daemon_where_installed():
    facts = facts_with(v100(0), v100(1), daemon="/usr/bin/nvidia-persistenced")
    [change] = Persistence().plan(host_with({"persistence": True}), facts).changes
    assert change.commands == [["/usr/bin/nvidia-persistenced"]] and change.target == "host"
    facts.system.systemd_running = True
    [change] = Persistence().plan(host_with({"persistence": True}), facts).changes
    assert change.commands == [["systemctl", "start", "nvidia-persistenced"]]  # the boot unit Wants= it at boot


def test_persistence_off_uses_pm_0():
    plan = Persistence().plan(host_with({"persistence": False}), facts_with(real_h100()))
    assert plan.changes[0].commands == [["nvidia-smi", "-i", real_h100().uuid, "-pm", "0"]]


def test_verify_reads_the_fresh_facts():
    plan = PowerLimit().plan(host_with({"power_limit": 200}), facts_with(v100(0)))
    change = plan.changes[0]
    assert change.verify(facts_with(v100(0, 200))) is None
    assert "reads 300.00 W" in change.verify(facts_with(v100(0, 300)))
