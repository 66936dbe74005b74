"""Fabric manager and DCGM held back with a refused driver move (driver/heldback.py): on a host whose next kernel
would lack the new driver's module, they stay with the driver the host keeps, never move to a driver that is not
going to be installed; the other hosts' follow the inventory's driver as before."""

from __future__ import annotations

from builders.facts import facts
from builders.gpus import gpus
from builders.hosts import host

from provision.capabilities.dcgm.facts import DcgmFacts
from provision.capabilities.dcgm.tasks import Dcgm
from provision.capabilities.driver.facts import DriverFacts
from provision.capabilities.driver.nextboot import NextBoot
from provision.capabilities.fabric.facts import FabricFacts
from provision.capabilities.fabric.tasks import FabricManager
from provision.capabilities.system.daemons import DaemonProcess
from provision.core.facts import SystemFacts
from provision.core.plan import OK

KEPT, MOVED = "580.159.04", "570.195.03"
NEW, OLD = "6.1.0-40-amd64", "6.1.0-27-amd64"
DRIVER = {"nvidia-driver-580": f"{KEPT}-1provision1"}
FM = {"nvidia-fabricmanager-580": f"{KEPT}-1provision1", "libnvidia-nscq-580": f"{KEPT}-1provision1"}
DCGM = {"datacenter-gpu-manager-4-core": "1:4.2.3-1", "datacenter-gpu-manager-4-cuda13": "1:4.2.3-1"}
INVENTORY = {"version": MOVED, "source": "local", "repository": "deb [trusted=yes] file:/srv/provision-lab/apt ./",
             "packages": ["nvidia-driver-{branch}"], "dcgm": "4.2.3"}


def hgx(fabric: dict[str, str], stranded: bool = True):
    """An HGX H100 node at driver 580 (held, loaded), with these fabric manager packages held, its unit enabled and
    running, DCGM 4 for CUDA 13; NEW boots next, with no module (stranded) or with one."""
    modules = {OLD: [f"/lib/modules/{OLD}/kernel/nvidia.ko"], **({} if stranded else {NEW: ["/x/nvidia.ko"]})}
    boot = NextBoot(kernels=[OLD, NEW], modules=modules)
    installed = {**DRIVER, **fabric, **DCGM}
    return facts(gpus=gpus(8, "H100", fabric_state="Completed", fabric_status="Success"), systemd=True,
                 system=SystemFacts(uid=0, os_id="ubuntu", systemd_running=True), packages=installed,
                 held=list(installed), units={"nvidia-dcgm.service": "enabled"},
                 driver=DriverFacts(loaded=KEPT, packages=dict(DRIVER), held=list(DRIVER), next_boot=boot),
                 fabric=FabricFacts(nvswitches=["0", "1"], unit="enabled", packages=dict(fabric), held=list(fabric)),
                 daemons={"nv-fabricmanage": [DaemonProcess(99, "root", 0.0)]}, dcgm=DcgmFacts(hostengine="4.2.3"))


def test_fabric_manager_stays_with_the_driver_the_host_keeps():
    plan = FabricManager().plan(host("hgx-1", provision_driver=INVENTORY), hgx(FM))
    assert plan.changes == []
    held = [item for item in plan.unchanged if item.what == "held back"]
    assert [(i.status, i.after) for i in held] == [(OK, f"driver {KEPT}'s")]
    assert held[0].message == f"the driver's move to {MOVED} is refused here (nvidia-driver says why): it stays with {KEPT}"
    assert {i.target: i.after for i in plan.unchanged if i.what == "fabric manager package"} == FM


def test_a_missing_fabric_manager_is_installed_at_the_driver_kept_not_at_the_one_refused():
    (install, *_) = FabricManager().plan(host("hgx-1", provision_driver=INVENTORY), hgx({})).changes
    assert install.commands[0][-2:] == [f"nvidia-fabricmanager-580={KEPT}-*", f"libnvidia-nscq-580={KEPT}-*"]


def test_where_the_move_goes_ahead_fabric_manager_follows_the_inventorys_driver():
    (out, install, *_) = FabricManager().plan(host("hgx-1", provision_driver=INVENTORY), hgx(FM, stranded=False)).changes
    assert out.target == "libnvidia-nscq-580 nvidia-fabricmanager-580"
    assert install.commands[0][-2:] == [f"nvidia-fabricmanager-570={MOVED}-*", f"libnvidia-nscq-570={MOVED}-*"]


def test_dcgm_keeps_the_cuda_flavour_of_the_driver_kept():
    inventory = host("hgx-1", provision_driver=INVENTORY)
    assert not Dcgm().plan(inventory, hgx(FM)).changes  # cuda13, 580's
    (move,) = [c for c in Dcgm().plan(inventory, hgx(FM, stranded=False)).changes if c.what == "DCGM packages"]
    assert "datacenter-gpu-manager-4-cuda12=1:4.2.3-*" in move.commands[0]  # 570's CUDA 12
