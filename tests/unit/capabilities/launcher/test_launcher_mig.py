"""torchrun on MIG slices (launcher/mig.py): more than one process per node is refused where the inventory lays out
slices (before any host is touched), not written where only the facts show MIG on, and flagged by verify; one
process per node runs on one slice, which the wrapper picks by its MIG UUID from `nvidia-smi -L` (the simulator's,
held to the MIG user guide's listing) unless it is given CUDA_VISIBLE_DEVICES."""

from __future__ import annotations

import os
import subprocess
import textwrap

import pytest
import yaml
from builders.checks import checked_node, verdict
from builders.facts import facts
from builders.mig import h200_gpu

from provision.capabilities.launcher import mig
from provision.capabilities.launcher.checks import check_torchrun_does_not_span_mig_slices
from provision.capabilities.launcher.tasks import TorchrunLauncher
from provision.core.checks import SERVICE, CheckFailed
from provision.core.cluster import Cluster
from provision.core.resources import templates_dir
from provision.inventory.load import load_inventory

TRAINERS = """
all:
  children:
    h200:
      hosts:
        h200-1: {ansible_host: 198.51.100.21}
        h200-2: {ansible_host: 198.51.100.22}
      vars:
        provision_launcher: {nproc_per_node: gpu}
"""
# nvidia-smi -L on a GPU with two MIG devices, as the simulator prints it (gpusim/migviews.py): the UUID is what
# CUDA_VISIBLE_DEVICES takes for a MIG device.
LISTING = """\
GPU 0: NVIDIA H200 (UUID: GPU-73746b14-7ef0-81b1-17a3-30175f715073)
  MIG 3g.71gb     Device  0: (UUID: MIG-10791d07-bd57-99db-9e61-54ec634eed4f)
  MIG 3g.71gb     Device  1: (UUID: MIG-2bccd9df-9249-2465-ba36-5129eb0f42e1)
"""


def host(tmp_path, launcher: dict | None = None, gpu: dict | None = None):
    data = yaml.safe_load(textwrap.dedent(TRAINERS))
    group = data["all"]["children"]["h200"]["vars"]
    group["provision_launcher"].update(launcher or {})
    if gpu is not None:
        group["provision_gpu"] = gpu
    path = tmp_path / "inventory.yaml"
    path.write_text(yaml.safe_dump(data))
    inv = load_inventory(str(path))
    return inv, inv.hosts["h200-1"]


def h200s(mode: bool):
    return facts(gpus=[h200_gpu(0, mode), h200_gpu(1, mode)])


def planned(tmp_path, read, **blocks):
    inv, node = host(tmp_path, **blocks)
    task = TorchrunLauncher()
    task.templates = templates_dir()
    task.cluster = Cluster(list(inv.hosts.values()))
    return task.plan(node, read)


def test_a_layout_in_the_inventory_with_a_process_per_gpu_is_refused_before_any_host_is_touched(tmp_path):
    plan = planned(tmp_path, h200s(False), gpu={"mig": ["3g.71gb", "3g.71gb"]})
    [problem] = plan.problems
    assert problem.startswith("GPU0, GPU1 are in MIG mode (the inventory gives them a MIG layout): torchrun would "
                              "start 2 processes on this node, but a CUDA process sees one MIG slice")
    assert "set provision_launcher.nproc_per_node: 1" in problem and plan.changes == []


def test_mig_on_by_hand_is_not_written_and_named_for_verify(tmp_path):
    plan = planned(tmp_path, h200s(True))
    assert plan.problems == [] and plan.changes == [] and plan.failed_check == mig.CHECK
    assert plan.failed.startswith("GPU0, GPU1 are in MIG mode (their MIG mode is on (nvidia-smi))")
    turned_off = planned(tmp_path, h200s(True), gpu={"overrides": [{"index": 0, "mig": "disabled"}]})
    assert turned_off.failed.startswith("GPU1 is in MIG mode (its MIG mode is on (nvidia-smi))")
    assert planned(tmp_path, h200s(True), gpu={"mig": "disabled"}).changes  # this run turns MIG off first


def test_one_process_per_node_runs_on_one_slice(tmp_path):
    plan = planned(tmp_path, h200s(True), launcher={"nproc_per_node": 1})
    text = plan.changes[0].write.content
    assert "--nproc-per-node=1" in text and "PROVISION_MIG_SLICE" in text
    plain = planned(tmp_path, h200s(False), launcher={"nproc_per_node": 2}).changes[0].write.content
    assert "--nproc-per-node=2" in plain and "MIG" not in plain


@pytest.mark.parametrize("given, slice_, expected", [
    ({}, None, "MIG-10791d07-bd57-99db-9e61-54ec634eed4f"),
    ({}, "1", "MIG-2bccd9df-9249-2465-ba36-5129eb0f42e1"),
    ({"CUDA_VISIBLE_DEVICES": "MIG-from-slurm"}, "1", "MIG-from-slurm")])
def test_the_wrapper_gives_its_process_one_slice_by_its_mig_uuid(tmp_path, given, slice_, expected):
    wrapper = write_wrapper(tmp_path)
    env = {"PATH": f"{tmp_path}:{os.environ['PATH']}", **given}
    env |= {"PROVISION_MIG_SLICE": slice_} if slice_ else {}
    out = subprocess.run(["sh", str(wrapper), "train.py"], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.splitlines()[0] == f"CUDA_VISIBLE_DEVICES={expected}"


def test_a_slice_the_node_does_not_have_is_an_error_naming_it(tmp_path):
    wrapper = write_wrapper(tmp_path)
    env = {"PATH": f"{tmp_path}:{os.environ['PATH']}", "PROVISION_MIG_SLICE": "2"}
    out = subprocess.run(["sh", str(wrapper), "train.py"], capture_output=True, text=True, env=env)
    assert out.returncode == 1 and "no MIG slice 2 here" in out.stderr


def write_wrapper(tmp_path):
    """The wrapper of a one-process launcher on MIG GPUs, with a fake nvidia-smi -L and a torchrun that prints the
    device it was given."""
    plan = planned(tmp_path, h200s(True), launcher={"nproc_per_node": 1, "torchrun": str(tmp_path / "torchrun")})
    for name, script in (("nvidia-smi", f"#!/bin/sh\ncat <<'EOF'\n{LISTING}EOF\n"),
                         ("torchrun", '#!/bin/sh\necho "CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES"\n')):
        (tmp_path / name).write_text(script)
        (tmp_path / name).chmod(0o755)
    wrapper = tmp_path / "wrapper"
    wrapper.write_text(plan.changes[0].write.content)
    return wrapper


def test_verify_flags_a_wrapper_that_would_span_slices_once_with_the_fix():
    failed = verdict(check_torchrun_does_not_span_mig_slices, checked_node(h200s(True), provision_launcher={}))
    assert isinstance(failed, CheckFailed)
    [finding] = failed.findings
    assert "torchrun would start 2 processes" in finding.found and finding.fix == mig.FIX
    assert finding.remedy == SERVICE  # the inventory changes it: neither a reset nor a reboot
    one = checked_node(h200s(True), provision_launcher={"nproc_per_node": 1})
    assert verdict(check_torchrun_does_not_span_mig_slices, one) is None
    assert verdict(check_torchrun_does_not_span_mig_slices, checked_node(h200s(False), provision_launcher={})) is None
    assert verdict(check_torchrun_does_not_span_mig_slices, checked_node(h200s(True))).startswith("skip: ")
