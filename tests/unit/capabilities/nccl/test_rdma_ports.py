"""RDMA ports (/sys/class/infiniband/HCA/ports/N): the facts batch's reading of them (the shell part run on a
tree laid out as sysfs has it), the parser, NCCL_IB_HCA's choice of ports, and verify's check: a port down, slow
or counting errors is one finding naming the port, with its own next step; a clean node passes.

The values are in the shapes public captures show (nccl/facts.py parse_rdma_ports names the sources): ibstatus on
25GbE ConnectX RoCE hosts ("4: ACTIVE", "5: LinkUp", "25 Gb/sec (1X EDR)"; a port "1: DOWN", "3: Disabled",
"40 Gb/sec (4X QDR)"), the Mellanox OFED manual's `cat .../state` ("2: INIT"), node_exporter#966's counters
("N/A (no PMA)"), the kernel's own formats (sysfs.c: "7: Phy Test", "2.5 Gb/sec (1X SDR)").
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from pydantic import ValidationError

from builders.facts import facts
from builders.hosts import host
from provision.capabilities.nccl import checks_rdma, rdma
from provision.capabilities.nccl.facts import (ERROR_COUNTERS, IB_CLASS, NET_SNIPPET, RdmaPort, parse_network,
                                               parse_rdma_ports)
from provision.capabilities.nccl.settings import NcclSettings
from provision.core.checks import CRITICAL, WARNING, CheckFailed
from provision.verify import Node

from builders.checks import verdict

CHECK = checks_rdma.check_rdma_ports_are_up_at_rate_without_errors
NAME = "rdma_ports_are_up_at_rate_without_errors"  # as verify reports it
CLEAN = {name: "0" for name in ERROR_COUNTERS}


def port_files(state="4: ACTIVE", phys_state="5: LinkUp", rate="100 Gb/sec (4X EDR)", link_layer="InfiniBand",
               **counters) -> dict[str, str]:
    """One port's files as the kernel writes them (None: the file is not there)."""
    files = {"state": state, "phys_state": phys_state, "rate": rate, "link_layer": link_layer,
             **{f"counters/{name}": value for name, value in {**CLEAN, **counters}.items()}}
    return {name: value for name, value in files.items() if value is not None}


def sysfs(root: Path, ports: dict[str, dict[str, str]]) -> Path:
    """root/infiniband laid out as /sys/class/infiniband: {"mlx5_0/1": port_files(...)}; a value "<dir>" makes
    a directory where the file should be (a read that fails)."""
    for where, files in ports.items():
        hca, port = where.split("/")
        directory = root / "infiniband" / hca / "ports" / port
        (directory / "counters").mkdir(parents=True, exist_ok=True)
        for name, value in files.items():
            if value == "<dir>":
                (directory / name).mkdir()
            else:
                (directory / name).write_text(value + "\n")
    return root / "infiniband"


def batch(ib_class: Path) -> str:
    """The facts batch's network section run here, with ib_class standing in for /sys/class/infiniband; its
    output as the node would print it."""
    out = subprocess.run(["sh", "-c", NET_SNIPPET.replace(IB_CLASS, str(ib_class))], capture_output=True, text=True,
                         timeout=30)
    assert out.returncode == 0, out.stderr
    return out.stdout.replace(str(ib_class), IB_CLASS)


# --- reading -----------------------------------------------------------------------------------------------

def test_the_batch_reads_every_port_with_one_grep_and_the_parser_makes_ports_of_it(tmp_path):
    ib = sysfs(tmp_path, {
        "mlx5_0/1": port_files(symbol_error="1520"),
        "mlx5_1/1": port_files("1: DOWN", "3: Disabled", "40 Gb/sec (4X QDR)", "Ethernet"),  # a RoCE port, down
        "mlx5_2/1": port_files(rate="25 Gb/sec (1X EDR)", link_layer="Ethernet",  # 25GbE RoCE
                               link_downed="N/A (no PMA)", port_xmit_discards=None),
    })
    output = batch(ib)
    assert f"ibports {IB_CLASS}/mlx5_0/ports/1 {IB_CLASS}/mlx5_1/ports/1 {IB_CLASS}/mlx5_2/ports/1" in output
    assert f"{IB_CLASS}/mlx5_0/ports/1/state:4: ACTIVE" in output
    _, ports = parse_network(output)
    assert [(p.hca, p.port, p.state, p.phys_state, p.rate_gbps, p.link_layer) for p in ports] == [
        ("mlx5_0", 1, "ACTIVE", "LinkUp", 100.0, "InfiniBand"),
        ("mlx5_1", 1, "DOWN", "Disabled", 40.0, "Ethernet"),
        ("mlx5_2", 1, "ACTIVE", "LinkUp", 25.0, "Ethernet")]
    assert ports[0].rate_text == "100 Gb/sec (4X EDR)" and ports[0].name == "mlx5_0 port 1"
    assert ports[0].counters == {**{name: 0 for name in ERROR_COUNTERS}, "symbol_error": 1520}
    assert ports[2].counters["link_downed"] is None  # "N/A (no PMA)": not a number, not a crash
    assert "port_xmit_discards" not in ports[2].counters  # a counter the device does not offer


def test_a_file_that_cannot_be_read_is_a_state_and_a_port_with_none_is_still_a_port(tmp_path):
    ib = sysfs(tmp_path, {"mlx5_0/1": {"state": "<dir>", "phys_state": "5: LinkUp"}, "mlx5_1/1": {}})
    (ib / "mlx5_1" / "ports" / "1" / "counters").rmdir()  # irdma: no counters/ at all
    ports = parse_rdma_ports(batch(ib))
    assert [(p.hca, p.state, p.phys_state, p.rate_gbps, p.link_layer, p.counters) for p in ports] == [
        ("mlx5_0", None, "LinkUp", None, "", {}), ("mlx5_1", None, None, None, "", {})]


def test_a_node_without_rdma_prints_nothing_of_it(tmp_path):
    output = batch(tmp_path / "infiniband")  # no such directory: /sys/class/infiniband on most machines
    assert "ibports" not in output and IB_CLASS not in output
    assert parse_network(output)[1] == []
    (tmp_path / "infiniband").mkdir()  # the class there, no device in it (ib_core loaded, no HCA)
    assert parse_rdma_ports(batch(tmp_path / "infiniband")) == []


def test_the_kernels_words_parse_as_they_are_written():
    lines = "\n".join([
        f"ibports {IB_CLASS}/mlx4_0/ports/1 {IB_CLASS}/mlx4_0/ports/2 {IB_CLASS}/qib0/ports/1",
        f"{IB_CLASS}/mlx4_0/ports/1/state:2: INIT", f"{IB_CLASS}/mlx4_0/ports/1/phys_state:5: LinkUp",
        f"{IB_CLASS}/mlx4_0/ports/1/rate:56 Gb/sec (4X FDR)",
        f"{IB_CLASS}/mlx4_0/ports/2/state:ACTIVE",  # a word without its number is taken as it is
        f"{IB_CLASS}/mlx4_0/ports/2/phys_state:7: Phy Test",
        f"{IB_CLASS}/qib0/ports/1/rate:2.5 Gb/sec (1X SDR)",
        f"{IB_CLASS}/qib0/ports/1/counters/symbol_error:65535",
        "sys eth0 up 1000 -", "ip [not json",  # the rest of the section: not ports
    ])
    first, second, third = parse_rdma_ports(lines)
    assert (first.state, first.phys_state, first.rate_gbps) == ("INIT", "LinkUp", 56.0)
    assert (second.state, second.phys_state, second.rate_gbps, second.rate_text) == ("ACTIVE", "Phy Test", None, "")
    assert (third.hca, third.rate_gbps, third.counters) == ("qib0", 2.5, {"symbol_error": 65535})


# --- which ports NCCL may use ----------------------------------------------------------------------------------

def port(hca="mlx5_0", number=1, state="ACTIVE", phys="LinkUp", gbps=100.0, layer="InfiniBand", **counters):
    text = {100.0: "100 Gb/sec (4X EDR)", 25.0: "25 Gb/sec (1X EDR)", 200.0: "200 Gb/sec (4X HDR)"}.get(gbps or 0.0, "")
    return RdmaPort(hca, number, state, gbps, layer, phys, text, {**{n: 0 for n in ERROR_COUNTERS}, **counters})


def test_nccl_ib_hca_picks_the_ports_as_nccl_does():
    ports = [port("mlx5_0"), port("mlx5_1"), port("mlx5_1", 2), port("mlx5_10"), port("bnxt_re0")]
    names = lambda ib_hca: [rdma.subject(p) for p in rdma.nccl_ports(ib_hca, ports)]  # noqa: E731
    assert names(None) == names("") == ["mlx5_0:1", "mlx5_1:1", "mlx5_1:2", "mlx5_10:1", "bnxt_re0:1"]
    assert names("mlx5_1") == ["mlx5_1:1", "mlx5_1:2", "mlx5_10:1"]  # a prefix: mlx5_10 too (NCCL's docs warn)
    assert names("=mlx5_1") == ["mlx5_1:1", "mlx5_1:2"]
    assert names("=mlx5_0:1,mlx5_1:2") == ["mlx5_0:1", "mlx5_1:2"]
    assert names("^=mlx5_1,bnxt_re0") == ["mlx5_0:1", "mlx5_10:1"]
    assert names("^mlx5") == ["bnxt_re0:1"]


# --- the findings ------------------------------------------------------------------------------------------

def test_ports_up_at_one_rate_without_errors_have_nothing_to_say():
    assert rdma.findings([port("mlx5_0"), port("mlx5_1"), port("mlx5_2", gbps=25.0, layer="Ethernet")]) == []
    assert rdma.findings([port(gbps=100.0)], 100.0) == []
    assert rdma.findings([port(gbps=200.0)], 100.0) == []  # faster than asked: NCCL loses nothing
    assert rdma.findings([port(state=None, phys=None, gbps=None)]) == []  # nothing read: nothing judged


@pytest.mark.parametrize("state, phys, layer, words", [
    ("DOWN", "Polling", "InfiniBand", "no link: reseat the cable of mlx5_1 port 1"),
    ("DOWN", "Disabled", "InfiniBand", "the port is disabled"),
    ("INIT", "LinkUp", "InfiniBand", "no subnet manager brought the port to ACTIVE"),
    ("ACTIVE", "LinkErrorRecovery", "InfiniBand", "no link: reseat"),
    ("DOWN", "Disabled", "Ethernet", "rdma link show mlx5_1/1"),
], ids=["pulled-cable", "disabled", "no-subnet-manager", "link-error-recovery", "roce-down"])
def test_a_port_down_is_one_critical_finding_naming_it_with_the_step_for_why(state, phys, layer, words):
    [finding] = rdma.findings([port("mlx5_0", layer=layer), port("mlx5_1", state=state, phys=phys, gbps=10.0,
                                                                 layer=layer)])
    assert finding.expected == "mlx5_1 port 1 ACTIVE, physical state LinkUp"
    assert finding.found == f"mlx5_1 port 1: state {state}, physical state {phys}"
    assert words in finding.fix and finding.about == ("mlx5_1:1",) and finding.severity == CRITICAL
    # its rate (a down port says one all the same) is not judged, nor held against the others


def test_a_slow_port_is_one_warning_held_to_the_setting_or_to_the_fastest_other_port_of_its_kind():
    ports = [port("mlx5_0", gbps=25.0), port("mlx5_1"), port("mlx5_2", gbps=200.0, layer="Ethernet")]
    [slow] = rdma.findings(ports)
    assert slow.expected == "mlx5_0 port 1 at 100 Gb/s (as fast as mlx5_1 port 1, the fastest other InfiniBand " \
                            "port here)"
    assert slow.found == "mlx5_0 port 1 at 25 Gb/s (25 Gb/sec (1X EDR))"
    assert "reseat or replace the cable of mlx5_0 port 1" in slow.fix and slow.severity == WARNING
    assert slow.about == ("mlx5_0:1",)
    by_setting = rdma.findings(ports, 200.0)
    assert [f.found.split(" at ")[0] for f in by_setting] == ["mlx5_0 port 1", "mlx5_1 port 1"]
    assert by_setting[1].expected == "mlx5_1 port 1 at 200 Gb/s (provision_nccl.expected_ib_rate_gbps)"
    assert rdma.findings([port(gbps=25.0)]) == []  # alone and nothing asked: nothing to hold it to
    assert rdma.findings([port("mlx5_0", gbps=25.0), port("mlx5_1", state="DOWN", phys="Polling")])[0].expected \
        == "mlx5_1 port 1 ACTIVE, physical state LinkUp"  # a down port's rate is no standard either


def test_error_counts_are_one_warning_naming_them_or_said_in_the_ports_own_finding():
    [errors] = rdma.findings([port(symbol_error=1520, port_rcv_errors=37, link_downed=None)])
    assert errors.expected == "mlx5_0 port 1: no link error counted since boot"
    assert errors.found == "mlx5_0 port 1: symbol_error 1520, port_rcv_errors 37"
    assert "physical layer" in errors.fix and "perfquery -R -C mlx5_0 -P 1" in errors.fix
    assert errors.about == ("mlx5_0:1",) and errors.severity == WARNING
    saturated = rdma.findings([port(symbol_error=65535, local_link_integrity_errors=15)])[0].found
    assert saturated == "mlx5_0 port 1: symbol_error 65535 (its maximum: at least that many), " \
                        "local_link_integrity_errors 15 (its maximum: at least that many)"
    assert "congestion" in rdma.findings([port(port_xmit_discards=12)])[0].fix

    [down] = rdma.findings([port(state="DOWN", phys="Polling", link_downed=1)])  # one cable, one finding
    assert down.severity == CRITICAL
    assert down.found == "mlx5_0 port 1: state DOWN, physical state Polling; counted since boot: link_downed 1"
    [slow] = rdma.findings([port("mlx5_0", gbps=25.0, symbol_error=3), port("mlx5_1")])
    assert slow.found == "mlx5_0 port 1 at 25 Gb/s (25 Gb/sec (1X EDR)); counted since boot: symbol_error 3"


# --- the check ---------------------------------------------------------------------------------------------

def node(ports: list[RdmaPort], interfaces=(), **nccl) -> Node:
    read = facts(interfaces=list(interfaces) if interfaces is not None else None, rdma=ports)
    return Node("gpu-1", host("gpu-1", provision_nccl=nccl or None), read, [], host=None, inventory_path="cluster.yaml")


def test_the_check_passes_a_clean_node_and_fails_with_one_finding_per_port_and_cause():
    assert verdict(CHECK, node([port("mlx5_0"), port("mlx5_1")])) is None  # no nccl block: hardware health all the same
    failed = verdict(CHECK, node([port("mlx5_0", state="DOWN", phys="Polling"), port("mlx5_1", gbps=25.0),
                           port("mlx5_2", symbol_error=9), port("mlx5_3")]))
    assert isinstance(failed, CheckFailed)
    assert [(f.about, f.severity) for f in failed.findings] == [(("mlx5_0:1",), CRITICAL), (("mlx5_1:1",), WARNING),
                                                                (("mlx5_2:1",), WARNING)]
    only = verdict(CHECK, node([port("mlx5_0", state="DOWN", phys="Polling"), port("mlx5_1")], ib_hca="=mlx5_1"))
    assert only is None  # NCCL will not use mlx5_0: not this check's business


def test_the_check_says_why_it_does_not_apply():
    assert verdict(CHECK, node([])) == "skip: not applicable: no RDMA device (/sys/class/infiniband is empty)"
    assert verdict(CHECK, node([port(state="DOWN")], ib_disable=True)) == \
        "skip: not applicable: provision_nccl.ib_disable is set (NCCL uses no RDMA port)"
    assert verdict(CHECK, node([port("mlx5_0")], ib_hca="^mlx5")) == \
        "skip: not applicable: NCCL_IB_HCA=^mlx5 leaves out every RDMA port here (mlx5_0:1)"
    assert verdict(CHECK, node([port()], interfaces=None)) == "skip: the network was not read"


def test_a_port_whose_state_cannot_be_read_is_a_note_not_a_failure():
    checked = node([port("mlx5_0", state=None, phys=None, gbps=None), port("mlx5_1")])
    assert verdict(CHECK, checked) is None
    assert checked.notes == ["mlx5_0 port 1: its state could not be read (/sys/class/infiniband/mlx5_0/ports/1/state)"]


def test_an_ipoib_interface_down_with_its_port_is_one_finding_under_the_ports(tmp_path):
    net = tmp_path / "net"  # /sys/class/net with an IPoIB ib0 on mlx5_0's port 1, its dev_port 0, and eno1
    for name, hca in (("ib0", "mlx5_0"), ("eno1", None)):
        (net / name).mkdir(parents=True)
        (net / name / "operstate").write_text("down\n" if hca else "up\n")
        if hca:
            (net / name / "device" / "infiniband" / hca).mkdir(parents=True)
            (net / name / "dev_port").write_text("0\n")
    out = subprocess.run(["sh", "-c", NET_SNIPPET.replace("/sys/class/net", str(net))], capture_output=True,
                         text=True, timeout=30)
    assert "ibdev ib0 mlx5_0 0" in out.stdout.replace(str(net), "/sys/class/net")
    interfaces, _ = parse_network(out.stdout)
    assert {i.name: i.rdma_port for i in interfaces} == {"eno1": None, "ib0": "mlx5_0:1"}

    from provision.capabilities.nccl import checks as checks_nccl
    from provision.capabilities.nccl.facts import Interface
    from provision.verify import Failure, by_cause

    ib0 = Interface("ib0", "down", None, ("BROADCAST", "UP"), ("10.1.0.11/16",), rdma_port="mlx5_0:1")
    checked = node([port("mlx5_0", state="DOWN", phys="Polling")], [ib0], socket_ifname="ib0")
    failures = []
    for name, check in (("nccl_interfaces_are_up_at_speed", checks_nccl.check_nccl_interfaces_are_up_at_speed),
                        ("rdma_ports_are_up_at_rate_without_errors", CHECK)):
        with pytest.raises(CheckFailed) as failed:
            check(checked)
        failures += [Failure(name, f.expected, f.found, f.fix, list(f.because), list(f.about))
                     for f in failed.value.findings]
    [cause] = by_cause(failures)  # one cable: the port is the finding, the interface on it a consequence
    assert cause.failure.check == "rdma_ports_are_up_at_rate_without_errors"
    assert [c.found for c in cause.consequences] == ["ib0 is down: NCCL skips it without a word",
                                                     "NCCL would find no interface to use (NCCL_SOCKET_IFNAME=ib0) "
                                                     "among ib0"]
    # the port up and the interface down (administratively, or its IP side) stays a finding of its own
    checked = node([port("mlx5_0")], [ib0], socket_ifname="ib0")
    with pytest.raises(CheckFailed) as alone:
        checks_nccl.check_nccl_interfaces_are_up_at_speed(checked)
    assert alone.value.findings[0].because == ("rdma_ports_are_up_at_rate_without_errors:mlx5_0:1",)
    assert by_cause([Failure("nccl_interfaces_are_up_at_speed", "", "", "",
                             list(alone.value.findings[0].because))])[0].consequences == []


def test_expected_ib_rate_gbps_takes_a_number_above_zero():
    assert NcclSettings.model_validate({"expected_ib_rate_gbps": 200}).expected_ib_rate_gbps == 200.0
    assert NcclSettings.model_validate({"expected_ib_rate_gbps": 2.5}).expected_ib_rate_gbps == 2.5
    for wrong in (0, -100, "200", True):
        with pytest.raises(ValidationError):
            NcclSettings.model_validate({"expected_ib_rate_gbps": wrong})
    assert "NCCL_" not in " ".join(NcclSettings(expected_ib_rate_gbps=100).variables())  # verify's, not NCCL's


# --- the lab's ports (provision_lab/rdma.py), on a tree laid out here ---------------------------------------

def lab_tree(root: Path, nics=("mlx5_0", "mlx5_1")) -> tuple[Path, Path]:
    """(the staged power-on tree, the live copy a node reads at /sys/class/infiniband), under root."""
    from provision_lab import rdma as lab_rdma

    staged, live = root / "staged", root / "live"
    for path, text in lab_rdma.power_on_tree([{"name": n, "near_gpu": k} for k, n in enumerate(nics)]).items():
        (staged / path).parent.mkdir(parents=True, exist_ok=True)
        (staged / path).write_text(text)
    subprocess.run(["cp", "-a", f"{staged}/.", str(live)], check=True)
    return staged, live


def on_tree(script: str, staged: Path, live: Path) -> None:
    """A lab script, run here on the tree instead of the node's /sys/class/infiniband."""
    from provision_lab import rdma as lab_rdma

    script = script.replace(lab_rdma.NODE_RDMA, str(staged)).replace(lab_rdma.SYS_CLASS_IB, str(live))
    subprocess.run(["sh", "-c", script], check=True, capture_output=True, timeout=30)


def causes(live: Path) -> list[tuple[str, str, tuple[str, ...], list[str]]]:
    """verify's findings on the tree: (check, found, about, its consequences' found), one per cause."""
    from provision.verify import Failure, by_cause

    verdict_ = verdict(CHECK, node(parse_rdma_ports(batch(live))))
    failures = [Failure(NAME, f.expected, f.found, f.fix, list(f.because), list(f.about), f.severity)
                for f in (verdict_.findings if isinstance(verdict_, CheckFailed) else [])]
    return [(c.failure.check, c.failure.found, tuple(c.failure.about), [f.found for f in c.consequences])
            for c in by_cause(failures)]


def test_a_lab_nodes_ports_pass_at_power_on_and_each_drill_is_one_finding_naming_its_port(tmp_path):
    from provision_lab import rdma as lab_rdma

    staged, live = lab_tree(tmp_path)
    ports = parse_rdma_ports(batch(live))
    assert [(p.name, p.state, p.phys_state, p.rate_text, p.link_layer) for p in ports] == [
        ("mlx5_0 port 1", "ACTIVE", "LinkUp", "100 Gb/sec (4X EDR)", "InfiniBand"),
        ("mlx5_1 port 1", "ACTIVE", "LinkUp", "100 Gb/sec (4X EDR)", "InfiniBand")]
    assert causes(live) == []

    on_tree(lab_rdma.fault_script("ib-down", "mlx5_1:1"), staged, live)
    assert causes(live) == [(NAME, "mlx5_1 port 1: state DOWN, physical state Polling; counted since boot: "
                                   "link_downed 1", ("mlx5_1:1",), [])]  # the pulled cable counted, in its finding
    on_tree(lab_rdma.restore_script(), staged, live)
    assert causes(live) == []

    on_tree(lab_rdma.fault_script("ib-slow", "mlx5_0:1"), staged, live)
    assert causes(live) == [(NAME, "mlx5_0 port 1 at 25 Gb/s (25 Gb/sec (1X EDR))", ("mlx5_0:1",), [])]
    on_tree(lab_rdma.restore_script(), staged, live)

    on_tree(lab_rdma.fault_script("ib-errors", "mlx5_1:1"), staged, live)
    on_tree(lab_rdma.fault_script("ib-errors", "mlx5_1:1"), staged, live)  # they grow
    assert causes(live) == [(NAME, "mlx5_1 port 1: symbol_error 3040, port_rcv_errors 74", ("mlx5_1:1",), [])]
    on_tree(lab_rdma.restore_script(), staged, live)

    on_tree(lab_rdma.fault_script("ib-down", "mlx5_0:1", counted=False), staged, live)  # set up again after a boot
    assert causes(live) == [(NAME, "mlx5_0 port 1: state DOWN, physical state Polling", ("mlx5_0:1",), [])]


def test_a_lab_counter_stops_at_its_maximum_as_the_pma_counter_does(tmp_path):
    from provision_lab import rdma as lab_rdma

    staged, live = lab_tree(tmp_path, ("mlx5_0",))
    (live / "mlx5_0/ports/1/counters/symbol_error").write_text("65000\n")
    on_tree(lab_rdma.fault_script("ib-errors", "mlx5_0:1"), staged, live)
    assert (live / "mlx5_0/ports/1/counters/symbol_error").read_text() == "65535\n"


def test_the_lab_names_an_rdma_port_by_its_hca_and_refuses_one_the_node_lacks():
    from provision_lab import rdma as lab_rdma
    from provision_lab.system import LabError

    nics = [{"name": "mlx5_0", "near_gpu": 0}, {"name": "mlx5_1", "near_gpu": 2}]
    assert lab_rdma.which_port(nics, "lab-v100-1", None) == "mlx5_0:1"
    assert lab_rdma.which_port(nics, "lab-v100-1", "mlx5_1") == lab_rdma.which_port(nics, "n", "mlx5_1:1") == "mlx5_1:1"
    with pytest.raises(LabError, match="--port mlx5_2: lab-v100-1 has RDMA ports mlx5_0:1, mlx5_1:1"):
        lab_rdma.which_port(nics, "lab-v100-1", "mlx5_2")
    with pytest.raises(LabError, match=r"lab-a has no RDMA NIC \(provision_custom.lab.rdma\)"):
        lab_rdma.which_port([], "lab-a", None)


def test_lab_ib_faults_are_recorded_by_port_and_a_boot_keeps_the_cable_but_not_the_counts():
    from provision_lab import faults
    from provision_lab.model import NodeSpec

    from builders.labnodes import LabNode

    rdma = [{"name": "mlx5_0", "near_gpu": 0}, {"name": "mlx5_1", "near_gpu": 1}]
    lab_node = LabNode(NodeSpec("lab-a", 1, rdma=rdma))
    assert faults.inject(lab_node, "ib-down", None, None) == "ib-down mlx5_0:1"
    assert faults.inject(lab_node, "ib-errors", None, None, port="mlx5_1") == "ib-errors mlx5_1:1"
    assert "link_downed" in lab_node.scripts()[0] and "symbol_error" in lab_node.scripts()[1]
    recorded = ["ib-down mlx5_0:1", "ib-slow mlx5_1:1", "ib-errors mlx5_1:1"]
    lab_node.commands.clear()
    faults.after_boot(lab_node, recorded)
    assert recorded == ["ib-down mlx5_0:1", "ib-slow mlx5_1:1"]
    from provision_lab import rdma as lab_rdma
    assert lab_node.scripts() == [lab_rdma.fault_script("ib-down", "mlx5_0:1", counted=False),
                                  lab_rdma.fault_script("ib-slow", "mlx5_1:1", counted=False)]
    assert "link_downed" not in lab_node.scripts()[0]  # the cable never came up since the boot: nothing counted
