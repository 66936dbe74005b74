"""Each verify check's verdict on parsed facts (the suite's functions called directly, no pytest session)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from builders.checks import checked_node, verdict
from builders.facts import facts
from builders.gpus import gpu as card
from builders.hosts import host
from provision.capabilities.gpu.model import GpuFacts, LostGpu, NvidiaFacts
from provision.capabilities.host import HostFacts
from provision.capabilities.nccl.facts import Interface
from provision.capabilities.gpu.tasks import PowerLimit
from provision.verify import Node
from provision.verify.as_intended import check_as_intended
from provision.capabilities.gpu import checks
from provision.capabilities.health import checks as checks_health
from provision.capabilities.nccl import checks as checks_network
from provision.capabilities.topology import checks as checks_topology


def gpu(index: int, **values) -> GpuFacts:
    """The rig's RTX 4090s: capped at 400 W, each on a full x16 link."""
    return card(index, "RTX 4090", **({"power_limit": 400.0, "pcie_width_current": 16, "pcie_width_max": 16} | values))


def node(nvidia: NvidiaFacts, gpu_block: dict | None = None) -> Node:
    """The rig as the checks see it, its power-limit task planned from this provision_gpu block (400 W unless
    given)."""
    return checked_node(HostFacts(nvidia=nvidia), tasks=[PowerLimit()],
                        provision_gpu=gpu_block if gpu_block is not None else {"power_limit": 400})


def test_nvidia_smi_exit_codes_carry_their_meaning():
    assert verdict(checks.check_nvidia_smi_reads_the_gpus, node(NvidiaFacts(state="ok", exit_code=0, gpus=[gpu(0)]))) \
        is None
    failed = verdict(checks.check_nvidia_smi_reads_the_gpus,
                     node(NvidiaFacts(state="error", exit_code=9, message="NVIDIA-SMI has failed")))
    assert "exit 9 (the NVIDIA driver is not loaded): NVIDIA-SMI has failed" in failed.found
    lost = NvidiaFacts(state="ok", exit_code=15, gpus=[gpu(0)], lost=[LostGpu("0000:02:00.0", "Unable to ...")])
    assert "exit 15 (a GPU has fallen off the bus" in verdict(checks.check_nvidia_smi_reads_the_gpus, node(lost)).found
    assert "0000:02:00.0: Unable to ..." in verdict(checks.check_no_gpu_is_lost, node(lost)).found


def test_a_link_trained_narrow_fails_and_a_slow_idle_generation_does_not():
    pcie = checks.check_pcie_links_run_at_full_width_and_speed
    idle = NvidiaFacts(state="ok", gpus=[gpu(0, pcie_gen_current=1, pcie_gen_max=4, clock_events_active=0x1)])
    assert verdict(pcie, node(idle)) is None
    riser = NvidiaFacts(state="ok", gpus=[gpu(0), gpu(3, pcie_width_current=8)])
    failed = verdict(pcie, node(riser))
    assert failed.found == "GPU3 00000000:04:00.0 x8 of x16" and "riser" in failed.fix
    missing = NvidiaFacts(state="ok", gpus=[gpu(0, pcie_width_current=None)])  # [N/A]: a state, not a failure
    assert verdict(pcie, node(missing)) is None


def test_a_slow_generation_fails_on_a_gpu_at_work():
    at_work = NvidiaFacts(state="ok", gpus=[gpu(0, pcie_gen_current=3, pcie_gen_max=4, clock_events_active=0x4)])
    assert verdict(checks.check_pcie_links_run_at_full_width_and_speed, node(at_work)).found == \
        "GPU0 00000000:01:00.0 gen 3 of 4 while at work"
    unknown = NvidiaFacts(state="ok", gpus=[gpu(0, pcie_gen_current=3, pcie_gen_max=4)])  # reasons not reported
    assert verdict(checks.check_pcie_links_run_at_full_width_and_speed, node(unknown)) is None


def test_uncorrectable_memory_errors_and_pending_repairs_fail_with_what_to_do():
    memory = checks_health.check_gpu_memory_has_no_uncorrectable_errors
    healthy = [gpu(0, ecc_enabled=True, ecc_uncorrected=0, remap_pending=False, remap_failure=False),
               gpu(1)]  # GeForce: no ECC, every field None
    assert verdict(memory, node(NvidiaFacts(state="ok", gpus=healthy))) is None
    sick = [gpu(0, ecc_uncorrected=2, remap_pending=True), gpu(1, retired_pages_pending=True),
            gpu(2, remap_failure=True)]
    failed = verdict(memory, node(NvidiaFacts(state="ok", gpus=sick)))
    assert failed.found == ("GPU0 00000000:01:00.0: 2 uncorrectable ECC error(s) since the driver loaded; "
                            "GPU0 00000000:01:00.0: a row remap is pending; "
                            "GPU1 00000000:02:00.0: a page is pending retirement; "
                            "GPU2 00000000:03:00.0: a row remapping failed (no spare rows left)")
    assert "replace the GPU" in failed.fix and "nvidia-smi -r -i N" in failed.fix and "replace it" in failed.fix


def test_clocks_held_by_a_power_brake_fail_and_the_intended_reasons_do_not():
    clocks = checks_health.check_clocks_are_not_held_down_by_heat_or_power
    tuned = [gpu(0, clock_events_active=0x1), gpu(1, clock_events_active=0x2 | 0x4 | 0x10 | 0x100), gpu(2)]
    assert verdict(clocks, node(NvidiaFacts(state="ok", gpus=tuned))) is None
    brownout = [gpu(0, clock_events_active=0x4), gpu(1, clock_events_active=0x88), gpu(2, clock_events_active=0x60)]
    failed = verdict(clocks, node(NvidiaFacts(state="ok", gpus=brownout)))
    assert failed.found.startswith("GPU1 00000000:02:00.0: HW Slowdown (")
    assert "HW Power Brake Slowdown (the power supply asserted the external power brake" in failed.found
    assert "GPU2 00000000:03:00.0: SW Thermal Slowdown (" in failed.found and "HW Thermal Slowdown" in failed.found
    assert "GPU0" not in failed.found and "PSU" in failed.fix


def test_health_checks_skip_a_host_where_no_gpu_was_read():
    with pytest.raises(pytest.skip.Exception, match="see nvidia_smi_reads_the_gpus"):
        checks_health.check_clocks_are_not_held_down_by_heat_or_power(node(NvidiaFacts(state="error")))


def test_as_intended_is_the_tasks_plan_with_nothing_to_change():
    converged = node(NvidiaFacts(state="ok", gpus=[gpu(0), gpu(1)]))
    assert verdict(check_as_intended, converged, PowerLimit()) is None
    drifted = node(NvidiaFacts(state="ok", gpus=[gpu(0), gpu(1, power_limit=450.0)]))
    failed = verdict(check_as_intended, drifted, PowerLimit())
    assert (failed.expected, failed.found) == ("GPU1 power limit 400.00 W", "GPU1 power limit 450.00 W")
    assert failed.fix.startswith("provision apply basement.yaml --limit rig")


def test_a_host_without_a_gpu_block_skips_the_gpu_checks():
    bare = checked_node(facts(state="missing"))
    with pytest.raises(pytest.skip.Exception):
        checks.check_no_gpu_is_lost(bare)


def test_the_gpu_count_of_the_inventory_counts_lost_gpus_and_says_what_it_found():
    count = checks.check_gpu_count_is_as_the_inventory_says
    seven = node(NvidiaFacts(state="ok", gpus=[gpu(i) for i in range(7)]), {"count": 7})
    assert verdict(count, seven) is None
    one_lost = node(NvidiaFacts(state="ok", gpus=[gpu(i) for i in range(6)], lost=[LostGpu("0000:08:00.0", "x")]),
                    {"count": 7})
    assert verdict(count, one_lost) is None  # still enumerated: no_gpu_is_lost fails for it
    gone = node(NvidiaFacts(state="ok", gpus=[gpu(i) for i in range(6)]), {"count": 7})
    failed = verdict(count, gone)
    assert (failed.expected, failed.found) == ("7 GPU(s) (provision_gpu.count)", "6") and "reseat" in failed.fix
    no_driver = node(NvidiaFacts(state="error", message="NVIDIA-SMI has failed"), {"count": 4})
    assert verdict(count, no_driver).found == "0 (error: NVIDIA-SMI has failed)"
    with pytest.raises(pytest.skip.Exception, match="no provision_gpu.count"):
        count(node(NvidiaFacts(state="ok", gpus=[gpu(0)])))


def nic_node(interfaces: list[Interface], **nccl) -> Node:
    return checked_node(facts(state="missing", interfaces=interfaces), provision_nccl=nccl)


UP = ("BROADCAST", "UP", "LOWER_UP")
BLADE = [Interface("lo", "unknown", None, ("LOOPBACK", "UP", "LOWER_UP"), ("127.0.0.1/8",)),
         Interface("eno1", "up", 1000, UP, ("192.0.2.11/24",)),
         Interface("ens803f0", "up", 10000, UP, ("10.214.1.11/24",)),
         Interface("ens803f1", "up", 10000, UP, ("10.215.1.11/24",))]


def test_the_nccl_interfaces_up_at_the_expected_speed_pass():
    nics = checks_network.check_nccl_interfaces_are_up_at_speed
    assert verdict(nics, nic_node(BLADE, socket_ifname="ens803f", expected_link_speed_mbps=10000)) is None
    with pytest.raises(pytest.skip.Exception, match="no nccl block"):
        nics(node(NvidiaFacts(state="missing")))


def test_a_pulled_cable_and_a_slow_port_caught_by_the_prefix_fail_by_name():
    nics = checks_network.check_nccl_interfaces_are_up_at_speed
    pulled = [*BLADE[:3], Interface("ens803f1", "down", None, ("BROADCAST", "UP"), ("10.215.1.11/24",))]
    failed = verdict(nics, nic_node(pulled, socket_ifname="ens803f"))
    assert failed.found == "ens803f1 is down: NCCL skips it without a word" and "cable" in failed.fix
    uplink = [*BLADE[:3], Interface("ens803f1", "up", 1000, UP, ("192.0.2.12/24",))]  # the old 1GbE internet port
    failed = verdict(nics, nic_node(uplink, socket_ifname="ens803f", expected_link_speed_mbps=10000))
    assert failed.expected == "every interface NCCL will use (NCCL_SOCKET_IFNAME=ens803f) up, addressed at 10000 Mb/s"
    assert failed.found == "ens803f1 1000 Mb/s, not 10000 Mb/s (expected_link_speed_mbps)"
    renamed = verdict(nics, nic_node(BLADE, socket_ifname="=ens1f0"))
    assert renamed.found == "NCCL_SOCKET_IFNAME==ens1f0 matches none of this node's interfaces (lo, eno1, ens803f0, " \
                            "ens803f1)"
    unset = verdict(nics, nic_node(BLADE))  # NCCL's own choice takes the 1GbE port beside the fabric
    assert unset.expected.startswith("every interface NCCL will use (NCCL's own choice)")
    assert "interfaces of different speeds" in unset.found


def test_a_port_down_and_a_slow_port_are_two_findings_each_with_its_own_next_step():
    nics = checks_network.check_nccl_interfaces_are_up_at_speed
    both = [*BLADE[:2], Interface("ens803f0", "up", 1000, UP, ("10.214.1.11/24",)),
            Interface("ens803f1", "down", None, ("BROADCAST", "UP"), ("10.215.1.11/24",))]
    failed = verdict(nics, nic_node(both, socket_ifname="ens803f", expected_link_speed_mbps=10000))
    assert [(f.found, f.because) for f in failed.findings] == [
        ("ens803f1 is down: NCCL skips it without a word", ()),
        ("ens803f0 1000 Mb/s, not 10000 Mb/s (expected_link_speed_mbps)", ())]
    down, slow = (f.fix for f in failed.findings)
    assert "cable" in down and "1GbE" not in down
    assert "slower switch port" in slow and "ip link" not in slow


def test_a_check_that_only_follows_a_lost_gpu_names_it_as_its_cause():
    lost = NvidiaFacts(state="ok", exit_code=15, gpus=[gpu(0)], lost=[LostGpu("0000:02:00.0", "Unable to ...")])
    assert verdict(checks.check_nvidia_smi_reads_the_gpus, node(lost)).findings[0].because == ("no_gpu_is_lost",)
    assert verdict(checks.check_no_gpu_is_lost, node(lost)).findings[0].about == ("0000:02:00",)
    no_driver = NvidiaFacts(state="error", exit_code=9, message="NVIDIA-SMI has failed")
    assert verdict(checks.check_nvidia_smi_reads_the_gpus, node(no_driver)).findings[0].because == ()


# --- topology: nvidia-smi topo -m ---

DUAL_SOCKET = """\
\tGPU0\tGPU1\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID
GPU0\t X \tSYS\tPIX\t0-15\t0\t\tN/A
GPU1\tSYS\t X \tSYS\t16-31\t1\t\tN/A
NIC0\tPIX\tSYS\t X \t\t\t\t

NIC Legend:

  NIC0: mlx5_0
"""


def topo_node(text: str | None, **nccl) -> Node:
    from provision.capabilities.topology.topo import TopologyFacts
    from provision.capabilities.topology.topo import parse_topo

    bare = nic_node(BLADE, **nccl)
    bare.facts.topology = TopologyFacts(parse_topo(text)) if text else TopologyFacts(message="nvidia-smi: not found")
    return bare


def test_a_gpu_whose_nearest_nic_is_across_sockets_fails_the_level_the_inventory_requires():
    check = checks_topology.check_every_gpu_has_a_nic_within_reach
    far = topo_node(DUAL_SOCKET, require_nic_within="PXB")
    failed = verdict(check, far)
    assert failed.expected == "every GPU with an RDMA NIC at PXB or closer (nvidia-smi topo -m)"
    assert failed.found == "GPU1 nearest mlx5_0 at SYS"
    assert far.notes == ["GPU pairs that meet only across sockets (SYS): GPU0-GPU1",
                         "GPUs whose nearest NIC is across sockets (SYS): GPU1 (nearest mlx5_0)"]
    assert verdict(check, topo_node(DUAL_SOCKET, require_nic_within="SYS")) is None
    assert "no topology: nvidia-smi: not found" in verdict(check, topo_node(None, require_nic_within="PIX")).found


def test_without_a_required_level_the_cross_socket_pairs_are_noted_not_failed():
    check = checks_topology.check_every_gpu_has_a_nic_within_reach
    quiet = topo_node(DUAL_SOCKET)
    with pytest.raises(pytest.skip.Exception, match="no provision_nccl.require_nic_within"):
        check(quiet)
    assert len(quiet.notes) == 2


def test_the_checks_host_fixture_is_the_nodes_own_never_testinfras_local_one():
    """A check's `host` (testinfra modules over provision's connection) must be the node's: testinfra's plugin
    also defines `host`, for this machine, and must not win."""
    from provision.core.facts import SystemFacts
    from provision.verify import run_checks

    asked = []

    class NodeHost:
        def package(self, name):
            asked.append(name)
            return SimpleNamespace(is_installed=False, version=None)

    inventory = host("rig", provision_driver={"version": "580.159.04"})
    read = facts(system=SystemFacts(os_id="ubuntu"), gpus=[gpu(0)])
    found = run_checks([Node("rig", inventory, read, [], host=NodeHost(), inventory_path="basement.yaml")])["rig"]
    assert asked and "driver_loaded_is_the_pinned_version" in " ".join(found.skipped)


def test_the_fabric_fields_parse_and_an_older_driver_without_them_is_no_fabric():
    from provision.capabilities.gpu.smi import read_query_gpu
    header = "index, uuid, name, pci.bus_id, fabric.state, fabric.status"
    read = read_query_gpu(f"{header}\n0, GPU-0, NVIDIA H100 80GB HBM3, 00000000:18:00.0, In Progress, [N/A]\n")
    assert (read.gpus[0].fabric_state, read.gpus[0].fabric_status) == ("In Progress", None)
    old = read_query_gpu("index, uuid, name, pci.bus_id\n0, GPU-0, Tesla V100-SXM2-16GB, 00000000:18:00.0\n")
    assert old.gpus[0].fabric_state is None


def test_a_gpu_the_driver_says_a_reset_brings_back_asks_a_reset_and_one_off_the_bus_a_reboot():
    requires_reset = LostGpu("0000:02:00.0", "GPU requires reset")  # as smi reads a row of "[GPU requires reset]"
    off_the_bus = LostGpu("0000:03:00.0", "Unable to determine the device handle for GPU0000:03:00.0: Unknown Error")
    [finding] = verdict(checks.check_no_gpu_is_lost, node(NvidiaFacts(state="ok", lost=[requires_reset]))).findings
    assert finding.remedy == "reset"
    [finding] = verdict(checks.check_no_gpu_is_lost,
                        node(NvidiaFacts(state="ok", lost=[requires_reset, off_the_bus]))).findings
    assert finding.remedy == "reboot"  # one reboot brings both back
