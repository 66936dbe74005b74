"""recover and Slurm (commands/recover.py Ladder.drain, resume, decide): drained with provision's reason, jobs waited
for or cancelled, resumed only where provision drained, a node drained by someone else never touched. slurmctld
stood in for by a controller that keeps one node's state and records what it is asked."""

from __future__ import annotations

from pathlib import Path

from builders.hosts import host
from builders.slurmctld import Controller

from provision.commands import recover
from provision.commands.recovery.ladder import next_step
from provision.commands.run import Target
from provision.core.checks import RESET
from provision.core.connection import SSHOptions
from provision.core.run import RunOptions
from provision.core.runlog import RunLog
from provision.verify import FAIL, Verdict
from provision.verify.model import Failure

SLURM = {"controller": "head"}


class OnSlurm(recover.Ladder):
    def __init__(self, tmp_path: Path, controller: Controller, **told):
        node = host("gpu-1", provision_slurm=SLURM)
        super().__init__(Target("inventory.yaml", [node], [node, host("head", provision_slurm=SLURM)]),
                         [], RunOptions(), SSHOptions(), RunLog(tmp_path / "runs.jsonl", "recover", "inventory.yaml"),
                         recover.Options(poll=0, **told))
        self.slurmctld = controller

    def controller(self, host):
        return self.slurmctld


def reset_step():
    return next_step(Verdict("gpu-1", FAIL, failures=[Failure("no_gpu_awaits_recovery", "None", "Reset",
                                                              about=["0000:18:00"], remedy=RESET)]))


def test_a_node_is_drained_with_provisions_reason_and_its_jobs_waited_for(tmp_path) -> None:
    slurmctld = Controller("ALLOCATED", busy_for=2)
    ladder = OnSlurm(tmp_path, slurmctld)
    assert ladder.drain(ladder.target.hosts[0], reset_step(), wait=True) == ("", "")
    [drain] = slurmctld.asked
    assert drain[:4] == ["scontrol", "update", "NodeName=gpu-1", "State=DRAIN"]
    assert drain[4].startswith("Reason=provision-verify: recover reset: no_gpu_awaits_recovery: Reset")
    assert slurmctld.node.states == ("DRAIN",)  # its jobs ended


def test_jobs_that_outlast_the_wait_leave_the_node_drained_for_a_later_run(tmp_path) -> None:
    ladder = OnSlurm(tmp_path, Controller("ALLOCATED", busy_for=10**6), wait=0)
    said, status = ladder.drain(ladder.target.hosts[0], reset_step(), wait=True)
    assert status == recover.WAITING and said.startswith("drained; its jobs still run after 0 s")


def test_now_cancels_the_nodes_jobs(tmp_path) -> None:
    slurmctld = Controller("ALLOCATED")
    ladder = OnSlurm(tmp_path, slurmctld, now=True)
    ladder.drain(ladder.target.hosts[0], reset_step(), wait=True)
    assert slurmctld.asked[1] == ["scancel", "--nodelist=gpu-1"]


def test_a_node_drained_by_someone_else_is_never_touched(tmp_path) -> None:
    slurmctld = Controller("IDLE", "DRAIN", reason="RMA ticket 4711")
    ladder = OnSlurm(tmp_path, slurmctld)
    recovery = recover.Recovery("gpu-1")
    verdict = Verdict("gpu-1", FAIL, failures=[Failure("no_gpu_awaits_recovery", "None", "Reset", remedy=RESET)])
    assert ladder.decide(ladder.target.hosts[0], verdict, recovery) is None
    assert (recovery.status, slurmctld.asked) == (recover.NOT_OURS, [])
    assert ladder.resume(ladder.target.hosts[0]).startswith("left out of service: Slurm node gpu-1's reason is not")
    assert slurmctld.asked == []


def test_a_passing_node_is_resumed_only_where_it_is_out_of_service(tmp_path) -> None:
    drained = Controller("IDLE", "DRAIN", reason="provision-verify: recover reset: ...")
    assert OnSlurm(tmp_path, drained).resume(host("gpu-1", provision_slurm=SLURM)).startswith("resumed in Slurm (was: ")
    in_service = Controller("IDLE")
    assert OnSlurm(tmp_path, in_service).resume(host("gpu-1", provision_slurm=SLURM)) == "" and in_service.asked == []
