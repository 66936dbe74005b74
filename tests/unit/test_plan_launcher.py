"""The torchrun wrapper and sbatch script: rendered per node from the whole training cluster, and run for real."""

from __future__ import annotations

import os
import subprocess
import textwrap

import yaml

from provision.clusters import Cluster
from provision.facts.model import FileFacts, GpuFacts, HostFacts, NvidiaFacts
from provision.inventory import load_inventory
from provision.resources import templates_dir
from provision.tasks.launcher import TorchrunLauncher

BLADES = """
all:
  vars:
    launcher: {nproc_per_node: gpu, options: ["--max-restarts=3"], env: {OMP_NUM_THREADS: 4}}
  children:
    rtx3090:
      hosts:
        rtx3090-1: {ansible_host: 198.51.100.11}
        rtx3090-2: {ansible_host: 198.51.100.12}
        rtx3090-3: {ansible_host: 198.51.100.13}
        rtx3090-4: {ansible_host: 198.51.100.14}
      vars:
        nccl: {socket_ifname: ens803f, socket_nthreads: 1}
    v100:
      hosts:
        v100-1: {ansible_host: 192.0.2.10}
"""


def inventory(tmp_path, text=BLADES, **changes):
    data = yaml.safe_load(textwrap.dedent(text))
    data["all"]["vars"]["launcher"].update(changes)
    path = tmp_path / "inventory.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_inventory(str(path))


def gpus(count: int) -> HostFacts:
    return HostFacts(nvidia=NvidiaFacts(state="ok", gpus=[
        GpuFacts(i, f"GPU-{i}", "NVIDIA GeForce RTX 3090", f"00000000:0{i}:00.0") for i in range(count)]))


def planned(inv, name: str, facts: HostFacts | None = None):
    task = TorchrunLauncher()
    task.templates = templates_dir()
    task.cluster = Cluster(list(inv.hosts.values()))
    return task.plan(inv.hosts[name], facts or gpus(1))


def test_each_blade_counts_every_blade_and_meets_on_the_first(tmp_path):
    inv = inventory(tmp_path)
    plan = planned(inv, "rtx3090-3")
    (wrapper,) = [c.write for c in plan.changes]
    assert (wrapper.path, wrapper.mode) == ("/usr/local/bin/rtx3090-torchrun", "0755")
    text = wrapper.content
    assert "4 nodes: rtx3090-1, rtx3090-2, rtx3090-3, rtx3090-4; this node (rtx3090-3) starts 1 process." in text
    assert '--nnodes="${PROVISION_NNODES:-4}"' in text and "--nproc-per-node=1" in text
    assert '--rdzv-endpoint="${PROVISION_RDZV_HOST:-198.51.100.11}:29400"' in text
    assert '--rdzv-id="${PROVISION_RDZV_ID:-rtx3090}"' in text and "--max-restarts=3" in text
    assert ". /etc/provision/nccl.env" in text and "export OMP_NUM_THREADS=4" in text
    v100 = planned(inv, "v100-1", gpus(4)).changes[0].write
    assert v100.path == "/usr/local/bin/v100-torchrun" and "--nproc-per-node=4" in v100.content
    assert "nccl.env" not in v100.content and '--nnodes="${PROVISION_NNODES:-1}"' in v100.content


def test_a_node_without_gpus_fails_when_one_process_per_gpu_is_asked(tmp_path):
    plan = planned(inventory(tmp_path), "rtx3090-1", HostFacts())
    assert plan.changes == [] and "nproc_per_node is gpu, and nvidia-smi reads no GPU here" in plan.failed


def test_a_wrapper_already_right_is_left_alone(tmp_path):
    inv = inventory(tmp_path)
    write = planned(inv, "rtx3090-1").changes[0].write
    facts = gpus(1)
    facts.files[write.path] = FileFacts(write.path, True, write.content.encode(), "755", "root", "root")
    again = planned(inv, "rtx3090-1", facts)
    assert again.changes == [] and [i.target for i in again.unchanged] == [write.path]


def test_static_rendezvous_gives_each_node_its_rank(tmp_path):
    inv = inventory(tmp_path, rdzv_backend="static")
    text = planned(inv, "rtx3090-2").changes[0].write.content
    assert '--node-rank="${PROVISION_NODE_RANK:-1}"' in text and "--master-port=29500" in text
    assert '--master-addr="${PROVISION_RDZV_HOST:-198.51.100.11}"' in text and "--rdzv" not in text


def test_the_wrapper_runs_torchrun_with_the_nccl_environment_and_passes_arguments_through(tmp_path):
    """The rendered script, run by sh, with a fake torchrun that prints what it got."""
    inv = inventory(tmp_path, torchrun=str(tmp_path / "torchrun"))
    text = planned(inv, "rtx3090-2").changes[0].write.content
    env_file = tmp_path / "nccl.env"
    env_file.write_text("NCCL_SOCKET_IFNAME='ens803f'\n")
    (tmp_path / "torchrun").write_text('#!/bin/sh\necho "NCCL_SOCKET_IFNAME=$NCCL_SOCKET_IFNAME"\n'
                                       'for a in "$@"; do echo "[$a]"; done\n')
    (tmp_path / "torchrun").chmod(0o755)
    wrapper = tmp_path / "wrapper"
    wrapper.write_text(text.replace("/etc/provision/nccl.env", str(env_file)))
    env = {"PATH": os.environ["PATH"], "PROVISION_NNODES": "2", "PROVISION_RDZV_HOST": "10.0.0.5"}
    out = subprocess.run(["sh", str(wrapper), "train.py", "--lr", "0.1 0.2"], capture_output=True, text=True,
                         env=env, check=True).stdout.splitlines()
    assert out == ["NCCL_SOCKET_IFNAME=ens803f", "[--nnodes=2]", "[--nproc-per-node=1]", "[--rdzv-backend=c10d]",
                   "[--rdzv-endpoint=10.0.0.5:29400]", "[--rdzv-id=rtx3090]", "[--max-restarts=3]", "[train.py]",
                   "[--lr]", "[0.1 0.2]"]
    env_file.unlink()  # a node whose NCCL file is missing must not train with NCCL's defaults
    missing = subprocess.run(["sh", str(wrapper), "train.py"], capture_output=True, text=True, env=env)
    assert missing.returncode != 0 and "nccl.env" in missing.stderr


def test_slurm_nodes_get_the_sbatch_script_beside_the_wrapper(tmp_path):
    text = BLADES.replace("nccl: {socket_ifname: ens803f, socket_nthreads: 1}",
                          "nccl: {socket_ifname: ens803f, socket_nthreads: 1}\n        slurm: {controller: v100-1}")
    text = text.replace("v100-1: {ansible_host: 192.0.2.10}",
                        "v100-1: {ansible_host: 192.0.2.10, slurm: {controller: v100-1}}")
    inv = inventory(tmp_path, text)
    wrapper, sbatch = (c.write for c in planned(inv, "rtx3090-1").changes)
    assert sbatch.path == "/usr/local/bin/rtx3090-torchrun.sbatch" and sbatch.mode == "0755"
    assert "#SBATCH --nodes=4" in sbatch.content and "#SBATCH --partition=rtx3090" in sbatch.content
    assert "#SBATCH --ntasks-per-node=1" in sbatch.content and "#SBATCH --gpus-per-node=1" in sbatch.content
    assert "exec \"$0\" \"$@\"' /usr/local/bin/rtx3090-torchrun \"$@\"" in sbatch.content
    assert subprocess.run(["bash", "-n"], input=sbatch.content, text=True).returncode == 0


def test_one_process_per_gpu_counts_the_intended_gpus_not_the_ones_readable_today(tmp_path):
    """A card off the bus fails verify; it does not rewrite the launch command for fewer processes."""
    inv = inventory(tmp_path, BLADES.replace("v100-1: {ansible_host: 192.0.2.10}",
                                             "v100-1: {ansible_host: 192.0.2.10, gpu: {count: 4}}"))
    assert "--nproc-per-node=4" in planned(inv, "v100-1", gpus(3)).changes[0].write.content
