"""slurm-config plans every host's slurm.conf and gres.conf from the cluster's facts, which the engine brings up
to date before it (core/stages.py): a MIG layout its node made earlier in the same run is in the controller's copy
as in the node's own, where the facts read when the run began would have left the controller behind and
slurmctld draining the node ("gres/gpu count too low")."""

from __future__ import annotations

import textwrap

from realdata import REAL

from builders.mig import h200_mig, mig_facts
from builders.slurmnodes import head_facts, v100_node
from provision.capabilities.gpu import mig_minors
from provision.capabilities.host import HostFacts
from provision.capabilities.slurm.tasks import SlurmConfig
from provision.core.cluster import Cluster
from provision.core.stages import brought_up_to_date
from provision.inventory.load import load_inventory

CLUSTER = """
all:
  vars:
    provision_slurm: {controller: head, cluster_name: basement}
  children:
    control:
      hosts:
        head: {ansible_host: 10.0.0.1}
    gpu:
      hosts:
        gpu-1: {ansible_host: 10.0.0.11, provision_gpu: {mig: [3g.71gb, 3g.71gb]}}
"""


def h200_node(layout: bool) -> HostFacts:
    """gpu-1 with GPU0 an H200: whole before the run (MIG off), with two 3g.71gb slices once the run made them
    (their device files from the real mig-minors table)."""
    facts = v100_node("gpu-1")
    facts.nvidia.gpus[0].name = "NVIDIA H200"
    facts.nvidia.gpus[0].mig_mode = layout
    if layout:
        facts.mig = mig_facts(h200_mig(["3g.71gb", "3g.71gb"]))
        text = (REAL / "h200-recovery" / "mig-minors.txt").read_text()
        facts.mig.minors = mig_minors.parse_minors(text[text.index("config 1\n"):])
    return facts


def written(task: SlurmConfig, hosts, name: str, facts: HostFacts) -> dict[str, str]:
    """The Slurm files the task writes on host `name`, by file name."""
    plan = task.plan(hosts[name], facts)
    assert not (plan.failed or plan.problems or plan.skipped), plan
    return {c.write.path.rsplit("/", 1)[1]: c.write.content for c in plan.changes
            if c.write and c.write.path.endswith(".conf")}


def test_the_controller_and_the_node_write_the_same_gres_from_the_layout_the_run_made(tmp_path):
    path = tmp_path / "inventory.yaml"
    path.write_text(textwrap.dedent(CLUSTER))
    hosts = load_inventory(path).hosts
    head, before, after = head_facts(), h200_node(layout=False), h200_node(layout=True)
    task = SlurmConfig()
    task.cluster = Cluster(list(hosts.values()), {"head": head, "gpu-1": before})  # as read when the run began

    stale = written(task, hosts, "head", head)
    assert "Type=3g.71gb" not in stale["gres.conf"]  # the controller behind its node's layout
    assert "Type=3g.71gb" in written(task, hosts, "gpu-1", after)["gres.conf"]

    brought_up_to_date(task.cluster, {"head": head, "gpu-1": after}, {})  # what the engine does before the stage
    controller, node = written(task, hosts, "head", head), written(task, hosts, "gpu-1", after)
    assert controller["slurm.conf"] == node["slurm.conf"] and controller["gres.conf"] == node["gres.conf"]
    assert [line.split(" MultipleFiles=")[0] for line in node["gres.conf"].splitlines()
            if line.startswith("NodeName=")][:2] == ["NodeName=gpu-1 Name=gpu Type=3g.71gb"] * 2
    assert "gpu:3g.71gb:2" in controller["slurm.conf"]


def test_a_node_lost_during_the_run_keeps_the_controllers_files_from_being_written(tmp_path):
    path = tmp_path / "inventory.yaml"
    path.write_text(textwrap.dedent(CLUSTER))
    hosts = load_inventory(path).hosts
    head = head_facts()
    task = SlurmConfig()
    task.cluster = Cluster(list(hosts.values()), {"head": head, "gpu-1": h200_node(layout=False)})
    brought_up_to_date(task.cluster, {"head": head}, {"gpu-1": "lost during gpu-mig-layout: Connection reset"})
    plan = task.plan(hosts["head"], head)
    assert "gpu-1 was not read (lost during gpu-mig-layout: Connection reset)" in plan.failed, plan.failed
    assert not plan.changes
