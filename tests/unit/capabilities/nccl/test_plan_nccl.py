"""Planning NCCL's files: checked against the node's interfaces first, then rendered from the shipped templates."""

from __future__ import annotations

from builders.facts import facts, file
from builders.hosts import host
from provision.capabilities.host import HostFacts
from provision.capabilities.nccl.facts import Interface
from provision.core.resources import templates_dir
from provision.inventory.model import Host
from provision.capabilities.nccl.tasks import NcclFiles

UP = ("BROADCAST", "MULTICAST", "UP", "LOWER_UP")
SEED = {"socket_ifname": "ens803f", "socket_nthreads": 1, "expected_link_speed_mbps": 10000}


def blade(second_port: Interface | None = None) -> HostFacts:
    ports = [Interface("ens803f0", "up", 10000, UP, ("10.214.1.11/24",)),
             second_port or Interface("ens803f1", "up", 10000, UP, ("10.215.1.11/24",))]
    return facts(interfaces=[Interface("lo", "unknown", None, ("LOOPBACK", "UP"), ("127.0.0.1/8",)), *ports])


def task() -> NcclFiles:
    files = NcclFiles()
    files.templates = templates_dir()
    return files


def rtx3090(nccl: dict | None) -> Host:
    """The seed blade with this provision_nccl block."""
    return host("rtx3090-1", provision_nccl=nccl)


def test_the_seed_blade_gets_nccl_conf_and_the_env_file():
    plan = task().plan(rtx3090(SEED), blade())
    assert not plan.failed and not plan.problems
    conf, env = (c.write for c in plan.changes)
    assert (conf.path, env.path) == ("/etc/nccl.conf", "/etc/provision/nccl.env")
    assert [line for line in conf.content.splitlines() if not line.startswith("#")] == [
        "NCCL_SOCKET_IFNAME=ens803f", "NCCL_SOCKET_NTHREADS=1"]
    assert "# On this node NCCL will use: ens803f0 10000 Mb/s, ens803f1 10000 Mb/s" in conf.content
    assert [line for line in env.content.splitlines() if not line.startswith("#")] == [
        "NCCL_SOCKET_IFNAME='ens803f'", "NCCL_SOCKET_NTHREADS='1'"]
    assert (conf.mode, conf.owner) == ("0644", "root")


def test_files_already_right_are_left_alone():
    first = task().plan(rtx3090(SEED), blade())
    read = blade()
    read.files = {c.write.path: file(c.write.path, c.write.content) for c in first.changes}
    again = task().plan(rtx3090(SEED), read)
    assert again.changes == [] and [i.target for i in again.unchanged] == ["/etc/nccl.conf", "/etc/provision/nccl.env"]


def test_a_port_down_or_slow_fails_the_node_and_writes_nothing():
    pulled = Interface("ens803f1", "down", None, ("BROADCAST", "UP"), ("10.215.1.11/24",))
    plan = task().plan(rtx3090(SEED), blade(pulled))
    assert plan.changes == [] and plan.failed == "ens803f1 is down: NCCL skips it without a word (nothing written)"
    assert plan.failed_check == "nccl_interfaces_are_up_at_speed"
    uplink = Interface("ens803f1", "up", 1000, UP, ("192.0.2.12/24",))
    assert "ens803f1 1000 Mb/s, not 10000 Mb/s" in task().plan(rtx3090(SEED), blade(uplink)).failed
    missing = task().plan(rtx3090({**SEED, "socket_ifname": "=ens803f0,ens803f2"}), blade())
    assert missing.changes == [] and missing.failed.startswith(
        "NCCL_SOCKET_IFNAME==ens803f0,ens803f2: no interface ens803f2 on this node")
    gone = task().plan(rtx3090({**SEED, "socket_ifname": "=ens801f0"}), blade())
    assert gone.failed.startswith("NCCL_SOCKET_IFNAME==ens801f0 matches none of this node's interfaces")


def test_an_ib_hca_the_node_lacks_fails_it_unless_ib_is_disabled():
    plan = task().plan(rtx3090({**SEED, "ib_hca": "=mlx5_0:1"}), blade())
    assert "NCCL_IB_HCA==mlx5_0:1: no RDMA device mlx5_0:1 here" in plan.failed
    assert not task().plan(rtx3090({**SEED, "ib_hca": "=mlx5_0:1", "ib_disable": True}), blade()).failed


def test_no_nccl_block_skips():
    assert task().plan(rtx3090(None), blade()).skipped == "nccl not set"
