"""DCGM with the driver (provision_driver.dcgm): its packages at the pinned version, held, and nvidia-dcgm (the host
engine, nv-hostengine) enabled and running that version.

Which packages (../shared/reference/node-lifecycle-reference.md, 9.1): DCGM 3 is one, datacenter-gpu-manager;
DCGM 4 is datacenter-gpu-manager-4-core and datacenter-gpu-manager-4-cudaNN, NN the CUDA major of the driver's
user-mode library ("users should install binaries targeting the major version of the CUDA user-mode driver that's
installed on their system", NVIDIA as quoted by Azure/azhpc-images install_dcgm.sh). Moving from one to the other,
or to another CUDA major with a new driver, removes the packages of the one before in the same apt-get.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from provision.capabilities.driver import heldback
from provision.capabilities.driver.packages import before_turing
from provision.capabilities.driver.pinned import Pin, plan_pinned
from provision.capabilities.driver.tasks import DriverTask
from provision.core.facts import UnitRef
from provision.core.plan import OK, Change, Item, Plan

if TYPE_CHECKING:  # types only
    from provision.capabilities.driver.settings import DriverSettings
    from provision.capabilities.gpu.model import GpuFacts
    from provision.capabilities.host import HostFacts
    from provision.inventory.model import Host

DCGM_CHECK = "dcgm_host_engine_runs_the_pinned_version"
UNIT = UnitRef("nvidia-dcgm.service")
DCGM3 = "datacenter-gpu-manager"
DCGM4 = "datacenter-gpu-manager-4-core"
# The first driver branch of each CUDA major: the CUDA toolkit release notes' minimum drivers (11.0: 450.36.06,
# 12.0: 525.60.13, 13.0: 580.65.06).
CUDA_BY_BRANCH = ((580, 13), (525, 12), (450, 11))
# CUDA 13 builds nothing for GPUs before Turing: there, DCGM's -cuda12 on driver 580 (NVIDIA/DCGM#254).
LAST_CUDA_BEFORE_TURING = 12
EVERY_NAME = (DCGM3, DCGM4, *(f"datacenter-gpu-manager-4-cuda{major}" for _, major in CUDA_BY_BRANCH))


def cuda_major(branch: int, gpus: list[GpuFacts]) -> int:
    """The CUDA major of a driver branch, for these GPUs; ValueError before CUDA 11's branch."""
    major = next((major for first, major in CUDA_BY_BRANCH if branch >= first), None)
    if major is None:
        raise ValueError(f"driver branch {branch} is older than any DCGM 4 supports (R450 and later)")
    return min(major, LAST_CUDA_BEFORE_TURING) if before_turing(gpus) else major


def apt_version(version: str) -> str:
    """What apt-get is asked for: NVIDIA's DCGM packages carry epoch 1, DCGM 3 no Debian revision ("1:3.3.6"),
    DCGM 4 one ("1:4.4.0-1"). Never "1:4.2.3*", which 4.2.30 matches too."""
    return f"1:{version}" if version.startswith("3.") else f"1:{version}-*"


def dcgm_pin(wanted: DriverSettings, gpus: list[GpuFacts]) -> Pin:
    """DCGM's packages at provision_driver.dcgm for the pinned driver; ValueError where there are none."""
    assert wanted.dcgm is not None  # the task is skipped otherwise
    major = int(wanted.dcgm.split(".")[0])
    if major < 3:
        raise ValueError(f"provision_driver.dcgm {wanted.dcgm}: provision installs DCGM 3 and later (2.x needs "
                         "NVIDIA's older repositories)")
    names = (DCGM3,) if major == 3 else (
        DCGM4, f"datacenter-gpu-manager-4-cuda{cuda_major(int(wanted.wanted_branch), gpus)}")
    return Pin("DCGM package", names, wanted.dcgm, apt_version(wanted.dcgm), cause=DCGM_CHECK,
               remove=tuple(name for name in EVERY_NAME if name not in names))


class Dcgm(DriverTask):
    """Playbook: `task: dcgm`: DCGM at provision_driver.dcgm (DCGM 3: datacenter-gpu-manager; 4: -4-core and
    -4-cudaNN for the pinned driver's CUDA major), from one apt-get, held (provision_driver.hold); nvidia-dcgm
    enabled, and (re)started where systemd runs, so the host engine runs the version installed."""

    name = "dcgm"
    tags = frozenset({"dcgm"})
    plans_from = frozenset({"packages", "held", "units", "dcgm", "system", "nvidia.gpus"})
    alters = frozenset({"packages", "held", "units", "dcgm"})

    def not_wanted(self, wanted: DriverSettings) -> str:
        return "" if wanted.dcgm else "provision_driver.dcgm is not set"

    def package_names(self, host: Host) -> list[str]:
        wanted = host.settings.driver
        return list(EVERY_NAME) if wanted and wanted.dcgm else []

    def unit_names(self, host: Host) -> list[UnitRef]:
        wanted = host.settings.driver
        return [UNIT] if wanted and wanted.dcgm else []

    def plan_driver(self, plan: Plan, wanted: DriverSettings, facts: HostFacts) -> None:
        try:
            pin = dcgm_pin(heldback.as_kept(wanted, facts), facts.nvidia.gpus)  # a refused driver move keeps its CUDA
        except ValueError as exc:
            plan.problems.append(str(exc))
            return
        assert wanted.dcgm is not None
        now = facts.system.systemd_running
        start = [UNIT.systemctl("enable"), *([UNIT.systemctl("restart")] if now else [])]
        plan_pinned(plan, wanted, pin, facts)
        installs = [c for c in plan.changes if c.what == f"{pin.what}s"]
        if installs:
            installs[0].commands += start
            installs[0].after += ", nvidia-dcgm enabled" + (" and restarted" if now else "")
            return
        state, engine = facts.units.get(UNIT.key, "not-found"), facts.dcgm.hostengine
        if state == "enabled" and (not now or engine == wanted.dcgm):
            plan.unchanged.append(Item(UNIT.name, OK, "host engine", after=f"enabled, running {engine}" if now else "enabled"))
            return
        plan.changes.append(Change(
            target=UNIT.name, what="host engine", cause=DCGM_CHECK, commands=start,
            before=f"{state}, " + (f"running {engine}" if engine else "not reachable"),
            after="enabled" + (f", running {wanted.dcgm}" if now else " (starts at the next boot: no systemd runs)"),
            verify=lambda fresh: None if fresh.units.get(UNIT.key) == "enabled" and (
                not now or fresh.dcgm.hostengine == wanted.dcgm) else
            f"nvidia-dcgm {fresh.units.get(UNIT.key)}, host engine {fresh.dcgm.hostengine or 'not reachable'}"))
