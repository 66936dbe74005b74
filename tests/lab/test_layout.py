"""The lab's pure parts, no root needed: what --like makes of an inventory, names and addresses,
the mirror found in apt sources, and how a node's PID 1 reads and orders boot units."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import yaml

from provision_lab import nodeinit
from provision_lab.cluster import inventory_text
from provision_lab.layout import DEFAULT_DIR
from provision_lab.netns import LabNet
from provision_lab.rootfs import debian_mirror
from provision_lab.spec import DEFAULT_NODES, default_spec, like_spec
from provision_lab.system import LabError

REPO = Path(__file__).resolve().parents[2]


def test_repo_lab_inventory_is_what_lab_up_writes():
    expected = inventory_text(default_spec(DEFAULT_NODES), DEFAULT_DIR, LabNet(0))
    assert (REPO / "inventories" / "lab.yaml").read_text() == expected


def test_like_basement_mirrors_groups_models_counts_and_nics():
    spec = like_spec(REPO / "inventories" / "basement.yaml")
    nodes = {n.name: n for n in spec.nodes}
    assert list(nodes) == ["lab-v100-1", *(f"lab-rtx3090-{i}" for i in range(1, 5)), "lab-rtx4090-1"]
    assert nodes["lab-v100-1"].gpus == [{"model": "v100-sxm2-16gb", "count": 4}]
    assert nodes["lab-rtx3090-2"].gpus == [{"model": "rtx-3090", "count": 1}]
    assert nodes["lab-rtx4090-1"].gpus == [{"model": "rtx-4090", "count": 7}]
    assert nodes["lab-rtx3090-1"].nics == ["ens803f0", "ens803f1"]  # from provision_nccl.socket_ifname: ens803f
    tree = spec.inventory({name: f"10.213.9.{n.index + 10}" for name, n in nodes.items()}, "/lab/ssh_config")
    groups = tree["all"]["children"]["gpu_nodes"]["children"]
    assert groups["v100"]["hosts"]["lab-v100-1"] == {"ansible_host": "10.213.9.11", "ansible_user": "root",
                                                     "provision_ssh_config": "/lab/ssh_config"}
    assert groups["v100"]["vars"]["provision_gpu"]["power_limit"] == 200
    assert groups["rtx4090"]["hosts"]["lab-rtx4090-1"]["provision_gpu"]["overrides"] == [{"index": 3, "power_limit": 300}]
    assert tree["all"]["vars"]["provision_gpu"] == {"persistence": True}


def test_like_custom_lab_wins_and_connection_vars_are_dropped(tmp_path):
    path = tmp_path / "inv.yaml"
    path.write_text(textwrap.dedent("""\
        all:
          children:
            boxes:
              hosts:
                box1: {ansible_host: 192.0.2.50, ansible_user: ops, ansible_port: 2222}
              vars:
                provision_driver: {version: "570.86.15"}
                provision_nccl: {socket_ifname: "=enp1s0f0,enp1s0f1"}
                provision_custom: {lab: {gpus: [{model: h100-80gb-hbm3, count: 2}], persistenced: true, numa_nodes: 2,
                               rdma: [{name: mlx5_0, near_gpu: 1}]}}
        """))
    node = like_spec(path).nodes[0]
    assert (node.gpus, node.nics, node.driver_version, node.persistenced) == (
        [{"model": "h100-80gb-hbm3", "count": 2}], ["enp1s0f0", "enp1s0f1"], "570.86.15", True)
    assert (node.rdma, node.numa_nodes) == ([{"name": "mlx5_0", "near_gpu": 1}], 2)
    host = like_spec(path).inventory({"lab-box1": "10.213.9.11"}, "/lab/ssh_config")["all"]["children"]["boxes"][
        "hosts"]["lab-box1"]
    assert host == {"ansible_host": "10.213.9.11", "ansible_user": "root", "provision_ssh_config": "/lab/ssh_config"}


@pytest.mark.parametrize("lab, message", [
    ({"gpus": [{"model": "a100", "count": 1}]}, "provision_custom.lab.gpus"),
    ({"nics": ["eth0"]}, "provision_custom.lab.nics"),
    ({"gpu": []}, "keys among"),
    ({"rdma": [{"name": "mlx5_0", "near": 0}]}, "provision_custom.lab.rdma"),
    ({"rdma": ["mlx5_0"]}, "provision_custom.lab.rdma"),
    ({"numa_nodes": 0}, "provision_custom.lab.numa_nodes must be 1..8"),
])
def test_like_refuses_bad_custom_lab(tmp_path, lab, message):
    path = tmp_path / "inv.yaml"
    path.write_text(yaml.safe_dump({"all": {"hosts": {"h1": {"provision_custom": {"lab": lab}}}}}))
    with pytest.raises(LabError, match=message) as caught:
        like_spec(path)
    assert caught.value.exit_code == 2


def test_names_fit_linux_limits_and_addresses_stay_in_the_lab():
    net = LabNet(31)
    assert max(len(net.host_veth(244, 3)), len(net.mgmt_bridge), len(net.fabric_bridge(3))) <= 15
    assert (net.controller, net.mgmt_address(1), net.fabric_address(1, 244)) == (
        "10.213.31.1", "10.213.31.11", "10.215.31.254")
    assert default_spec(2).nodes[1].name == "lab-node-2"
    with pytest.raises(LabError):
        default_spec(0)


def test_mirror_comes_from_this_machines_apt_sources(tmp_path):
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "debian.sources").write_text(textwrap.dedent("""\
        Types: deb
        URIs: http://mirror.example/debian-security
        Suites: bookworm-security
        Components: main

        Types: deb
        URIs: http://mirror.example/debian
        Suites: bookworm bookworm-updates
        Components: main
        """))
    assert debian_mirror(tmp_path) == ("http://mirror.example/debian", None)
    (tmp_path / "sources.list.d" / "debian.sources").unlink()
    (tmp_path / "sources.list").write_text("deb [arch=amd64] http://other.example/debian bookworm main contrib\n")
    assert debian_mirror(tmp_path)[0] == "http://other.example/debian"


def test_boot_units_order_environment_and_prefixes(tmp_path):
    unit = tmp_path / "gpu.service"
    unit.write_text(textwrap.dedent("""\
        [Unit]
        After=persistenced.service network.target
        [Service]
        Type=oneshot
        Environment=LIMIT=200 "ARGS=-i 0"
        ExecStart=
        ExecStart=-/usr/bin/nvidia-smi $ARGS -pl ${LIMIT} \\
            --extra $$HOME
        """))
    parsed = nodeinit.parse_unit(str(unit))
    env = nodeinit.unit_environment(parsed)
    argv, ignore = nodeinit.command_argv(parsed["Service.ExecStart"][0], env)
    assert argv == ["/usr/bin/nvidia-smi", "-i", "0", "-pl", "200", "--extra", "$HOME"] and ignore
    units = {"gpu.service": parsed, "persistenced.service": {"Unit.Before": ["zz.service"]}, "zz.service": {}}
    assert nodeinit.boot_order(units) == ["persistenced.service", "gpu.service", "zz.service"]
