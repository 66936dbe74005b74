"""A task whose plan reads other hosts' facts (Task.waits_for_peers: slurm-config) plans every host from the same,
current view: every host of the run applies the tasks before it first, and the cluster's facts are brought up to
date in between (core/stages.py). So a Slurm controller's gres is planned from a MIG layout its node made earlier
in the same run, as the node's own copy is, and slurmctld never meets a node with gres it does not expect."""

from __future__ import annotations

import signal
import textwrap
from types import SimpleNamespace

from provision.capabilities.slurm.tasks import MungeKey, SlurmConfig
from provision.commands.playbook import load_playbook
from provision.core.cluster import Cluster
from provision.core.plan import CHANGED, Change, Plan, Task
from provision.core.resources import playbook_path, templates_dir
from provision.core.results import NOT_STARTED, UNREACHABLE, TaskResult
from provision.core.run import Engine, Extensions, RunOptions
from provision.core.stages import brought_up_to_date, stages
from provision.inventory.load import load_inventory

HOSTS = ["head", "node-1", "node-2"]


class MakesLayout(Task):
    """Changes what the node reads as its layout (the MIG tasks on a GPU node)."""

    name = "layout"

    def plan_where_set(self, host, facts):
        return Plan(changes=[Change("gpu0", "layout", "none", "made")] if facts.layout == "none" else [])


class SeesPeers(Task):
    """Plans from every host's layout as the cluster says (slurm-config's gres)."""

    name = "conf"
    waits_for_peers = True

    def __init__(self):
        super().__init__()
        self.planned: list[tuple[str, dict[str, str]]] = []  # (host, the layouts its plan saw), in order

    def plan_where_set(self, host, facts):
        view = {name: f.layout for name, f in self.cluster.facts.items()}
        self.planned.append((host.name, {**view, "unread": ",".join(sorted(self.cluster.unread))}))
        return Plan(changes=[Change("conf", "file", "", str(sorted(view.items())))])


def engine(tasks: list[Task], lose: str | None = None, forks: int = 1, stop_after: str | None = None,
           locked: str | None = None) -> tuple[Engine, list[str]]:
    """An engine over HOSTS whose hosts are read and changed in memory: a node's layout is made by the 'layout'
    task (lose: that host is lost during it; stop_after: a SIGTERM once that host applied its first stage;
    locked: another run holds that host's lock once its first stage gave it back).
    Returns the engine and the order in which hosts applied stages."""
    run = Engine(tasks, RunOptions(forks=forks, notice=lambda words: None), lambda host: None,
                 Extensions(facts=None))
    order: list[str] = []

    def gather(state):
        state.facts = SimpleNamespace(layout="none" if state.host.name != "head" else "-")

    def apply_host(state, tasks):
        order.append(f"{state.host.name}:{','.join(t.name for t in tasks)}")
        for task in tasks:
            plan = task.plan(state.host, state.facts)
            if task.name == "layout" and state.host.name == lose:
                state.result.tasks.append(TaskResult(task.name, CHANGED))
                state.result.status, state.result.message = UNREACHABLE, "lost during layout: Connection reset"
                return
            if plan.changes and task.name == "layout":
                state.facts = SimpleNamespace(layout="made")  # the read after the batch
            state.result.tasks.append(TaskResult(task.name, CHANGED if plan.changes else "ok"))
        if state.host.name == stop_after:
            run.stop.request(signal.SIGTERM)

    run.gather = gather
    def read_into(state, lock):
        if state.host.name == locked and state.result.tasks:
            state.result.message = "locked by another run (apply on ops-1) for 60 s"
            return False
        return True

    run.read_into = read_into
    run.release_lock = lambda state, *args, **kwargs: None
    run.release = lambda state: None
    run.applier.apply_host = apply_host
    return run, order


def applied(conf: SeesPeers) -> dict[str, dict[str, str]]:
    """What each host's conf was applied from: its plan in phase 2, after the first plans of every host."""
    return dict(conf.planned[len(HOSTS):])


def hosts() -> list[SimpleNamespace]:
    return [SimpleNamespace(name=name, settings=SimpleNamespace()) for name in HOSTS]


def test_tasks_split_before_each_task_that_waits_for_its_peers():
    first, conf, last = MakesLayout(), SeesPeers(), MakesLayout()
    assert stages([first, conf, last], hosts()) == [[first], [conf, last]]
    assert stages([first, last], hosts()) == [[first, last]]
    assert stages([conf, first], hosts()) == [[conf, first]]  # nothing before it: one stage


def site_stages(tmp_path, slurm: str) -> list[list[str]]:
    (tmp_path / "inventory.yaml").write_text(textwrap.dedent(f"""\
        all:
          hosts:
            node-1:
              provision_gpu: {{mig: [3g.40gb, 3g.40gb]}}
              {slurm}
        """))
    host = load_inventory(str(tmp_path / "inventory.yaml")).hosts["node-1"]
    return [[task.name for task in stage] for stage in stages(load_playbook(playbook_path("site"), templates_dir()),
                                                               [host])]


def test_slurm_config_waits_for_its_peers_and_the_munge_key_does_not(tmp_path):
    """The munge key is the controller's as read before the run (its package makes a key of its own mid-run)."""
    names = site_stages(tmp_path, "provision_slurm: {controller: node-1, role: both}")
    assert len(names) == 2, names
    assert names[1][0] == "slurm-config" and "munge-key" in names[0], names
    assert {"gpu-mig-mode", "gpu-mig-layout", "nvidia-driver"} <= set(names[0]), names
    assert SlurmConfig.waits_for_peers and not MungeKey.waits_for_peers


def test_a_run_without_slurm_is_one_stage(tmp_path):
    assert len(site_stages(tmp_path, "")) == 1


def test_every_host_plans_the_conf_from_the_layouts_the_run_made_with_one_host_at_a_time():
    conf = SeesPeers()
    run, order = engine([MakesLayout(), conf], forks=1)
    results = run.run(hosts())
    made = {"head": "-", "node-1": "made", "node-2": "made", "unread": ""}
    assert applied(conf) == {"head": made, "node-1": made, "node-2": made}
    assert order == ["head:layout", "node-1:layout", "node-2:layout", "head:conf", "node-1:conf", "node-2:conf"]
    assert [[t.name for t in r.tasks] for r in results] == [["layout", "conf"]] * 3
    assert {r.status for r in results} == {CHANGED}


def test_a_host_lost_before_the_conf_is_unread_there_and_its_conf_not_started():
    conf = SeesPeers()
    run, _ = engine([MakesLayout(), conf], lose="node-2", forks=4)
    results = {r.host: r for r in run.run(hosts())}
    seen = {"head": "-", "node-1": "made", "unread": "node-2"}
    assert applied(conf) == {"head": seen, "node-1": seen}
    lost = results["node-2"]
    assert lost.status == UNREACHABLE
    assert [(t.name, t.status, t.message) for t in lost.tasks][1:] == [
        ("conf", NOT_STARTED, "not started: the host was lost")]


def test_the_cluster_after_a_stage_keeps_the_hosts_outside_the_run():
    outside, inside = SimpleNamespace(layout="none"), SimpleNamespace(layout="made")
    cluster = Cluster([], facts={"far": outside, "node-1": SimpleNamespace(layout="none"), "node-2": outside})
    brought_up_to_date(cluster, {"node-1": inside}, {"node-2": "lost during layout"})
    assert cluster.facts == {"far": outside, "node-1": inside}
    assert cluster.unread == {"node-2": "lost during layout"}


def test_a_run_stopped_between_stages_starts_no_later_stage_and_says_so():
    run, order = engine([MakesLayout(), SeesPeers()], stop_after="node-2")
    results = run.run(hosts())
    assert order == ["head:layout", "node-1:layout", "node-2:layout"]
    assert [(t.name, t.status) for r in results for t in r.tasks][1::2] == [("conf", NOT_STARTED)] * 3
    assert results[1].tasks[1].message == "not started: the run was stopped (SIGTERM)"
    assert results[1].status == CHANGED  # its layout was made


def test_a_host_whose_lock_is_taken_between_stages_says_its_later_tasks_not_started():
    run, order = engine([MakesLayout(), SeesPeers()], locked="node-1")
    node = run.run(hosts())[1]
    assert "node-1:conf" not in order
    assert [(t.name, t.status, t.message) for t in node.tasks] == [
        ("layout", CHANGED, ""), ("conf", NOT_STARTED, "not started: locked by another run (apply on ops-1) for 60 s")]
    assert node.status == "failed"
