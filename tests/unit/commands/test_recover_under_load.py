"""recover and causes that show under load (commands/recover.py Ladder.prove, recovery/ladder.py): a node that
passes idle but was drained for, or found in this run with, a finding of verify --active passes a short verify
under load (slurm_rollout.verifier, the rollout's own) before it returns to service. verify and the steps stood
in for: the lab's verify --active tests load real nodes."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from builders.facts import facts
from builders.gpus import gpus
from builders.hosts import host

from provision.capabilities.slurm.facts import SlurmNodeState
from provision.commands import recover
from provision.commands.recovery.ladder import UNDER_LOAD, showed_under_load
from provision.commands.run import Target
from provision.commands import verify as verify_command
from provision.commands.slurm_rollout import ACTIVE_SECONDS, verifier
from provision.core.checks import CRITICAL
from provision.core.connection import SSHOptions
from provision.core.run import RunOptions
from provision.core.runlog import RunLog
from provision.core.stopping import Stop
from provision.verify import FAIL, NOT_TESTED, PASS, Verdict
from provision.verify.model import Failure
from provision.verify.switch import check_names

# the reason `verify --active --drain` leaves (commands/drain.py drain_reason)
UNDER_LOAD_DRAIN = f"provision-verify: {UNDER_LOAD}: GPU 1 (0000:1a:00) lost under load after 4.2 s"


def lost_under_load(name: str) -> Verdict:
    return Verdict(name, FAIL, failures=[Failure(UNDER_LOAD, "the node answering through the load",
                                                 "GPU 1 fell off the bus after 4.2 s", about=["0000:1a:00"],
                                                 severity=CRITICAL)])


class Loaded(recover.Ladder):
    """Idle verdicts scripted per pass; the node drained in Slurm for `reason`; the steps recorded."""

    def __init__(self, log: Path, idle: list[Verdict], reason: str = "", **told):
        node = host("gpu-1")
        super().__init__(Target("inventory.yaml", [node], [node]), [], RunOptions(), SSHOptions(),
                         RunLog(log, "recover", "inventory.yaml"), recover.Options(**told))
        self.idle, self.done, self.resumed = idle, [], []
        state = SlurmNodeState("gpu-1", ("IDLE", "DRAIN"), reason) if reason else SlurmNodeState("gpu-1", ("IDLE",))
        self.facts = facts(gpus=gpus(2, "H100"), slurm_node=state)

    def look(self, hosts):
        return {h.name: (self.facts, self.idle.pop(0)) for h in hosts}

    def slurm_node(self, host):
        return None

    def resume(self, host):
        self.resumed.append(host.name)
        return "resumed in Slurm"

    def do(self, host, facts, step):
        self.done.append(step.action)
        return f"{step.action} done", True, ""


class Loads:
    """verify under load as recover asks it of slurm_rollout.verifier: the verdicts it gives, one per load, and
    the hosts loaded with the stop passed; `interrupted`: a Ctrl-C comes during the load."""

    def __init__(self) -> None:
        self.verdicts: list[Verdict] = []
        self.asked: list[tuple[list[str], object]] = []
        self.interrupted = False

    def verifier(self, target, tasks, options, ssh, stop=None):
        def check(hosts):
            self.asked.append(([h.name for h in hosts], stop))
            if self.interrupted:  # verify's own catching() on the run's Stop: the signal sets it
                stop.request(signal.SIGINT)
                return {h.name: Verdict(h.name, NOT_TESTED, not_tested=["load: stopped by SIGINT after 3 s"])
                        for h in hosts}
            return {h.name: self.verdicts.pop(0) for h in hosts}
        return check


@pytest.fixture
def loads(monkeypatch) -> Loads:
    script = Loads()
    monkeypatch.setattr(recover, "verifier", script.verifier)
    return script


def test_a_node_drained_under_load_is_resumed_only_after_a_load_passes(tmp_path, loads) -> None:
    loads.verdicts = [Verdict("gpu-1", PASS)]
    ladder = Loaded(tmp_path / "runs.jsonl", [Verdict("gpu-1", PASS)], reason=UNDER_LOAD_DRAIN)
    [node] = ladder.run()
    assert loads.asked == [(["gpu-1"], ladder.stop)]  # one load, stopped with the run
    assert (node.status, ladder.resumed, ladder.done) == (recover.RECOVERED, ["gpu-1"], [])
    [proof] = node.steps
    assert (proof.action, proof.ok, proof.said) == (recover.LOADED, True, "passed")
    assert proof.why.startswith(f"verify --active ({ACTIVE_SECONDS:g} s): its cause showed under load")


def test_a_cause_the_load_finds_again_takes_its_step_and_is_proved_under_load_after_it(tmp_path, loads) -> None:
    loads.verdicts = [lost_under_load("gpu-1"), Verdict("gpu-1", PASS)]
    ladder = Loaded(tmp_path / "runs.jsonl", [Verdict("gpu-1", PASS)] * 2, reason=UNDER_LOAD_DRAIN)
    [node] = ladder.run()
    assert ladder.done == ["reboot"]  # a critical finding without a remedy of its own: the reboot default
    assert [(s.action, s.ok) for s in node.steps] == [(recover.LOADED, False), ("reboot", True), (recover.LOADED, True)]
    assert node.steps[0].said.startswith(f"verify failed: {UNDER_LOAD}: GPU 1 fell off the bus")
    assert (node.status, ladder.resumed, len(loads.asked)) == (recover.RECOVERED, ["gpu-1"], 2)


def test_a_load_that_could_not_run_proves_nothing_and_the_node_stays_out(tmp_path, loads) -> None:
    untested = Verdict("gpu-1", NOT_TESTED, not_tested=["load: a process holds GPU 0"])
    loads.verdicts = [untested]
    ladder = Loaded(tmp_path / "runs.jsonl", [Verdict("gpu-1", PASS)], reason=UNDER_LOAD_DRAIN)
    [node] = ladder.run()
    assert (node.status, ladder.resumed) == (recover.UNPROVEN, [])
    assert node.message == "not resumed: verify says not tested: load: a process holds GPU 0"


def test_check_says_the_load_it_would_run_and_runs_none(tmp_path, loads) -> None:
    ladder = Loaded(tmp_path / "runs.jsonl", [Verdict("gpu-1", PASS)], reason=UNDER_LOAD_DRAIN, check=True)
    [node] = ladder.run()
    assert (node.status, loads.asked, ladder.resumed) == (recover.PLANNED, [], [])
    assert node.plan.startswith("verify --active (10 s): its cause showed under load")


@pytest.mark.parametrize("reason", ["", "provision-verify: no_xid_errors_since_boot: Xid 79",
                                    f"RMA 4711 ({UNDER_LOAD}: seen by a person)"])
def test_a_node_whose_cause_showed_idle_is_not_loaded(tmp_path, loads, reason) -> None:
    ladder = Loaded(tmp_path / "runs.jsonl", [Verdict("gpu-1", PASS)], reason=reason)
    [node] = ladder.run()
    assert loads.asked == [] and node.status == recover.PASSES


def test_a_stop_during_the_load_stops_recover(tmp_path, loads) -> None:
    loads.interrupted = True
    ladder = Loaded(tmp_path / "runs.jsonl", [Verdict("gpu-1", PASS)], reason=UNDER_LOAD_DRAIN)
    [node] = ladder.run()
    assert (node.status, ladder.resumed, ladder.stop.signum) == (recover.STOPPED, [], signal.SIGINT)
    assert node.message == ("the run was stopped (SIGINT) during its verify --active: not resumed; a later recover "
                            "loads it again")


def test_the_load_is_verify_active_on_the_runs_stop(monkeypatch) -> None:
    """slurm_rollout.verifier hands recover's Stop to verify, whose engine then stops with the run."""
    asked = {}

    def engine_for(target, tasks, options, ssh, log=None, stop=None):
        asked["stop"] = stop
        raise InterruptedError("enough: the engine was asked for")

    monkeypatch.setattr(verify_command, "engine_for", engine_for)
    stop = Stop(lambda message: None)
    node = host("gpu-1")
    with pytest.raises(InterruptedError):
        verifier(Target("inventory.yaml", [node], [node]), [], RunOptions(), SSHOptions(), stop)([node])
    assert asked["stop"] is stop


def test_under_load_is_a_check_verify_knows_and_its_consequences_count() -> None:
    assert UNDER_LOAD in check_names()
    follows = Failure("no_gpu_is_lost", "every GPU on the bus", "0000:1a:00 lost", because=[f"{UNDER_LOAD}:0000:1a:00"])
    assert showed_under_load(Verdict("gpu-1", FAIL, failures=[follows]))
    assert not showed_under_load(Verdict("gpu-1", FAIL, failures=[Failure("no_gpu_is_lost", "", "", because=[])]))
