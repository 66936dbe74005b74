"""recover stopped by Ctrl-C or SIGTERM (commands/recover.py, core/stopping.py): the step in flight ends, no step
and no verify starts after it, a wait for jobs or for Slurm's reboot ends at once, each node is left as it is and
says so, and the run exits 128 + the signal. The steps stood in for; the waits are recover's own."""

from __future__ import annotations

import signal
import threading
from pathlib import Path

from builders.facts import facts
from builders.gpus import gpus
from builders.hosts import host
from builders.slurmctld import Controller

from provision.capabilities.slurm import reboots
from provision.commands import recover
from provision.commands.exit_codes import exit_help, recover_status
from provision.commands.recovery.ladder import Step, next_step
from provision.commands.run import Target
from provision.core.checks import REBOOT, RESET
from provision.core.connection import SSHOptions
from provision.core.run import RunOptions
from provision.core.runlog import RunLog
from provision.verify import FAIL, PASS, Verdict
from provision.verify.model import Failure

SLURM = {"controller": "head"}


def failing(name: str, remedy: str = RESET) -> Verdict:
    return Verdict(name, FAIL, failures=[Failure("no_gpu_asks_for_recovery", "no recovery action",
                                                 "GPU Recovery Action: Reset", about=["0000:18:00"], remedy=remedy)])


class Stopped(recover.Ladder):
    """The ladder over scripted verdicts, one node at a time; the first step done asks the run to stop, as a
    Ctrl-C in its middle would (`by`: the signal sent to this process, or None: asked directly)."""

    def __init__(self, log: Path, verdicts: dict[str, list[Verdict]], by: int | None = None):
        hosts = [host(n) for n in verdicts]
        super().__init__(Target("inventory.yaml", hosts, hosts), [], RunOptions(forks=1), SSHOptions(),
                         RunLog(log, "recover", "inventory.yaml"), recover.Options())
        self.verdicts, self.by, self.done, self.looked = verdicts, by, [], 0

    def look(self, hosts):
        self.looked += 1
        return {h.name: (facts(gpus=gpus(2, "H100")), self.verdicts[h.name].pop(0)) for h in hosts}

    def slurm_node(self, host):
        return None

    def resume(self, host):
        return ""

    def do(self, host, facts, step: Step):
        self.done.append((host.name, step.action))
        if self.by is None:
            self.stop.request(signal.SIGINT)
        else:  # to the main thread, which catches it (the step runs in a worker, as recover's steps do)
            signal.pthread_kill(threading.main_thread().ident or 0, self.by)
        return "reset 0000:18:00.0", True, ""


def test_a_stop_mid_step_lets_the_step_end_and_starts_nothing_after_it(tmp_path) -> None:
    ladder = Stopped(tmp_path / "runs.jsonl", {"gpu-1": [failing("gpu-1")], "gpu-2": [failing("gpu-2")]})
    first, second = ladder.run()
    assert ladder.done == [("gpu-1", "reset")] and ladder.looked == 1  # no verify after the stop either
    assert first.status == second.status == recover.STOPPED
    assert first.message == ("the run was stopped (SIGINT) after its reset, before the verify after it: a later "
                             "recover verifies it and goes on")
    assert [(s.action, s.ok) for s in first.steps] == [("reset", True)]
    assert second.message == "the run was stopped (SIGINT) before its step: not touched" and not second.steps


def test_sigterm_stops_it_and_the_handlers_are_given_back(tmp_path) -> None:
    before = signal.getsignal(signal.SIGTERM)
    ladder = Stopped(tmp_path / "runs.jsonl", {"gpu-1": [failing("gpu-1"), Verdict("gpu-1", PASS)]},
                     by=signal.SIGTERM)
    [node] = ladder.run()
    assert (ladder.stop.signum, node.status, ladder.looked) == (signal.SIGTERM, recover.STOPPED, 1)
    assert node.message.startswith("the run was stopped (SIGTERM) after its reset")
    assert signal.getsignal(signal.SIGTERM) is before


class OnSlurm(recover.Ladder):
    def __init__(self, tmp_path: Path):
        node = host("gpu-1", provision_slurm=SLURM)
        super().__init__(Target("inventory.yaml", [node], [node, host("head", provision_slurm=SLURM)]), [],
                         RunOptions(), SSHOptions(), RunLog(tmp_path / "runs.jsonl", "recover", "inventory.yaml"),
                         recover.Options(poll=0))
        self.slurmctld = Controller("ALLOCATED", busy_for=10**6, on_read=self.interrupted)

    def controller(self, host):
        return self.slurmctld

    def interrupted(self, slurmctld: Controller) -> None:
        """A Ctrl-C once the node is drained, while recover waits for its jobs."""
        if slurmctld.asked:
            self.stop.request(signal.SIGINT)


def test_a_stop_while_the_jobs_run_leaves_the_node_drained_and_says_so(tmp_path) -> None:
    ladder = OnSlurm(tmp_path)
    said, status = ladder.drain(ladder.target.hosts[0], next_step(failing("gpu-1")), wait=True)
    assert status == recover.STOPPED
    assert said == ("drained; the run was stopped (SIGINT) while its jobs still ran (State=ALLOCATED+DRAIN): "
                    "recover again to go on")
    assert ladder.slurmctld.node.reason.startswith("provision-verify: recover reset: ")  # ours: a later run resumes


def test_a_stop_while_slurm_waits_to_reboot_leaves_the_reboot_to_slurm(tmp_path) -> None:
    ladder = OnSlurm(tmp_path)
    ladder.stop.request(signal.SIGTERM)
    step = next_step(failing("gpu-1", REBOOT))
    said, ok, status = ladder.reboot(ladder.target.hosts[0], facts(gpus=gpus(2, "H100")), step)
    assert (ok, status) == (False, recover.STOPPED)
    assert said.startswith(f"asked of Slurm ({reboots.REQUESTED}); the run was stopped (SIGTERM): Slurm reboots it "
                           "once its jobs end")


def test_a_stopped_run_exits_128_plus_the_signal_and_recover_help_says_so() -> None:
    fine = (recover.PASSES, recover.RECOVERED)
    assert recover_status([recover.STOPPED], recover.UNREACHED, recover.PLANNED, fine, stopped=signal.SIGINT) == 130
    assert recover_status([recover.STOPPED], recover.UNREACHED, recover.PLANNED, fine) == 1
    assert "130" in exit_help("recover") and "143" in exit_help("recover")


def test_a_later_recover_leaves_a_reboot_slurm_still_owes_to_slurm(tmp_path) -> None:
    """A reboot a stopped recover asked of Slurm: the next recover neither resets nor resumes the node under it."""
    ladder = OnSlurm(tmp_path)
    ladder.slurmctld = Controller("ALLOCATED", "DRAIN", "REBOOT_REQUESTED",
                                  reason=reboots.reason_for("recover: no_gpu_is_lost: gone (remedy reboot)"))
    recovery = recover.Recovery("gpu-1")
    assert ladder.decide(ladder.target.hosts[0], failing("gpu-1"), recovery) is None
    assert recovery.status == recover.WAITING and ladder.slurmctld.asked == []
    assert recovery.message.startswith(f"Slurm node gpu-1: {reboots.REQUESTED} (provision-reboot: recover: ")


def test_every_engine_of_the_run_stops_with_it(tmp_path) -> None:
    """The apply of a step, the read, the GPU settings after a reset: one Stop, not yet signalled (and so false)
    when they are made."""
    ladder = Stopped(tmp_path / "runs.jsonl", {"gpu-1": []})
    assert ladder.engine().stop is ladder.stop and ladder.engine([]).stop is ladder.stop
