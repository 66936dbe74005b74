"""`provision facts` under a host: the printer prints the core's system line, then each capability's lines as its
declaration shows them (registry.fact_lines), colouring only the parts the capability gave a tone."""

from __future__ import annotations

from dataclasses import asdict

import click

from builders import hosts
from builders.gpus import gpu
from provision.capabilities.capability import PROBLEM, WARNING, FactLine
from provision.capabilities.driver.facts import DriverFacts
from provision.capabilities.gpu.model import GpuFacts, LostGpu, NvidiaFacts, RecordedGpu
from provision.capabilities.host import HostFacts
from provision.capabilities.nccl.facts import Interface
from provision.capabilities.registry import fact_views, fact_lines
from provision.capabilities.topology.topo import TopologyFacts, parse_topo
from provision.core.facts import SystemFacts
from provision.inventory.model import Host
from provision.output import report

# Two GPUs on two sockets, each with its NIC (tests/unit/capabilities/topology/test_gpudirect_rdma.py's box, without the NICs' pairs).
TOPO = """\
\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID
GPU0\t X \tSYS\t0-15\t0\t\tN/A
GPU1\tSYS\t X \t16-31\t1\t\tN/A
"""


def v100(index: int, bus: str) -> GpuFacts:
    """A tuned V100 (250 W, application clocks 877,1380) on a full PCIe gen 3 x16 link."""
    return gpu(index, "V100", uuid=f"GPU-{index}aaa", bus_id=bus, power_limit=250.0, app_clock_mem=877,
               app_clock_sm=1380, pcie_gen_current=3, pcie_width_current=16, pcie_gen_max=3, pcie_width_max=16)


def node() -> tuple[Host, HostFacts]:
    gpus = [v100(0, "00000000:3B:00.0"), v100(1, "00000000:86:00.0")]
    facts = HostFacts(
        system=SystemFacts(hostname="v100-1", os_id="ubuntu", os_version="24.04", uid=0, systemd_running=True),
        nvidia=NvidiaFacts(state="ok", driver_version="570.195.03", gpus=gpus, notes=["a note of nvidia-smi's"],
                           lost=[LostGpu("0000:AF:00.0", "Unable to determine the device handle: GPU is lost")],
                           persistenced_path="/usr/bin/nvidia-persistenced", persistenced_running=True),
        driver=DriverFacts(loaded="570.195.03", packages={"nvidia-driver-580": "580.95.05-0ubuntu1"},
                           secure_boot="disabled"),
        gpu_layout=[RecordedGpu(g.index, g.uuid, g.bus_id, g.name) for g in gpus]
        + [RecordedGpu(2, "GPU-2aaa", "00000000:AF:00.0", "Tesla V100-SXM2-16GB")],
        interfaces=[Interface("lo", "unknown", None), Interface("ens1", "up", 10000, device="/sys/devices/pci0/x")],
        topology=TopologyFacts(matrix=parse_topo(TOPO)))
    return hosts.host("v100-1", provision_nccl={}), facts


def printed(capsys, host: Host, facts: HostFacts | None, color: bool = False) -> list[str]:
    report.print_facts(host.name, facts, "ssh: connection refused", fact_lines(host, facts) if facts else ())
    out = capsys.readouterr().out
    return out.splitlines() if color else click.unstyle(out).splitlines()


def test_a_read_host_shows_the_core_line_then_each_capability_in_the_registry_order(capsys):
    host, facts = node()
    lines = printed(capsys, host, facts)
    assert lines[:3] == ["v100-1", "  system: v100-1, ubuntu 24.04, uid 0, systemd running",
                         "  driver: 570.195.03 loaded (proprietary kernel module); installed: nvidia-driver-580 "
                         "580.95.05-0ubuntu1; reboot pending: driver 580.95.05 is installed, 570.195.03 is loaded"]
    assert lines[3] == "  nvidia: driver 570.195.03, 2 GPU(s), nvidia-persistenced running"
    assert lines[5].split() == ["0", "Tesla", "V100-SXM2-16GB", "00000000:3B:00.0", "on", "250", "W", "(150..300)",
                                "app", "877,1380", "gen3", "x16", "/", "gen3", "x16"]
    labels = [line.split(":")[0].strip() for line in lines[7:]]
    assert labels == ["unreadable 0000", "layout", "note", "nccl", "topology"]
    assert lines[-1] == "  topology: GPU pairs that meet only across sockets (SYS): GPU0-GPU1"


def test_only_the_parts_a_capability_gives_a_tone_are_coloured(capsys, monkeypatch):
    monkeypatch.setattr(click.utils, "should_strip_ansi", lambda stream=None, color=None: False)
    host, facts = node()
    lines = printed(capsys, host, facts, color=True)
    assert lines[2].startswith("  driver: 570.195.03 loaded") and \
        lines[2].endswith(click.style("reboot pending: driver 580.95.05 is installed, 570.195.03 is loaded",
                                      fg="yellow"))
    assert lines[-1] == "  " + click.style("topology", fg="yellow") + ": GPU pairs that meet only across sockets " \
                                                                       "(SYS): GPU0-GPU1"
    assert lines[3] == "  nvidia: driver 570.195.03, 2 GPU(s), nvidia-persistenced running"  # plain: no codes


def test_nvidia_smi_that_cannot_list_the_gpus_is_one_line_and_no_topology(capsys):
    host, facts = node()
    facts.nvidia = NvidiaFacts(state="mismatch", message="Failed to initialize NVML: Driver/library version mismatch")
    lines = printed(capsys, host, facts)
    assert "  nvidia: mismatch: Failed to initialize NVML: Driver/library version mismatch; nvidia-persistenced " \
           "not installed" in lines
    assert not any(line.startswith(("  topology", "  layout", "  GPU ")) for line in lines)


def test_an_unreachable_host_says_why_and_nothing_else(capsys):
    host, _ = node()
    assert printed(capsys, host, None) == ["v100-1", "  unreachable: ssh: connection refused"]


def test_a_fact_line_is_its_parts_in_order():
    line = FactLine.labelled("layout", "GPU2 is gone", PROBLEM)
    assert line.parts == (("layout", PROBLEM), (": GPU2 is gone", "")) and line.text == "layout: GPU2 is gone"
    assert FactLine.plain("x").parts == (("x", ""),) and WARNING != PROBLEM


def test_facts_json_gives_each_capabilitys_view_of_the_facts_by_its_name():
    """facts --json: the facts, and what a capability makes of them under its name (NCCL: the interfaces it takes
    and skips), from the declarations (registry.fact_views), not from a command that names NCCL."""
    from provision.commands.facts import as_json
    from provision.core.run import HostState

    host, facts = node()
    state = HostState(host, facts=facts)
    data = as_json(state)
    assert data["nvidia"]["driver_version"] == "570.195.03"
    assert set(data["nccl"]) >= {"rule", "problems"} and data["nccl"] == fact_views(host, facts)["nccl"]
    assert "ens1" in str(data["nccl"]) and "nccl" not in asdict(facts)
    state = HostState(host)
    state.result.message = "ssh: connection refused"
    assert as_json(state) == {"unreachable": "ssh: connection refused"}
