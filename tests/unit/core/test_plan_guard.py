"""Task.plan guards a task's settings blocks once: a host without one is skipped with the reason the report shows,
and a BlockTask plans with its block typed as HostSettings declares it."""

from __future__ import annotations

import typing
from types import NoneType

import pytest

from builders.hosts import host
from provision.capabilities.host import HostFacts, HostSettings
from provision.capabilities.registry import TASK_TYPES
from provision.core.plan import BlockTask, Task

# The reasons as apply and verify report them (README and the plan tests name some of them).
SKIPPED_WITHOUT_ITS_BLOCK = {
    "nouveau-blacklist": "driver not set", "driver-repository": "driver not set", "nvidia-driver": "driver not set",
    "fabric-manager": "driver not set", "container-toolkit": "driver not set", "cdi-spec": "driver not set", "container-runtime": "driver not set",
    "dcgm": "driver not set", "nvidia-peermem": "driver not set",
    "gpu-layout": "gpu not set", "gpu-boot-conf": "gpu not set",
    "gpu-persistence": "provision_gpu.persistence not set", "gpu-power-limit": "provision_gpu.power_limit not set",
    "gpu-clocks": "provision_gpu.clocks not set", "gpu-locked-clocks": "provision_gpu.locked_clocks not set",
    "gpu-ecc": "provision_gpu.ecc not set", "gpu-compute-mode": "provision_gpu.compute_mode not set",
    "gpu-mig-mode": "provision_gpu.mig not set", "gpu-mig-layout": "provision_gpu.mig not set",
    "nccl-files": "nccl not set", "torchrun-launcher": "launcher not set",
    "slurm-packages": "slurm not set", "munge-key": "slurm not set", "slurm-config": "slurm not set",
    "slurm-daemons": "slurm not set", "enroot-pyxis": "slurm not set", "pyxis-plugstack": "slurm not set",
}


def block_type(cls: type[Task]) -> object:
    """The BlockT a BlockTask subclass fills in (from its class, or the nearest base that does)."""
    for klass in cls.__mro__:
        for base in getattr(klass, "__orig_bases__", ()):
            if typing.get_origin(base) is BlockTask:
                return typing.get_args(base)[0]
    raise AssertionError(f"{cls.__name__} names no BlockT")


@pytest.mark.parametrize("name", sorted(SKIPPED_WITHOUT_ITS_BLOCK))
def test_a_host_without_the_block_is_skipped_with_the_reason_the_report_shows(name):
    plan = TASK_TYPES[name]().plan(host("node-1"), HostFacts())
    assert (plan.skipped, plan.changes, plan.failed) == (SKIPPED_WITHOUT_ITS_BLOCK[name], [], "")


def test_every_task_with_a_block_is_listed_above():
    assert {name for name, cls in TASK_TYPES.items() if cls.settings_blocks} == set(SKIPPED_WITHOUT_ITS_BLOCK)


@pytest.mark.parametrize("name", sorted(n for n, cls in TASK_TYPES.items() if issubclass(cls, BlockTask)))
def test_a_block_task_plans_with_its_block_typed_as_host_settings_declares_it(name):
    cls = TASK_TYPES[name]
    (block,) = cls.settings_blocks
    declared = [t for t in typing.get_args(HostSettings.model_fields[block].annotation) if t is not NoneType]
    assert [block_type(cls)] == declared


@pytest.mark.parametrize("name", ["template", "service"])
def test_a_when_block_not_set_skips_the_task(name):
    task = TASK_TYPES[name]({"src": "x.j2", "dest": "/etc/x", "unit": "x.service", "when": "gpu"})
    assert task.plan(host("node-1"), HostFacts()).skipped == "gpu not set"
    assert task.file_paths(host("node-1")) == [] and task.unit_names(host("node-1")) == []
