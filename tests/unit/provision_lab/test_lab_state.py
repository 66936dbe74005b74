"""A lab's state file (state.py) and the fault bookkeeping (faults.py), the parts that need no root."""

from __future__ import annotations

import pytest

from provision_lab import faults
from provision_lab.layout import DEFAULT_DIR
from provision_lab.model import NodeSpec
from provision_lab.state import LabDir
from provision_lab.system import LabError

from builders.labnodes import LabNode


def test_the_state_file_round_trips_and_a_broken_one_says_so(tmp_path):
    lab = LabDir(tmp_path)
    assert lab.state() is None
    lab.save({"phase": "up", "slot": 3, "nodes": []})
    assert lab.state() == {"phase": "up", "slot": 3, "nodes": []}
    assert not lab.state_file.with_suffix(".tmp").exists()
    lab.state_file.write_text("{half")
    assert lab.state() == {"phase": "broken", "slot": None, "nodes": []}


def test_a_lab_that_is_not_up_names_its_directory(tmp_path):
    lab = LabDir(tmp_path)
    with pytest.raises(LabError, match=f"`provision lab up --dir {tmp_path}` first"):
        lab.node("lab-node-1")
    assert LabDir().dir_option() == "" and LabDir().dir == DEFAULT_DIR
    assert (lab.inventory_path, lab.ssh_config_path) == (tmp_path / "inventory.yaml", tmp_path / "ssh_config")


def test_a_running_lab_finds_its_nodes_by_name(tmp_path):
    lab = LabDir(tmp_path)
    lab.save({"phase": "up", "slot": 5, "nodes": [{"name": "lab-a", "index": 1}, {"name": "lab-b", "index": 2}]})
    state, node = lab.node("lab-b")
    assert state["slot"] == 5 and node.spec == NodeSpec("lab-b", 2) and node.address == "10.213.5.12"
    with pytest.raises(LabError, match="no node 'lab-c' in this lab; nodes: lab-a, lab-b"):
        lab.node("lab-c")


def test_a_boot_ends_some_faults_and_sets_a_slow_port_up_again():
    node = LabNode()
    recorded = ["gpu-off-bus GPU 1", "nic-slow ens803f1", "gpu-gone GPU 2", "gpu-ecc GPU 0", "sshd-down",
                "gpu-pcie-errors GPU 3", "nic-down ens803f0"]
    faults.after_boot(node, recorded)
    assert recorded == ["nic-slow ens803f1", "gpu-gone GPU 2", "nic-down ens803f0"]
    assert node.commands == [["sh", "-c", "echo 1000 > /run/lab-ens803f1-speed && "
                              "mount --bind /run/lab-ens803f1-speed /sys/class/net/ens803f1/speed"],
                             ["shape", "ens803f1", "1000"]]  # and its link carries what such a port would


def test_a_fault_out_of_range_or_unknown_is_refused_before_anything_is_done():
    node = LabNode()
    with pytest.raises(LabError, match="--gpu 4: lab-a has GPUs 0..3"):
        faults.inject(node, "gpu-ecc", 4, None)
    with pytest.raises(LabError, match="--nic eth9: lab-a has ens803f0, ens803f1"):
        faults.inject(node, "nic-down", None, "eth9")
    with pytest.raises(LabError, match="unknown fault 'melt'"):
        faults.inject(node, "melt", None, None)
    assert node.commands == []
    assert faults.FAULTS[-1] == "clear" and all(f.startswith(("gpu-", "pcie-")) for f in faults.GPU_FAULTS)


def test_nvlink_faults_name_a_link_and_a_boot_ends_only_the_error_counts():
    node = LabNode()
    assert faults.inject(node, "gpu-nvlink-down", 1, None, 2) == "gpu-nvlink-down GPU 1 link 2"
    assert faults.inject(node, "gpu-nvlink-errors", None, None, None) == "gpu-nvlink-errors GPU 0 link 0"
    assert node.commands == [["gpusim", "fault", "1", "nvlink-down", "--link", "2"],
                             ["gpusim", "fault", "0", "nvlink-errors", "--link", "0"]]
    recorded = ["gpu-nvlink-down GPU 1 link 2", "gpu-nvlink-errors GPU 0 link 0"]
    faults.after_boot(node, recorded)
    assert recorded == ["gpu-nvlink-down GPU 1 link 2"]
