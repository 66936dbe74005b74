"""The lab's NVIDIA driver as a real one behaves: a package installs it, the node's next boot loads it, and a node
reboots itself (`reboot` over SSH), as provision will do after a driver install.

Its own two-node lab beside the session's: lab-bare has its GPUs but no driver (provision_custom.lab.driver: false), lab-v100
the lab's default one. Tests run in file order on that lab; the last one takes it down and checks nothing is left.
"""

from __future__ import annotations

import os
import re
import socket
import time
from pathlib import Path

import pytest
import yaml

from provision_lab.netns import LabNet, lab_namespaces, netns_pids
from provision_lab.system import mounts_under

pytestmark = pytest.mark.lab

BARE, V100 = "lab-bare", "lab-v100"
INVENTORY = {"all": {"hosts": {
    "bare": {"provision_custom": {"lab": {"driver": False, "torch": False, "gpus": [{"model": "rtx-3090", "count": 2}]}}},
    "v100": {"provision_custom": {"lab": {"torch": False}}},
}}}
APT = "DEBIAN_FRONTEND=noninteractive apt-get -q -y"
DRIVER_QUERY = "nvidia-smi --query-gpu=driver_version --format=csv,noheader"
NO_DRIVER = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
             "Make sure that the latest NVIDIA driver is installed and running.\n\n")
MISMATCH = "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 580.159\n"
OPEN_MODULE = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  {}  Release Build  "
MARKER = "/run/provision-lab-test-boot"


@pytest.fixture(scope="module")
def pair(lab_beside, tmp_path_factory):
    inventory = tmp_path_factory.mktemp("driver") / "inventory.yaml"
    inventory.write_text(yaml.safe_dump(INVENTORY))
    with lab_beside("driver", lambda cluster: cluster.lab("up", "--like", str(inventory))) as cluster:
        yield cluster


def ok(lab, node: str, command: str) -> str:
    proc = lab.ssh(node, command)
    assert proc.returncode == 0, f"{node}: {command}: {proc.stdout}{proc.stderr}"
    return proc.stdout


def address(lab, node: str) -> str:
    return next(n["address"] for n in lab.status()["nodes"] if n["name"] == node)


def sshd_answers(host: str) -> bool:
    try:
        with socket.create_connection((host, 22), timeout=0.5) as sock:
            return sock.recv(4).startswith(b"SSH-")
    except OSError:
        return False


def wait_until(condition, timeout: float) -> float | None:
    """When condition first held (time.monotonic()), or None after timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return time.monotonic()
        time.sleep(0.02)
    return None


def reboot_itself(lab, node: str) -> float:
    """`reboot` in the node over SSH, detached, as provision runs it; returns once the node is back (its /run is
    new: the marker made before is gone), with the seconds sshd was away."""
    host = address(lab, node)
    ok(lab, node, f"touch {MARKER}")
    ok(lab, node, "nohup sh -c 'sleep 1; reboot' >/dev/null 2>&1 &")
    down = wait_until(lambda: not sshd_answers(host), 15)
    assert down is not None, f"{node} did not go down"
    up = wait_until(lambda: sshd_answers(host), 60)
    assert up is not None, f"{node} did not come back: {lab.dir / 'nodes' / node / 'console.log'}"
    assert ok(lab, node, f"test -e {MARKER} && echo still || echo fresh") == "fresh\n"
    return up - down


def test_every_node_has_its_own_machine_id_and_the_bare_one_no_driver(pair):
    ids = {node: ok(pair, node, "cat /etc/machine-id") for node in (BARE, V100)}
    assert all(re.fullmatch(r"[0-9a-f]{32}\n", i) for i in ids.values()) and len(set(ids.values())) == 2
    host = Path("/etc/machine-id")
    assert not host.exists() or host.read_text() not in ids.values()  # nor this machine's

    assert pair.ssh(BARE, "command -v nvidia-smi nvidia-persistenced").returncode != 0
    assert not pair.node_file(BARE, "/usr/lib/provision-lab/nvml-library-version").exists()
    assert ok(pair, BARE, "ls -A /proc/driver; ls /dev | grep -c '^nvidia' || true") == "0\n"
    assert " /proc/driver tmpfs " in ok(pair, BARE, "cat /proc/mounts")
    assert "no NVIDIA driver loaded: no /dev/nvidia*" in ok(pair, BARE, "cat /var/log/provision-lab-boot.log")

    # the lab's default node: its driver installed and loaded, the proprietary modules with a V100
    assert ok(pair, V100, DRIVER_QUERY) == "580.159.04\n" * 4
    assert ok(pair, V100, "cat /proc/driver/nvidia/version") == (
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  Wed Oct 29 23:15:11 UTC 2025\n"
        "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14) \n")
    assert ok(pair, V100, "ls /dev | grep -c '^nvidia[0-9]'") == "4\n"


def test_an_installed_driver_loads_when_the_node_reboots_itself(pair):
    ok(pair, BARE, f"apt-get -q update && {APT} install nvidia-driver-570")
    smi = pair.ssh(BARE, "nvidia-smi")
    assert (smi.returncode, smi.stdout) == (9, NO_DRIVER)  # installed, not loaded: a reboot pending
    assert pair.ssh(BARE, "test -e /proc/driver/nvidia").returncode != 0

    first = reboot_itself(pair, BARE)
    assert ok(pair, BARE, DRIVER_QUERY) == "570.195.03\n" * 2
    assert ok(pair, BARE, "cat /proc/driver/nvidia/version").startswith(OPEN_MODULE.format("570.195.03"))
    # the driver's capability devices too, as a real loaded driver has them (tests/fixtures/real/h200-recovery)
    assert ok(pair, BARE, "ls /dev | grep '^nvidia'") == "nvidia-caps\nnvidia0\nnvidia1\nnvidiactl\n"

    ok(pair, BARE, f"{APT} install nvidia-driver-580")  # Conflicts: nvidia-driver: apt swaps them
    smi = pair.ssh(BARE, "nvidia-smi -L")
    assert (smi.returncode, smi.stdout) == (18, MISMATCH)
    assert ok(pair, BARE, "cat /proc/driver/nvidia/version").startswith(OPEN_MODULE.format("570.195.03"))

    pair.lab("fault", BARE, "nic-slow")  # a fault a reboot keeps: the lab sets it up again after the boot
    second = reboot_itself(pair, BARE)
    assert ok(pair, BARE, DRIVER_QUERY) == "580.159.04\n" * 2
    assert ok(pair, BARE, "cat /proc/driver/nvidia/version").startswith(OPEN_MODULE.format("580.159.04"))
    speed = "cat /sys/class/net/ens803f0/speed"  # nic-slow's default: the node's first fabric NIC
    assert wait_until(lambda: pair.ssh(BARE, speed).stdout == "1000\n", 15), "nic-slow not set up again"
    console = (pair.dir / "nodes" / BARE / "console.log").read_text()
    assert console.count(f"{BARE} rebooted itself: booting it again") == 2
    print(f"\nself-reboot: sshd away {first:.2f}s and {second:.2f}s")


def test_a_power_cut_still_works_and_one_node_runs_after_it(pair):
    pair.lab("reboot", BARE)
    assert ok(pair, BARE, DRIVER_QUERY) == "580.159.04\n" * 2  # the driver on disk loads at every boot
    ns = LabNet(pair.status()["slot"]).netns(BARE)
    inits = [pid for pid in netns_pids(ns) if _nspid(pid)[1:][-1:] == ["1"]]  # PID 1 of a namespace below ours
    assert len(inits) == 1, inits  # the power cut ended the node's supervisor too: it did not boot the node again
    assert len(_supervisors(pair.dir)) == 2  # one per node
    faults = {n["name"]: n["faults"] for n in pair.status()["nodes"]}
    assert faults[BARE] == ["nic-slow ens803f0"]
    assert ok(pair, BARE, "cat /sys/class/net/ens803f0/speed") == "1000\n"


def test_down_leaves_nothing_behind(pair):
    slot = pair.status()["slot"]
    cgroups = [Path(line) for node in (BARE, V100)
               for line in (pair.dir / "nodes" / node / "cgroups").read_text().split()]
    pair.lab("down")
    assert lab_namespaces(LabNet(slot).prefix) == []
    assert _supervisors(pair.dir) == []
    assert mounts_under(pair.dir) == []
    assert not any(path.exists() for path in cgroups)


def _nspid(pid: int) -> list[str]:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return []
    return next((line.split()[1:] for line in status.splitlines() if line.startswith("NSpid:")), [])


def _supervisors(lab_dir: Path) -> list[int]:
    """This machine's processes supervising a node of the lab in lab_dir."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(b"supervisor.supervise" in arg for arg in argv) and str(lab_dir).encode() in argv:
            found.append(int(pid))
    return found
