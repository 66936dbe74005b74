"""End to end on the lab: the real `provision` CLI over real SSH to real (namespaced) Debian nodes.

Tests run in file order on one lab; each leaves the lab converged and fault-free for the next,
and the last one takes the lab down and checks nothing is left.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from provision_lab.netns import LabNet, lab_links, lab_namespaces
from provision_lab.system import mounts_under

from builders.activelab import loaded, verify_active

pytestmark = pytest.mark.lab

V100, BLADE1, BLADE2 = "lab-v100-1", "lab-rtx3090-1", "lab-rtx3090-2"
NODES = (V100, BLADE1, BLADE2)


def hosts(result: dict) -> dict[str, dict]:
    return {h["host"]: h for h in result["hosts"]}


def items(host: dict, task: str) -> dict[str, dict]:
    """target -> item of one task of one host."""
    return {i["target"]: i for t in host["tasks"] if t["name"] == task for i in t["items"]}


def all_items(result: dict) -> list[tuple[str, str, dict]]:
    return [(h["host"], t["name"], i) for h in result["hosts"] for t in h["tasks"] for i in t["items"]]


def test_converge_changes_each_gpu_then_nothing(lab):
    code, first = lab.apply()
    assert code == 0, first
    by_host = hosts(first)
    assert set(by_host) == set(NODES)
    for task in ("gpu-persistence", "gpu-power-limit"):
        v100 = items(by_host[V100], task)
        assert [v100[f"GPU{i}"]["status"] for i in range(4)] == ["changed"] * 4, v100
        assert items(by_host[BLADE1], task)["GPU0"]["status"] == "changed"
    assert items(by_host[V100], "gpu-power-limit")["GPU3"]["after"] == "200.00 W"
    assert items(by_host[BLADE2], "gpu-power-limit")["GPU0"]["after"] == "300.00 W"

    code, again = lab.apply()
    assert code == 0, again
    for host in again["hosts"]:
        assert host["status"] == "ok" and host["counts"]["changed"] == 0, host
    assert all(item["status"] == "ok" for _, _, item in all_items(again))
    assert len(items(hosts(again)[V100], "gpu-power-limit")) == 4  # reported per GPU
    for gpu in lab.gpus(V100):
        assert (gpu["persistence"], gpu["power_limit"]) == (True, 200.0)


def test_check_shows_exactly_the_drift_and_changes_nothing(lab):
    drift = lab.ssh(V100, "nvidia-smi -i 1 -pl 250")
    assert drift.returncode == 0, drift.stderr
    code, check = lab.apply("--check")
    assert code == 8 and check["exit_code"] == 8, check  # drift found: the --check bit
    changed = [(host, task, i["target"], i["before"], i["after"])
               for host, task, i in all_items(check) if i["status"] != "ok"]
    assert changed == [(V100, "gpu-power-limit", "GPU1", "250.00 W", "200.00 W")]
    assert lab.gpus(V100)[1]["power_limit"] == 250.0  # --check touched nothing
    assert lab.apply()[0] == 0
    assert lab.gpus(V100)[1]["power_limit"] == 200.0


def test_unreachable_node_fails_alone_while_the_rest_converge(lab):
    lab.ssh(V100, "nvidia-smi -i 0 -pl 220")
    lab.lab("fault", BLADE2, "sshd-down")
    try:
        code, result = lab.apply()
        assert code == 4, result
        by_host = hosts(result)
        assert by_host[BLADE2]["status"] == "unreachable"
        assert by_host[V100]["status"] == "changed" and by_host[BLADE1]["status"] == "ok"
        assert items(by_host[V100], "gpu-power-limit")["GPU0"]["before"] == "220.00 W"
    finally:
        lab.lab("fault", BLADE2, "clear")
    assert lab.apply()[0] == 0


def test_reboot_resets_volatile_gpu_settings_unless_the_boot_unit_runs(lab):
    assert lab.apply()[0] == 0
    lab.lab("reboot", BLADE2)  # apply installed and enabled provision-gpu-tuning.service: settings come back
    assert [(g["persistence"], g["power_limit"]) for g in lab.gpus(BLADE2)] == [(True, 300.0)]
    assert lab.ssh(V100, "systemctl disable provision-gpu-tuning.service").returncode == 0  # "forgot" it
    lab.lab("reboot", V100)
    for gpu in lab.gpus(V100):
        assert gpu["persistence"] is False
        assert gpu["power_limit"] == gpu["power_default"] != 200.0
    assert all(g["power_limit"] == 300.0 for g in lab.gpus(BLADE1))  # the others kept theirs
    code, result = lab.apply()
    assert code == 0
    v100 = next(h for h in result["hosts"] if h["host"] == V100)
    assert [t["status"] for t in v100["tasks"] if t["name"] == "gpu-boot-unit"] == ["changed"]  # enabled again


def test_enabled_boot_units_run_at_reboot(lab):
    """What makes settings survive reboots: a unit enabled offline (no running systemd) runs at boot."""
    # Persistence first: without it the driver unloads when nvidia-smi exits, and forgets the limit.
    unit = ("[Unit]\nDescription=lab test: GPU settings at boot\nAfter=provision-gpu-tuning.service\n"
            "[Service]\nType=oneshot\n"
            "ExecStart=/usr/bin/nvidia-smi -pm 1\nExecStart=/usr/bin/nvidia-smi -pl 250\n"
            "[Install]\nWantedBy=multi-user.target\n")
    enable = lab.ssh(BLADE1, f"printf '%s' '{unit}' > /etc/systemd/system/lab-test.service"
                             " && systemctl enable lab-test.service && test ! -e /run/systemd/system")
    assert enable.returncode == 0, enable.stderr
    try:
        lab.lab("reboot", BLADE1)
        assert [(g["persistence"], g["power_limit"]) for g in lab.gpus(BLADE1)] == [(True, 250.0)]
        assert "lab-test.service: ExecStart" in lab.node_file(BLADE1, "/var/log/provision-lab-boot.log").read_text()
    finally:
        lab.ssh(BLADE1, "systemctl disable lab-test.service; rm -f /etc/systemd/system/lab-test.service")
    assert lab.apply()[0] == 0


def test_gpu_off_bus_then_clear(lab):
    lab.lab("fault", V100, "gpu-off-bus", "--gpu", "2")
    try:
        assert len(lab.gpus(V100)) == 3
        assert "79" in lab.ssh(V100, "grep Xid /var/log/nvidia-sim-kern.log").stdout
        status = {n["name"]: n for n in lab.status()["nodes"]}
        assert (status[V100]["gpus_visible"], status[V100]["faults"]) == (3, ["gpu-off-bus GPU 2"])
    finally:
        lab.lab("fault", V100, "clear")
    assert len(lab.gpus(V100)) == 4


def test_pcie_degraded_survives_reboot_until_cleared(lab):
    lab.lab("fault", V100, "pcie-degraded", "--gpu", "1")
    try:
        lab.lab("reboot", V100)  # a badly seated riser stays badly seated
        widths = [(g["pcie_width_current"], g["pcie_width_max"]) for g in lab.gpus(V100)]
        assert widths == [(16, 16), (8, 16), (16, 16), (16, 16)]
    finally:
        lab.lab("fault", V100, "clear")
    assert [g["pcie_width_current"] for g in lab.gpus(V100)] == [16] * 4
    assert lab.apply()[0] == 0


def test_nic_down_pulls_the_cable_then_clear(lab):
    lab.lab("fault", BLADE1, "nic-down", "--nic", "ens803f1")
    try:
        assert lab.ssh(BLADE1, "cat /sys/class/net/ens803f1/carrier").stdout.strip() == "0"
        assert lab.ssh(BLADE1, "cat /sys/class/net/ens803f0/carrier").stdout.strip() == "1"
    finally:
        lab.lab("fault", BLADE1, "clear")
    assert lab.ssh(BLADE1, "cat /sys/class/net/ens803f1/carrier").stdout.strip() == "1"


# testinfra's paramiko backend reads no UserKnownHostsFile (it warns and goes on): the test checks the key itself.
@pytest.mark.filterwarnings("ignore:Unknown ssh-ed25519 host key")
def test_testinfra_reaches_the_nodes(lab):
    testinfra = pytest.importorskip("testinfra")
    for backend in ("ssh", "paramiko"):
        host = testinfra.get_host(f"{backend}://{V100}", ssh_config=str(lab.ssh_config))
        assert host.check_output("hostname") == V100
        assert host.file("/etc/nvidia-sim/config.json").exists
    served = host.backend.client.get_transport().get_remote_server_key().get_base64()
    assert f" ssh-ed25519 {served}" in (lab.dir / "known_hosts").read_text()


def test_verify_requires_an_rdma_nic_as_close_as_the_inventory_says(lab, tmp_path):
    """The V100 node (cluster.yaml): two sockets, mlx5_0 behind GPU0's switch, mlx5_1 behind GPU2's."""
    facts = lab.facts()[V100]["topology"]["matrix"]
    assert facts["nics"] == {"NIC0": "mlx5_0", "NIC1": "mlx5_1"}
    assert (facts["links"]["GPU0"]["NIC0"], facts["links"]["GPU1"]["NIC0"], facts["links"]["GPU1"]["NIC1"]) == \
           ("PIX", "NODE", "SYS")

    def verify(level: str) -> dict:
        data = yaml.safe_load(lab.inventory.read_text())
        data["all"]["children"]["v100"]["vars"]["provision_nccl"] = {"require_nic_within": level}
        path = tmp_path / f"{level}.yaml"
        path.write_text(yaml.safe_dump(data))
        proc = lab.provision("verify", str(path), "--ssh-config", str(lab.ssh_config), "--limit", V100, "--json")
        return json.loads(proc.stdout)["hosts"][0]

    strict = verify("PIX")
    found = {f["check"]: f["found"] for f in strict["failures"]}
    assert found["every_gpu_has_a_nic_within_reach"] == "GPU1 nearest mlx5_0 at NODE, GPU3 nearest mlx5_1 at NODE"
    assert "every_gpu_has_a_nic_within_reach" in verify("NODE")["passed"]


def test_bad_inventory_value_touches_no_node(lab, tmp_path):
    data = yaml.safe_load(lab.inventory.read_text())
    data["all"]["children"]["v100"]["vars"]["provision_gpu"]["power_limit"] = 5000
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(data))
    watched = ["/var/lib/nvidia-sim/state.json", "/etc/provision/gpu-tuning.conf", "/var/log/lastlog"]
    before = {(n, p): _snapshot(lab.node_file(n, p)) for n in NODES for p in watched}
    code, result = lab.apply(inventory=bad)
    assert code == 2, result
    assert "5000" in result.get("stderr", "")
    assert {(n, p): _snapshot(lab.node_file(n, p)) for n in NODES for p in watched} == before


def _snapshot(path: Path) -> tuple[bytes, int] | None:
    return (path.read_bytes(), path.stat().st_mtime_ns) if path.exists() else None


# The session's lab is up until the test below: the last good runs of two labs that reuse node names
# (issue 42), on it and on the basement lab.
def test_two_labs_with_the_same_node_names_keep_their_own_last_good_runs(lab, basement, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    # the session's lab-v100-1 at 300 W, unpinned: 1530 MHz under load, its last good run about 78 TFLOP/s
    fast = loaded(lab, "active-v100-300w", {V100: {"provision_gpu": {"power_limit": 300}}})
    assert lab.apply("--limit", V100, inventory=fast)[0] == 0
    code, hosts = verify_active(lab, fast, V100)
    assert code == 0, hosts[V100]["findings"]
    # the basement's lab-v100-1 (its clocks pinned at 1005 MHz, about 51 TFLOP/s): another machine, same name
    assert basement.apply("--limit", V100)[0] == 0  # its blades left as they are: test_tuning.py applies them first
    code, hosts = verify_active(basement, loaded(basement, "active"), V100)
    assert code == 0 and hosts[V100]["findings"] == [], hosts[V100]["findings"]
    kept = sorted(p.name for p in (tmp_path / "provision" / "active").iterdir())
    assert len(kept) == 2 and all(name.startswith(f"{V100}.") for name in kept), kept
    assert lab.apply("--limit", V100)[0] == 0


def test_down_leaves_nothing_behind(lab):
    slot = lab.status()["slot"]
    lab.lab("down")
    prefix = LabNet(slot).prefix
    assert lab_namespaces(prefix) == []
    assert lab_links(prefix) == []
    assert mounts_under(lab.dir) == []
    assert [m for m in Path("/proc/self/mounts").read_text().splitlines() if prefix in m] == []
    assert _processes_rooted_under(lab.dir) == []
    assert lab.lab("status", check=False).returncode == 1


def _processes_rooted_under(directory: Path) -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            root = os.readlink(f"/proc/{pid}/root")  # not a lab beside it: LAB_DIR-NAME shares the prefix
            if root == str(directory) or root.startswith(f"{directory}/"):
                found.append(int(pid))
        except OSError:
            pass
    return found
