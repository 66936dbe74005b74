"""A lab node boots like a machine that can run Slurm and torch.distributed: cgroup v1 controllers of its own,
the driver's /dev/nvidia* in its own /dev, the packaged munge.service started as systemd would (as user munge,
in its RuntimeDirectory) after a reboot, torch (CPU, gloo) for its python3, and the other nodes by name.

Its own two-node lab beside the session's (`--nodes 2`, seconds once the image, the apt repository and the
Python layer are cached), so installing and rebooting here changes no node another test expects.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.lab

NODES = ("lab-node-1", "lab-node-2")
APT = "DEBIAN_FRONTEND=noninteractive apt-get -q -y"
TORCH_CHECK = 'python3 -c "import torch, torch.distributed as d; print(torch.__version__, d.is_gloo_available())"'
ALLREDUCE = """\
import os, torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.tensor([dist.get_rank() + 1.0])
dist.all_reduce(t)
print(f"rank {dist.get_rank()} of {dist.get_world_size()} on {os.uname().nodename}: {t.item()}")
dist.destroy_process_group()
"""


@pytest.fixture(scope="module")
def pair(lab_beside):
    with lab_beside("services", lambda cluster: cluster.lab("up", "--nodes", "2")) as cluster:
        yield cluster


def ok(lab, node: str, command: str) -> str:
    proc = lab.ssh(node, command)
    assert proc.returncode == 0, f"{node}: {command}: {proc.stdout}{proc.stderr}"
    return proc.stdout


def test_torch_cpu_with_gloo_and_torchrun_in_every_node(pair):
    for node in NODES:
        assert ok(pair, node, f"{TORCH_CHECK} 2>/dev/null") == "2.13.0+cpu True\n"
        assert ok(pair, node, "python3 -m torch.distributed.run --help").startswith("usage:")
        assert "--nproc-per-node" in ok(pair, node, "torchrun --help")
    # one layer under every node's disk, not a copy in each
    assert not pair.dir.joinpath("nodes", NODES[0], "upper", "usr", "local", "lib").exists()


def test_gloo_allreduce_across_two_nodes_by_name(pair):
    """The nodes find each other by name (their /etc/hosts), and gloo picks the address the other reaches."""
    for node in NODES:
        pair.node_file(node, "/root/allreduce.py").write_text(ALLREDUCE)
    command = ("timeout 120 torchrun --nnodes 2 --nproc-per-node 1 --node-rank {rank} --master-addr lab-node-1 "
               "--master-port 29511 /root/allreduce.py 2>&1")
    second = subprocess.Popen(["ssh", "-F", str(pair.ssh_config), "-o", "BatchMode=yes", NODES[1],
                               command.format(rank=1)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    first = pair.ssh(NODES[0], command.format(rank=0))
    out, _ = second.communicate(timeout=150)
    assert first.returncode == 0 and second.returncode == 0, f"{first.stdout}\n---\n{out}"
    assert "rank 0 of 2 on lab-node-1: 3.0" in first.stdout and "rank 1 of 2 on lab-node-2: 3.0" in out


def test_boot_mounts_cgroup_controllers_and_makes_gpu_devices_in_the_node_only(pair):
    node = NODES[0]
    mounts = ok(pair, node, "grep ' /sys/fs/cgroup' /proc/mounts")
    mounted = {line.split()[3].split(",")[-1] for line in mounts.splitlines() if line.split()[2] == "cgroup"}
    assert {"freezer", "cpuset", "memory", "devices", "cpuacct"} <= mounted, mounts
    assert "tmpfs" in mounts.splitlines()[0]
    # its own cgroup namespace: the node is the root of every hierarchy, and what it makes there is its own
    assert all(line.endswith(":/") for line in ok(pair, node, "cat /proc/1/cgroup").splitlines()), "not in its own"
    ok(pair, node, "mkdir /sys/fs/cgroup/freezer/lab-probe && rmdir /sys/fs/cgroup/freezer/lab-probe")
    on_host = [Path(p) for p in pair.dir.joinpath("nodes", node, "cgroups").read_text().split()]
    assert on_host and all(p.is_dir() and p.name.startswith("plab") for p in on_host)

    devices = ok(pair, node, "stat -c '%n %F %t,%T %a' /dev/nvidiactl /dev/nvidia0 /dev/nvidia3")
    assert devices.splitlines() == ["/dev/nvidiactl character special file c3,ff 666",
                                    "/dev/nvidia0 character special file c3,0 666",
                                    "/dev/nvidia3 character special file c3,3 666"]  # 195 = 0xc3; 4x V100
    assert ok(pair, node, "ls /dev | grep -c '^nvidia[0-9]'") == "4\n"
    if not Path("/proc/driver/nvidia").exists():  # a machine with a real driver has its own
        assert not list(Path("/dev").glob("nvidia*")), "a node's device nodes leaked into this machine's /dev"


def test_munge_comes_back_after_a_reboot_as_user_munge(pair):
    node = NODES[0]
    ok(pair, node, f"apt-get -q update && {APT} install munge slurmd")
    pair.lab("reboot", node)
    ps = ok(pair, node, "ps -o user=,group=,args= -C munged")
    assert re.fullmatch(r"munge +munge +/usr/sbin/munged\n", ps), ps
    assert ok(pair, node, "stat -c '%U:%G %a' /run/munge") == "munge:munge 755\n"  # RuntimeDirectory=
    assert "STATUS:          Success (0)" in ok(pair, node, "munge -n | unmunge")
    boot = ok(pair, node, "cat /var/log/provision-lab-boot.log").split("booting")[-1]
    assert re.search(r"munge\.service: ExecStart /usr/sbin/munged \(uid \d+, gid \d+\) -> 0", boot), boot
    # no slurm.conf yet: slurmd.service's ConditionPathExists keeps it from starting, as systemd would
    assert "slurmd.service: condition not met (ConditionPathExists=/etc/slurm/slurm.conf); skipped" in boot
    assert ok(pair, node, "pgrep -c -x slurmd || true") == "0\n"


def test_a_rebooted_node_has_its_own_uptime(pair):
    def uptime(node: str) -> float:
        return float(ok(pair, node, "cut -d' ' -f1 /proc/uptime"))

    with open("/proc/uptime") as fh:
        here = float(fh.read().split()[0])
    pair.lab("reboot", NODES[1])
    fresh, other = uptime(NODES[1]), uptime(NODES[0])
    assert fresh < 60 and fresh < other and other < here  # a clock of its own, from its own boot
    started = ok(pair, NODES[1], "ps -o etimes= -p 1").strip()  # its PID 1's age agrees with that clock
    assert abs(int(started) - fresh) < 10, (started, fresh)
