"""The pinned package sets (driver/pinned.py) refresh apt's lists as a preparing command (Change.prepare), not each
in its own commands: a driver move with fabric manager, the container toolkit and DCGM plans one apt-get update
for the host's run (core/apply.py runs it once)."""

from __future__ import annotations

from builders.facts import facts
from builders.gpus import gpus
from builders.hosts import host
from provision.capabilities.containers.tasks import ContainerToolkit
from provision.capabilities.dcgm.tasks import Dcgm
from provision.capabilities.driver.facts import DriverFacts
from provision.capabilities.driver.tasks import NvidiaDriver
from provision.capabilities.fabric.facts import FabricFacts
from provision.capabilities.fabric.tasks import FabricManager
from provision.capabilities.system.apt import APT_UPDATE
from provision.core.apply import preparing
from provision.core.facts import SystemFacts

OLD = {"nvidia-driver-570": "570.195.03-1provision1"}  # the branch the host moves from


def hgx_on_570():
    """An HGX H100 node on driver 570 with nothing else of the stack installed."""
    return facts(gpus=gpus(8, "H100"), system=SystemFacts(uid=0, os_id="debian", systemd_running=True),
                 packages=dict(OLD), held=list(OLD), driver=DriverFacts(loaded="570.195.03", packages=dict(OLD),
                                                                          held=list(OLD)),
                 fabric=FabricFacts(nvswitches=["0", "1", "2", "3"]))


def test_a_driver_move_with_fabric_manager_toolkit_and_dcgm_plans_one_apt_get_update():
    node = host("hgx-1", provision_driver={
        "version": "580.159.04", "source": "local", "repository": "deb [trusted=yes] file:/srv/provision-lab/apt ./",
        "packages": ["nvidia-driver-{branch}"], "container_toolkit": "1.17.8", "dcgm": "4.2.3"})
    found = hgx_on_570()
    plans = {task.name: task.plan(node, found) for task in (NvidiaDriver(), FabricManager(), ContainerToolkit(), Dcgm())}
    installs = {name: [c for c in plan.changes if c.prepare] for name, plan in plans.items()}
    assert all(len(changes) == 1 for changes in installs.values()), plans  # each set moves, in one apt-get
    changes = [change for plan in plans.values() for change in plan.changes]
    assert preparing(changes) == [tuple(APT_UPDATE)]
    assert not [argv for change in changes for argv in change.commands if argv == APT_UPDATE]
