"""RDMA ports end to end on a lab of its own: one node with two InfiniBand HCAs (mlx5_0, mlx5_1), each one port
in the node's own /sys/class/infiniband (provision_lab/rdma.py). A clean node passes `provision verify`; each
drill (`lab fault NODE ib-down|ib-slow|ib-errors --port HCA`) fails rdma_ports_are_up_at_rate_without_errors
alone, with one finding naming the port; after `clear` it passes. A pulled or slow cable stays across a reboot,
error counts do not.

Its own lab in its own directory (PROVISION_RDMA_LAB_DIR, default /var/lib/provision-lab/ib), made and always
taken down by this module; no torch layer (provision_custom.lab.torch: false), so it is up in seconds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from provision_lab.system import mounts_under

pytestmark = pytest.mark.lab

LAB_DIR = Path(os.environ.get("PROVISION_RDMA_LAB_DIR", "/var/lib/provision-lab/ib"))
NODE = "lab-ib-1"
CHECK = "rdma_ports_are_up_at_rate_without_errors"
INVENTORY = {"all": {"hosts": {"ib-1": {"provision_custom": {"lab": {
    # V100s: the proprietary kernel module (the open ones do not drive Volta), so no DMA-BUF: GPUDirect RDMA
    # rests on nvidia_peermem, which its /etc/modules loads at every boot, as on the V100 box
    "torch": False, "gpus": [{"model": "v100-sxm2-16gb", "count": 4}], "modules_load": ["nvidia-peermem"],
    "rdma": [{"name": "mlx5_0", "near_gpu": 0}, {"name": "mlx5_1", "near_gpu": 1}]}}}}}}


def run(*argv: str) -> subprocess.CompletedProcess:
    # COLUMNS: verify wraps at the terminal's width (100 on a pipe); the tests look for whole findings
    return subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL, env={**os.environ, "COLUMNS": "1000"})


def lab(*args: str) -> str:
    proc = run("-m", "provision_lab.cli", *args, "--dir", str(LAB_DIR))
    assert proc.returncode == 0, f"lab {' '.join(args)}: {proc.stdout}{proc.stderr}"
    return proc.stdout


def verify() -> tuple[int, dict]:
    """`provision verify --json` of the node: (exit code, its verdict)."""
    proc = run("-m", "provision", "verify", str(LAB_DIR / "inventory.yaml"), "--json")
    assert proc.stdout.strip(), proc.stderr
    return proc.returncode, json.loads(proc.stdout)["hosts"][0]


def on_node(command: str) -> str:
    """A command on the node over real SSH (the lab's ssh_config)."""
    proc = subprocess.run(["ssh", "-F", str(LAB_DIR / "ssh_config"), "-o", "BatchMode=yes", NODE, command],
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, f"{command}: {proc.stdout}{proc.stderr}"
    return proc.stdout


@pytest.fixture(scope="module")
def ib_lab(tmp_path_factory):
    if not sys.platform.startswith("linux") or os.geteuid() != 0:
        pytest.skip("the lab needs root on Linux (namespaces, bridges, mounts)")
    from provision_lab.aptrepo import ensure_repo
    from provision_lab.rootfs import ensure_image
    from provision_lab.system import LabError

    try:
        ensure_repo(ensure_image(log=lambda message: None), log=lambda message: None)
    except LabError as exc:
        pytest.skip(f"the lab's image or apt repository cannot be built here (Debian mirror?): {exc}")
    inventory = tmp_path_factory.mktemp("ib") / "ib.yaml"
    inventory.write_text(yaml.safe_dump(INVENTORY))
    lab("down")  # what a crashed earlier run left
    try:
        lab("up", "--like", str(inventory))
        yield LAB_DIR
    finally:
        lab("down")
    assert mounts_under(LAB_DIR) == []


def the_finding(verdict: dict) -> dict:
    """The node's one finding (one cause), asserting it is this check's and the only one."""
    assert [f["check"] for f in verdict["findings"]] == [CHECK], verdict["failures"]
    return verdict["findings"][0]


def test_a_clean_node_reads_its_own_ports_and_passes(ib_lab):
    assert on_node("cat /sys/class/infiniband/mlx5_1/ports/1/state /sys/class/infiniband/mlx5_1/ports/1/rate") == \
        "4: ACTIVE\n100 Gb/sec (4X EDR)\n"
    assert {"ens803f0", "ens803f1", "eth0", "lo"} <= set(on_node("ls /sys/class/net").split())  # its own sysfs
    assert on_node("cat /sys/class/net/ens803f0/operstate") == "up\n"
    assert not Path("/sys/class/infiniband/mlx5_0").exists()  # this machine's /sys untouched
    code, verdict = verify()
    assert code == 0 and verdict["failures"] == [], verdict["failures"]
    assert CHECK in verdict["passed"]


@pytest.mark.parametrize("fault, port, found", [
    ("ib-down", "mlx5_1", "mlx5_1 port 1: state DOWN, physical state Polling; counted since boot: link_downed 1"),
    ("ib-slow", "mlx5_0", "mlx5_0 port 1 at 25 Gb/s (25 Gb/sec (1X EDR))"),
    ("ib-errors", "mlx5_1", "mlx5_1 port 1: symbol_error 1520, port_rcv_errors 37"),
], ids=["ib-down", "ib-slow", "ib-errors"])
def test_each_drill_fails_the_port_check_with_one_finding_naming_the_port_until_cleared(ib_lab, fault, port, found):
    assert lab("fault", NODE, fault, "--port", port) == f"{NODE}: {fault} {port}:1\n"
    try:
        code, verdict = verify()
        assert code == 1
        finding = the_finding(verdict)
        assert finding["found"] == found and finding["about"] == [f"{port}:1"] and finding["consequences"] == []
        assert [f["check"] for f in verdict["failures"]] == [CHECK]  # nothing else failed
        assert f"{port} port 1" in finding["next_step"]
    finally:
        lab("fault", NODE, "clear")
    code, verdict = verify()
    assert code == 0 and verdict["failures"] == [], verdict["failures"]


def test_a_pulled_or_slow_cable_stays_across_a_reboot_and_the_error_counts_do_not(ib_lab):
    lab("fault", NODE, "ib-slow", "--port", "mlx5_1")
    lab("fault", NODE, "ib-errors", "--port", "mlx5_0")
    try:
        lab("reboot", NODE)
        assert on_node("cat /sys/class/infiniband/mlx5_0/ports/1/counters/symbol_error") == "0\n"
        code, verdict = verify()
        assert code == 1 and the_finding(verdict)["found"] == "mlx5_1 port 1 at 25 Gb/s (25 Gb/sec (1X EDR))"
        assert json.loads(lab("status", "--json"))["nodes"][0]["faults"] == ["ib-slow mlx5_1:1"]
    finally:
        lab("fault", NODE, "clear")
    assert verify()[0] == 0


GDR = "gpudirect_rdma_is_available_where_nccl_uses_it"


def test_nvidia_peermem_unloaded_is_one_gdr_finding_and_a_reboot_loads_it_again(ib_lab):
    loaded = on_node("cat /proc/driver/nvidia/version").split("Kernel Module")[1].split()[0]
    assert on_node("cat /sys/module/nvidia_peermem/version") == f"{loaded}\n"  # /etc/modules names it: the boot's
    assert GDR in verify()[1]["passed"]  # GPU0-mlx5_0 and GPU1-mlx5_1 behind one switch each (topo -m: PIX)
    assert lab("fault", NODE, "peermem-unloaded") == f"{NODE}: peermem-unloaded\n"
    try:
        code, verdict = verify()
        assert code == 1 and [f["check"] for f in verdict["findings"]] == [GDR], verdict["failures"]
        [finding] = verdict["findings"]
        assert finding["severity"] == "warning" and finding["found"].startswith("no peer-memory module loaded")
        assert finding["next_step"].startswith("`modprobe nvidia-peermem` on the node")
        lab("reboot", NODE)
        code, verdict = verify()
        assert code == 0 and verdict["failures"] == [], verdict["failures"]
    finally:
        lab("fault", NODE, "clear")
    lab("fault", NODE, "peermem-unloaded")
    lab("fault", NODE, "clear")  # clear loads it again too
    assert on_node("cat /sys/module/nvidia_peermem/version").strip()


def test_a_boot_loads_nvidia_peermem_only_where_modules_load_d_names_it(ib_lab):
    on_node("cp /etc/modules /root/modules && sed -i '/^nvidia-peermem$/d' /etc/modules")
    try:
        lab("reboot", NODE)
        assert on_node("test -e /sys/module/nvidia_peermem || echo unloaded") == "unloaded\n"
        code, verdict = verify()
        assert code == 1 and [f["check"] for f in verdict["findings"]] == [GDR], verdict["failures"]
    finally:
        on_node("mv /root/modules /etc/modules")
        lab("reboot", NODE)
    assert on_node("cat /sys/module/nvidia_peermem/version").strip()
