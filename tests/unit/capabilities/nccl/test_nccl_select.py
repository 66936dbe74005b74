"""What NCCL will use on a node (NCCL's ncclFindInterfaces rules) and what provision says is wrong with it."""

from __future__ import annotations


from provision.capabilities.nccl.facts import parse_network
from provision.capabilities.nccl.facts import Interface, RdmaPort
from provision.capabilities.nccl import interfaces as nccl
from provision.capabilities.nccl.interfaces import select
from provision.capabilities.nccl.settings import NcclSettings
from paths import FIXTURES

REAL_NET = FIXTURES / "real" / "net"
UP = ("BROADCAST", "MULTICAST", "UP", "LOWER_UP")


def nic(name: str, speed: int | None = 10000, state: str = "up", address: str | None = "10.214.1.11/24",
        flags=UP) -> Interface:
    return Interface(name, state, speed, flags, (address,) if address else ())


LO = Interface("lo", "unknown", None, ("LOOPBACK", "UP", "LOWER_UP"), ("127.0.0.1/8", "::1/128"))
DOCKER = nic("docker0", None, address="172.17.0.1/16")
BLADE = [LO, nic("eno1", 1000, address="192.0.2.11/24"), nic("ens803f0"), nic("ens803f1"), DOCKER]


def names(interfaces) -> list[str]:
    return [i.name for i in interfaces]


def link_problems(settings, interfaces) -> list[str]:
    """The problems' sentences, each with its kind first ("slow: ..."): the kind picks verify's next step."""
    return [f"{p.kind}: {p.text}" for p in nccl.link_problems(settings, interfaces)]


def hca_problems(ib_hca, ports) -> list[str]:
    return [f"{p.kind}: {p.text}" for p in nccl.hca_problems(ib_hca, ports)]


def test_the_seed_prefix_takes_both_10gbe_ports():
    selection = select("ens803f", BLADE)
    assert names(selection.used) == ["ens803f0", "ens803f1"] and not selection.skipped
    assert selection.describe() == "ens803f0 10000 Mb/s, ens803f1 10000 Mb/s"
    assert link_problems(NcclSettings(socket_ifname="ens803f", expected_link_speed_mbps=10000), BLADE) == []


def test_unset_nccl_picks_everything_but_docker_lo_and_virbr_and_ib_first():
    assert names(select(None, BLADE).used) == ["eno1", "ens803f0", "ens803f1"]
    assert select(None, BLADE).rule == "NCCL's own choice (^docker,lo,virbr)"
    with_ib = [*BLADE, nic("ib0", 100000)]
    assert names(select(None, with_ib).used) == ["ib0"]
    assert names(select("e", BLADE).used) == ["eno1", "ens803f0", "ens803f1"]  # one character: ignored by NCCL
    assert names(select(None, [LO]).used) == ["lo"]  # nothing else: lo after all


def test_unset_nccl_mixing_the_1gbe_uplink_with_the_fabric_is_caught():
    problems = link_problems(NcclSettings(), BLADE)
    assert problems == ["slow: eno1 1000 Mb/s, ens803f0 10000 Mb/s, ens803f1 10000 Mb/s: interfaces of different speeds "
                        "(NCCL spreads traffic evenly, so the slowest sets the pace; allow_mixed_speeds: true if "
                        "meant)"]
    assert link_problems(NcclSettings(allow_mixed_speeds=True), BLADE) == []


def test_a_prefix_that_catches_the_slow_uplink_is_an_error_naming_it():
    uplink = [LO, nic("ens803f0"), nic("ens803f1", 1000)]  # the second port once went to the 1GbE switch
    assert link_problems(NcclSettings(socket_ifname="ens803f", expected_link_speed_mbps=10000), uplink) == [
        "slow: ens803f1 1000 Mb/s, not 10000 Mb/s (expected_link_speed_mbps)"]
    assert "interfaces of different speeds" in link_problems(NcclSettings(socket_ifname="ens803f"), uplink)[0]


def test_a_matched_port_down_or_without_address_is_named_as_nccl_skips_it_silently():
    pulled = [LO, nic("ens803f0"), nic("ens803f1", None, state="down", flags=("BROADCAST", "UP"))]
    selection = select("ens803f", pulled)
    assert names(selection.used) == ["ens803f0"]
    assert selection.describe() == "ens803f0 10000 Mb/s; skips ens803f1, which is down"
    assert link_problems(NcclSettings(socket_ifname="ens803f"), pulled) == [
        "down: ens803f1 is down: NCCL skips it without a word"]
    bare = [LO, nic("ens803f0"), nic("ens803f1", address=None)]
    assert link_problems(NcclSettings(socket_ifname="=ens803f0,ens803f1"), bare) == [
        "unaddressed: ens803f1 has no IP address: NCCL skips it without a word"]
    admin_down = [nic("ens803f0", state="down", flags=("BROADCAST",))]
    assert select("ens803f0", admin_down).skipped[0][1] == "is down"


def test_no_interface_matched_names_what_the_node_has():
    assert link_problems(NcclSettings(socket_ifname="ens801f"), BLADE) == [
        "unmatched: NCCL_SOCKET_IFNAME=ens801f matches none of this node's interfaces (lo, eno1, ens803f0, ens803f1, docker0)"]
    every_one_down = [nic("ens803f0", state="down")]
    assert link_problems(NcclSettings(socket_ifname="ens803f"), every_one_down)[-1].startswith(
        "unmatched: NCCL would find no interface to use (NCCL_SOCKET_IFNAME=ens803f) among ens803f0")


def test_an_exclusion_list_lets_nccl_take_lo_and_docker_once_set():
    problems = link_problems(NcclSettings(socket_ifname="^eno", allow_mixed_speeds=True), BLADE)
    assert problems == ["stray: NCCL_SOCKET_IFNAME=^eno lets NCCL use lo, docker0: once the variable is set NCCL no "
                        "longer leaves lo and docker* out by itself"]
    assert link_problems(NcclSettings(socket_ifname="^eno,lo,docker"), BLADE) == []


def test_nccl_takes_at_most_16_interfaces_in_kernel_order():
    many = [nic(f"eth{k}") for k in range(20)]
    assert names(select("eth", many).used) == [f"eth{k}" for k in range(16)]


def test_ib_hca_devices_must_exist():
    ports = [RdmaPort("mlx5_0", 1, "ACTIVE", 100.0, "InfiniBand"), RdmaPort("mlx5_1", 1, "ACTIVE", 100.0)]
    assert hca_problems("=mlx5_0:1,mlx5_1:1", ports) == []
    assert hca_problems("mlx5", ports) == []
    assert hca_problems("^=mlx5_9", ports) == []  # an exclusion needs nothing to exist
    assert hca_problems("=mlx5_0:2,mlx5_4", ports) == [
        "hca: NCCL_IB_HCA==mlx5_0:2,mlx5_4: no RDMA device mlx5_0:2, mlx5_4 here (this node has: mlx5_0:1, mlx5_1:1; "
        "/sys/class/infiniband)"]
    assert "this node has: none" in hca_problems("mlx5_0", [])[0]


def real_net(name: str) -> str:
    lines = (REAL_NET / name).read_text().splitlines()
    assert lines[0].startswith("$ ") and lines[-1].startswith("[exit ")
    return "\n".join(lines[1:-1])


def test_the_network_section_of_a_real_vm_parses():
    interfaces, ports = parse_network(real_net("debian12-virtio.txt"))
    assert names(interfaces) == ["lo", "ifb0", "ifb1", "eth0"]  # ifindex order, as NCCL lists them
    lo, ifb0, _, eth0 = interfaces
    assert lo.running and lo.addresses == ("127.0.0.1/8", "::1/128") and lo.device is None
    assert not ifb0.running and ifb0.addressed is False
    assert eth0.running and eth0.speed_mbps is None  # virtio says -1: no speed
    assert eth0.addresses[0] == "192.0.2.2/24" and eth0.device == "/sys/devices/pci0000:00/0000:00:03.0/virtio2"
    assert ports == [] and names(select(None, interfaces).used) == ["eth0"]


IB_LINES = ("ibports /sys/class/infiniband/mlx5_0/ports/1 /sys/class/infiniband/mlx5_1/ports/1\n"
            "/sys/class/infiniband/mlx5_0/ports/1/state:4: ACTIVE\n/sys/class/infiniband/mlx5_1/ports/1/state:1: DOWN\n"
            "/sys/class/infiniband/mlx5_0/ports/1/rate:100 Gb/sec (4X EDR)\n"
            "/sys/class/infiniband/mlx5_1/ports/1/rate:10 Gb/sec (4X SDR)\n"
            "/sys/class/infiniband/mlx5_0/ports/1/link_layer:InfiniBand\n"
            "/sys/class/infiniband/mlx5_1/ports/1/link_layer:Ethernet\n")  # the RDMA ports' lines: test_rdma_ports.py


def test_without_ip_json_the_sys_lines_still_say_enough():
    interfaces, _ = parse_network("sys ens803f0 up 10000 /sys/devices/pci0000:00/0000:00:02.0/0000:03:00.0\n"
                                  "sys lo unknown - /sys/devices/virtual/net/lo/device\n" + IB_LINES)
    assert interfaces[0] == Interface("ens803f0", "up", 10000, None, None, "/sys/devices/pci0000:00/0000:00:02.0/"
                                                                            "0000:03:00.0")
    assert interfaces[0].running and interfaces[0].addressed is None
    assert link_problems(NcclSettings(socket_ifname="ens803f"), interfaces) == []
    _, ports = parse_network(IB_LINES)
    assert ports == [RdmaPort("mlx5_0", 1, "ACTIVE", 100.0, "InfiniBand", rate_text="100 Gb/sec (4X EDR)"),
                     RdmaPort("mlx5_1", 1, "DOWN", 10.0, "Ethernet", rate_text="10 Gb/sec (4X SDR)")]
