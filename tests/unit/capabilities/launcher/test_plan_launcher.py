"""The torchrun wrapper and sbatch script: rendered per node from the whole training cluster, and run for real."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

import pytest
import yaml

from builders.facts import facts, file
from builders.gpus import gpus
from provision.core.cluster import Cluster
from provision.capabilities.host import HostFacts
from provision.inventory.load import load_inventory
from provision.core.resources import templates_dir
from provision.capabilities.launcher.tasks import TorchrunLauncher

BLADES = """
all:
  vars:
    provision_launcher: {nproc_per_node: gpu, options: ["--max-restarts=3"], env: {OMP_NUM_THREADS: 4}}
  children:
    rtx3090:
      hosts:
        rtx3090-1: {ansible_host: 198.51.100.11}
        rtx3090-2: {ansible_host: 198.51.100.12}
        rtx3090-3: {ansible_host: 198.51.100.13}
        rtx3090-4: {ansible_host: 198.51.100.14}
      vars:
        provision_nccl: {socket_ifname: ens803f, socket_nthreads: 1}
    v100:
      hosts:
        v100-1: {ansible_host: 192.0.2.10}
"""


def inventory(tmp_path, text=BLADES, **changes):
    data = yaml.safe_load(textwrap.dedent(text))
    data["all"]["vars"]["provision_launcher"].update(changes)
    path = tmp_path / "inventory.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_inventory(str(path))


def rtx3090s(count: int) -> HostFacts:
    return facts(gpus=gpus(count, "RTX 3090"))


def planned(inv, name: str, read: HostFacts | None = None):
    task = TorchrunLauncher()
    task.templates = templates_dir()
    task.cluster = Cluster(list(inv.hosts.values()))
    return task.plan(inv.hosts[name], read or rtx3090s(1))


def test_each_blade_counts_every_blade_and_meets_on_the_first(tmp_path):
    inv = inventory(tmp_path)
    plan = planned(inv, "rtx3090-3")
    wrapper, allreduce = (c.write for c in plan.changes)
    assert allreduce.path == "/usr/local/bin/provision-allreduce"
    assert (wrapper.path, wrapper.mode) == ("/usr/local/bin/rtx3090-torchrun", "0755")
    text = wrapper.content
    assert "4 nodes: rtx3090-1, rtx3090-2, rtx3090-3, rtx3090-4; this node (rtx3090-3) starts 1 process." in text
    assert '--nnodes="${PROVISION_NNODES:-4}"' in text and "--nproc-per-node=1" in text
    assert "rdzv_host=${PROVISION_RDZV_HOST:-198.51.100.11}" in text and '--rdzv-endpoint="$rdzv_host:29400"' in text
    assert "rdzv_id=${PROVISION_RDZV_ID:-rtx3090}" in text and '--rdzv-id="$rdzv_id"' in text
    assert "--max-restarts=3" in text
    assert ". /etc/provision/nccl.env" in text and "export OMP_NUM_THREADS=4" in text
    v100 = planned(inv, "v100-1", rtx3090s(4)).changes[0].write
    assert v100.path == "/usr/local/bin/v100-torchrun" and "--nproc-per-node=4" in v100.content
    assert "provision_nccl.env" not in v100.content and '--nnodes="${PROVISION_NNODES:-1}"' in v100.content


def test_a_node_without_gpus_fails_when_one_process_per_gpu_is_asked(tmp_path):
    plan = planned(inventory(tmp_path), "rtx3090-1", HostFacts())
    assert plan.changes == [] and "nproc_per_node is gpu, and nvidia-smi reads no GPU here" in plan.failed


def test_a_wrapper_already_right_is_left_alone(tmp_path):
    inv = inventory(tmp_path)
    writes = [c.write for c in planned(inv, "rtx3090-1").changes]
    read = rtx3090s(1)
    for write in writes:
        read.files[write.path] = file(write.path, write.content, mode="755")
    again = planned(inv, "rtx3090-1", read)
    assert again.changes == [] and [i.target for i in again.unchanged] == [w.path for w in writes]


def test_static_rendezvous_gives_each_node_its_rank(tmp_path):
    inv = inventory(tmp_path, rdzv_backend="static")
    text = planned(inv, "rtx3090-2").changes[0].write.content
    assert '--node-rank="${PROVISION_NODE_RANK:-1}"' in text and "--master-port=29500" in text
    assert "rdzv_host=${PROVISION_RDZV_HOST:-198.51.100.11}" in text and '--master-addr="$rdzv_host"' in text
    assert "--rdzv" not in text and "rdzv_id" not in text


def test_the_wrapper_runs_torchrun_with_the_nccl_environment_and_passes_arguments_through(tmp_path):
    """The rendered script, run by sh, with a fake torchrun that prints what it got."""
    inv = inventory(tmp_path, torchrun=str(tmp_path / "torchrun"))
    text = planned(inv, "rtx3090-2").changes[0].write.content
    env_file = tmp_path / "provision_nccl.env"
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
    assert missing.returncode != 0 and "provision_nccl.env" in missing.stderr


def test_slurm_nodes_get_the_sbatch_script_beside_the_wrapper(tmp_path):
    text = BLADES.replace("provision_nccl: {socket_ifname: ens803f, socket_nthreads: 1}",
                          "provision_nccl: {socket_ifname: ens803f, socket_nthreads: 1}\n        provision_slurm: {controller: v100-1}")
    text = text.replace("v100-1: {ansible_host: 192.0.2.10}",
                        "v100-1: {ansible_host: 192.0.2.10, provision_slurm: {controller: v100-1}}")
    inv = inventory(tmp_path, text)
    wrapper, sbatch, allreduce = (c.write for c in planned(inv, "rtx3090-1").changes)
    assert sbatch.path == "/usr/local/bin/rtx3090-torchrun.sbatch" and sbatch.mode == "0755"
    assert "#SBATCH --nodes=4" in sbatch.content and "#SBATCH --partition=rtx3090" in sbatch.content
    assert "#SBATCH --ntasks-per-node=1" in sbatch.content and "#SBATCH --gpus-per-node=1" in sbatch.content
    assert "exec \"$0\" \"$@\"' /usr/local/bin/rtx3090-torchrun \"$@\"" in sbatch.content
    assert subprocess.run(["bash", "-n"], input=sbatch.content, text=True).returncode == 0


def test_one_process_per_gpu_counts_the_intended_gpus_not_the_ones_readable_today(tmp_path):
    """A card off the bus fails verify; it does not rewrite the launch command for fewer processes."""
    inv = inventory(tmp_path, BLADES.replace("v100-1: {ansible_host: 192.0.2.10}",
                                             "v100-1: {ansible_host: 192.0.2.10, provision_gpu: {count: 4}}"))
    assert "--nproc-per-node=4" in planned(inv, "v100-1", rtx3090s(3)).changes[0].write.content


# --- provision-allreduce: the smoke test beside the wrapper ---------------------------------------------------

def slurm_blades(tmp_path, **changes):
    text = BLADES.replace("provision_nccl: {socket_ifname: ens803f, socket_nthreads: 1}",
                          "provision_nccl: {socket_ifname: ens803f, socket_nthreads: 1}\n        provision_slurm: {controller: v100-1}")
    text = text.replace("v100-1: {ansible_host: 192.0.2.10}",
                        "v100-1: {ansible_host: 192.0.2.10, provision_slurm: {controller: v100-1}}")
    return inventory(tmp_path, text, **changes)


def allreduce_of(plan):
    (write,) = [c.write for c in plan.changes if c.write.path.endswith("/provision-allreduce")]
    return write


def test_every_node_gets_the_allreduce_smoke_test_beside_the_wrapper(tmp_path):
    inv = slurm_blades(tmp_path)
    host = inv.hosts["rtx3090-2"]
    program = allreduce_of(planned(inv, "rtx3090-2"))
    assert (program.path, program.mode) == ("/usr/local/bin/provision-allreduce", "0755")
    assert program.path in TorchrunLauncher().file_paths(host)  # read with the facts: verify judges it too
    text = program.content
    assert text.startswith("#!/usr/bin/env python3\n")
    assert "#   /usr/local/bin/rtx3090-torchrun /usr/local/bin/provision-allreduce" in text
    assert "#   sbatch /usr/local/bin/rtx3090-torchrun.sbatch /usr/local/bin/provision-allreduce" in text
    compile(text, program.path, "exec")
    elsewhere = inventory(tmp_path, wrapper_path="/opt/train/bin/run-torch")
    moved = allreduce_of(planned(elsewhere, "rtx3090-1"))
    assert moved.path == "/opt/train/bin/provision-allreduce" and "sbatch" not in moved.content
    assert 'WRAPPER, PROGRAM = "/opt/train/bin/run-torch", "/opt/train/bin/provision-allreduce"' in moved.content


def test_the_smoke_test_outside_torchrun_says_how_to_start_it(tmp_path):
    program = tmp_path / "provision-allreduce"
    program.write_text(allreduce_of(planned(inventory(tmp_path), "rtx3090-1")).content)
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    run = subprocess.run([sys.executable, str(program)], capture_output=True, text=True, env=env)
    assert run.returncode == 2
    assert "not set: start it with torchrun" in run.stderr
    assert "/usr/local/bin/rtx3090-torchrun /usr/local/bin/provision-allreduce" in run.stderr


def torchrun(tmp_path, script, nproc: int, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_"))}
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
                           str(script), *args], capture_output=True, text=True, env=env | {"GLOO_SOCKET_IFNAME": "lo"},
                          cwd=tmp_path, timeout=300)


def test_the_smoke_test_all_reduces_for_real_nccl_on_gpus_else_gloo(tmp_path):
    """torch where this Python has it (the lab's nodes do: tests/lab/test_slurm.py runs it across nodes)."""
    torch = pytest.importorskip("torch")
    program = tmp_path / "provision-allreduce"
    program.write_text(allreduce_of(planned(inventory(tmp_path), "rtx3090-1")).content)
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    run = torchrun(tmp_path, program, gpus or 2, "--mib", "1")
    assert run.returncode == 0, run.stdout + run.stderr
    world, backend = (gpus, "nccl") if gpus else (2, "gloo")
    lines = sorted(re.findall(rf"^rank (\d+) of {world} on \S+ \(local rank \d+\): {backend}( via lo 127\.0\.0\.1)?: "
                              rf"all_reduce sum {world * (world + 1) // 2}, 1 MiB in [\d.]+ ms", run.stdout, re.M))
    assert [r for r, _via in lines] == [str(r) for r in range(world)], run.stdout
    assert f"all_reduce ok: {world} processes on 1 node(s)" in run.stdout


def test_the_smoke_test_fails_when_one_rank_gets_a_wrong_sum(tmp_path):
    pytest.importorskip("torch")
    program = tmp_path / "provision-allreduce"
    program.write_text(allreduce_of(planned(inventory(tmp_path), "rtx3090-1")).content)
    faulty = tmp_path / "faulty.py"  # rank 1's result corrupted after a real all-reduce
    faulty.write_text(textwrap.dedent(f"""\
        import os, runpy, sys
        import torch.distributed as dist
        reduce = dist.all_reduce
        if os.environ["RANK"] == "1":
            dist.all_reduce = lambda t: (reduce(t), t[-1:].add_(1))
        sys.argv = [{str(program)!r}, *sys.argv[1:]]
        runpy.run_path({str(program)!r}, run_name="__main__")
        """))
    run = torchrun(tmp_path, faulty, 2, "--backend", "gloo", "--mib", "0.5", "--timeout", "60")
    assert run.returncode != 0
    assert re.search(r"^rank 1 of 2 .*: all_reduce sum 4, expected 3: WRONG$", run.stderr, re.M), run.stderr
    assert "all_reduce FAILED on rank(s) 1: 2 processes on 1 node(s)" in run.stdout
