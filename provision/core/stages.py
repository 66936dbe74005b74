"""The stages of a run's changes: the tasks split before each task that waits for its peers
(Task.waits_for_peers), whose plan reads other hosts' facts (Cluster.facts). Every host of the run applies one
stage before any host starts the next, and the cluster's facts are brought up to date in between, so such a task
plans every host from the same, current view of the others: a Slurm controller's slurm.conf from its nodes as
this run left them (a MIG layout made earlier in the run), as each node's own copy is. Pure: no I/O."""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from provision.core.cluster import Cluster

if TYPE_CHECKING:  # the types a run is given: never imported
    from provision.capabilities.host import HostFacts
    from provision.core.plan import Task
    from provision.inventory.model import Host


def stages(tasks: list[Task], hosts: Sequence[Host]) -> list[list[Task]]:
    """tasks in order, a new stage beginning at each task that waits for its peers and applies to one of the
    run's hosts (none does: one stage, and each host takes its lock once)."""
    split: list[list[Task]] = [[]]
    for task in tasks:
        if task.waits_for_peers and split[-1] and any(task.applies(host) for host in hosts):
            split.append([])
        split[-1].append(task)
    return split


def brought_up_to_date(cluster: Cluster, now: dict[str, HostFacts], lost: dict[str, str]) -> None:
    """The cluster's facts after a stage: each host of the run as read after its last changes (now), a host lost
    during its changes unread (lost: name -> why), since what its last changes did is not known. The hosts outside
    the run keep the facts read for it: the run changed nothing there."""
    for name, why in lost.items():
        cluster.facts.pop(name, None)
        cluster.unread[name] = why
    cluster.facts.update(now)
