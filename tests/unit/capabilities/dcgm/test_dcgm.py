"""DCGM from facts to plan and check: the packages for the driver's CUDA major, held; nvidia-dcgm enabled and its
host engine at the pinned version.

`dcgmi -v` as DCGM prints it (NVIDIA/DCGM dcgmi/Version.cpp, common/DcgmBuildInfo.cpp.in: "Name : value"
per build field, then "Hostengine build info:" and the engine's when it reaches one); the values are our own."""

from __future__ import annotations

import pytest
from builders.gpus import gpu
from builders.checks import checked_node, verdict

from provision.capabilities.capability import WARNING
from provision.capabilities.dcgm import checks, shown
from provision.capabilities.dcgm.facts import DcgmFacts, parse_dcgm
from provision.capabilities.dcgm.tasks import DCGM_CHECK, UNIT, Dcgm, apt_version, cuda_major
from provision.capabilities.host import HostFacts
from provision.core.facts import SystemFacts
from provision.verify.model import Node

VERSION_OUT = """\
dcgmi Version : 4.2.3
dcgmi Build ID : 14
dcgmi Build Date : 2025-05-01
dcgmi Build Type : Release
dcgmi CRC : 08a0d9624b562d1ab9ba4bbc2fa3a2da
dcgmi
dcgmi Hostengine build info:
dcgmi Version : 4.1.1
dcgmi Build ID : 7
"""
CORE, CUDA12, CUDA13 = ("datacenter-gpu-manager-4-core", "datacenter-gpu-manager-4-cuda12",
                        "datacenter-gpu-manager-4-cuda13")


def facts(packages: dict[str, str], engine: str | None = "4.2.3", unit: str = "enabled") -> HostFacts:
    return HostFacts(system=SystemFacts(os_id="ubuntu", systemd_running=True), packages=dict(packages),
                     held=sorted(packages), units={UNIT.key: unit},
                     dcgm=DcgmFacts(packages=dict(packages), held=sorted(packages), dcgmi="4.2.3", hostengine=engine))


def with_gpus(found: HostFacts, compute_cap: str) -> HostFacts:
    found.nvidia.gpus = [gpu(0, compute_cap=compute_cap)]
    return found


PINNED = {CORE: "1:4.2.3-1", CUDA13: "1:4.2.3-1"}


def node(found: HostFacts, dcgm: str = "4.2.3", version: str = "580.95.05") -> Node:
    return checked_node(found, "gpu-1", inventory_path="site.yaml", provision_driver={"version": version, "dcgm": dcgm})


def test_dcgmi_says_its_version_and_the_host_engines():
    found = parse_dcgm("pkg datacenter-gpu-manager-4-core 1:4.2.3-1 hi\npkg datacenter-gpu-manager 1:3.3.6 rc\n"
                       + VERSION_OUT)
    assert (found.dcgmi, found.hostengine, found.said) == ("4.2.3", "4.1.1", "")
    assert (found.packages, found.held) == ({CORE: "1:4.2.3-1"}, [CORE])
    alone = parse_dcgm("dcgmi Version : 4.2.3\ndcgmi Error: unable to establish a connection to the specified host: "
                       "localhost\n")
    assert (alone.hostengine, alone.said) == (None, "Error: unable to establish a connection to the specified host: "
                                                    "localhost")
    assert parse_dcgm("dcgmi dcgmi  version: 2.0.13\n").dcgmi == "2.0.13"  # DCGM 2's one line
    assert parse_dcgm("") == DcgmFacts()


@pytest.mark.parametrize(("branch", "compute_cap", "major"),
                         [(580, "9.0", 13), (580, "7.0", 12), (570, "9.0", 12), (535, "8.0", 12), (470, "7.0", 11)])
def test_the_cuda_major_follows_the_driver_branch_and_volta_stays_on_12(branch, compute_cap, major):
    assert cuda_major(branch, [gpu(0, compute_cap=compute_cap)]) == major


def test_dcgm4_installs_core_and_the_drivers_cuda_flavour_removing_the_one_before():
    found = facts({CORE: "1:4.1.1-1", CUDA12: "1:4.1.1-1"})
    plan = Dcgm().plan(node(found).inventory, found)
    (change,) = plan.changes
    install = change.commands[0]
    assert install[-3:] == [f"{CORE}=1:4.2.3-*", f"{CUDA13}=1:4.2.3-*", f"{CUDA12}-"]
    assert change.commands[-2:] == [["systemctl", "enable", "nvidia-dcgm.service"],
                                    ["systemctl", "restart", "nvidia-dcgm.service"]]
    assert change.cause == DCGM_CHECK


def test_dcgm3_is_one_package_and_volta_keeps_cuda12():
    volta = with_gpus(facts({}), "7.0")
    (change,) = Dcgm().plan(node(volta).inventory, volta).changes
    assert f"{CUDA12}=1:4.2.3-*" in change.commands[0]
    (change,) = Dcgm().plan(node(facts({}), dcgm="3.3.6").inventory, facts({})).changes
    assert change.commands[0][-1] == "datacenter-gpu-manager=1:3.3.6"


@pytest.mark.parametrize(("pin", "real", "taken"), [
    ("4.2.3", "1:4.2.3-1", True), ("4.2.3", "1:4.2.30-1", False), ("4.4.0", "1:4.4.0-1", True),
    ("3.3.6", "1:3.3.6", True), ("3.3.6", "1:3.3.60", False)])
def test_apt_is_asked_for_the_pinned_version_only(pin, real, taken):
    """NVIDIA's real versions ("datacenter-gpu-manager=1:3.3.6", "datacenter-gpu-manager-4-core=1:4.4.0-1" in
    public install scripts), matched as apt matches a version with a wildcard (fnmatch)."""
    from fnmatch import fnmatchcase
    assert fnmatchcase(real, apt_version(pin)) is taken


def test_a_pinned_dcgm_with_its_engine_running_is_left_alone_and_a_stopped_engine_started():
    assert Dcgm().plan(node(facts(PINNED)).inventory, facts(PINNED)).changes == []
    stopped = facts(PINNED, engine=None, unit="disabled")
    (change,) = Dcgm().plan(node(stopped).inventory, stopped).changes
    assert (change.before, change.commands[0]) == ("disabled, not reachable", ["systemctl", "enable", "nvidia-dcgm.service"])
    assert change.verify(facts(PINNED)) is None


def test_verify_finds_one_cause_at_a_time():
    assert verdict(checks.check_dcgm_host_engine_runs_the_pinned_version, node(facts(PINNED))) is None
    wrong = verdict(checks.check_dcgm_host_engine_runs_the_pinned_version, node(facts({CORE: "1:4.2.3-1"})))
    assert wrong.found == f"not at 4.2.3: {CUDA13} not installed"
    down = verdict(checks.check_dcgm_host_engine_runs_the_pinned_version, node(facts(PINNED, engine=None)))
    assert down.found == "dcgmi reaches no host engine" and "systemctl enable --now nvidia-dcgm" in down.fix
    old = verdict(checks.check_dcgm_host_engine_runs_the_pinned_version, node(facts(PINNED, engine="4.1.1")))
    assert old.found == "it runs 4.1.1 (started before the upgrade)" and "restart nvidia-dcgm" in old.fix


def test_facts_shows_dcgm_and_warns_when_no_host_engine_answers():
    (line,) = shown.lines(None, facts(PINNED))
    assert line.text == f"dcgm: 4.2.3 ({CORE}, {CUDA13}); host engine 4.2.3"
    (line,) = shown.lines(None, facts(PINNED, engine=None))
    assert line.parts[-1] == ("no host engine answers", WARNING)
    assert shown.lines(None, facts({})) == []
