"""apply --reboot on Slurm compute nodes, against a slurmctld simulated in memory that keeps a node's state as
Slurm 22.05's node_mgr.c and controller.c do for a drained node asked `scontrol reboot`: the reboot waits for
its jobs, is issued (DOWN+DRAIN+REBOOT_ISSUED, " : reboot issued"), and the node registers IDLE+DRAIN. Each
`scontrol show node` is one poll, one tick of the simulated cluster."""

from __future__ import annotations

from dataclasses import dataclass

from builders.connection import FakeConnection
from builders.hosts import host
from provision.capabilities.slurm import reboots
from provision.commands.reboot_outcome import (FAILED, LEFT_TO_SLURM, NOT_BACK, NOT_RESUMED, NOT_STARTED,
                                               REBOOTED, REFUSED, RebootOutcome, RebootTarget)
from provision.commands.slurm_reboot import SlurmReboots
from provision.commands.slurm_rollout import SlurmRollout, picked_up
from provision.core.connection import CommandResult
from provision.verify.model import Failure, Verdict


@dataclass
class Node:
    jobs: int = 0  # polls until its jobs end
    boot: int | None = 2  # polls from the reboot issued to registered again (None: never comes back)
    base: str = "IDLE"
    flags: tuple[str, ...] = ()
    reason: str = ""
    reboots: int = 0

    def line(self, name: str) -> str:
        state = "+".join((self.base, *self.flags))
        return (f"NodeName={name} Arch=x86_64 NodeAddr=10.0.0.{name[-1]} State={state} ThreadsPerCore=2"
                + (f" Reason={self.reason} [root@2026-11-28T10:00:00]" if self.reason else ""))


class Slurmctld:
    def __init__(self, **nodes: Node):
        self.nodes = {name.replace("_", "-"): node for name, node in nodes.items()}
        self.most_out = 0
        self.asked: list[str] = []

    def answer(self, argv: list[str], stdin, timeout) -> CommandResult:
        if argv == reboots.SHOW_NODES:
            self.tick()
            return CommandResult(argv, 0, "\n".join(n.line(name) for name, n in self.nodes.items()) + "\n")
        if argv[:3] == ["sh", "-c", reboots.REQUEST_SCRIPT]:
            node = self.nodes[argv[4]]
            self.asked.append(argv[4])
            node.flags = tuple(dict.fromkeys((*node.flags, "DRAIN", "REBOOT_REQUESTED")))
            node.reason = argv[5]
            return CommandResult(argv, 0, "")
        name = argv[2].removeprefix("NodeName=")
        node = self.nodes[name]
        if argv == reboots.resume_argv(name):
            node.flags, node.reason = tuple(f for f in node.flags if f != "DRAIN"), ""
        elif argv[:4] == ["scontrol", "update", f"NodeName={name}", "State=DRAIN"]:
            node.flags = (*node.flags, "DRAIN")
        else:
            raise AssertionError(argv)
        return CommandResult(argv, 0, "")

    def tick(self) -> None:
        for node in self.nodes.values():
            if "REBOOT_REQUESTED" in node.flags:
                node.jobs -= 1
                node.base = "MIXED" if node.jobs > 0 else "IDLE"
                if node.jobs <= 0:  # _queue_reboot_msg: idle now, the reboot is issued
                    node.base, node.reboots = "DOWN", node.reboots + 1
                    node.flags = ("DRAIN", "REBOOT_ISSUED")
                    node.reason += " : reboot issued"
            elif "REBOOT_ISSUED" in node.flags and node.boot is not None:
                node.boot -= 1
                if node.boot <= 0:  # registered: next_state unset, DRAIN kept (validate_node_specs)
                    node.base, node.flags = "IDLE", ("DRAIN",)
        self.most_out = max(self.most_out, sum("DRAIN" in n.flags or n.base == "DOWN" for n in self.nodes.values()))


def rollout(ctld: Slurmctld, verdicts: dict[str, str] | None = None, **options) -> tuple[SlurmRollout, dict]:
    seen: dict[str, list] = {"converged": [], "verified": [], "said": []}

    def converge(hosts):
        seen["converged"].append([h.name for h in hosts])
        return []

    def check(hosts):
        seen["verified"].append([h.name for h in hosts])
        return {h.name: Verdict(h.name, (verdicts or {}).get(h.name, "pass"), failures=[
            Failure("gpus_are_present", "4 GPUs", "3 GPUs")] if (verdicts or {}).get(h.name) == "fail" else [])
                for h in hosts}

    slurm = SlurmReboots(host("head"), lambda h: FakeConnection(h.name, ctld.answer), seen["said"].append, poll=0)
    return SlurmRollout(slurm, converge, check, notice=seen["said"].append, **{"timeout": 5.0, **options}), seen


def todo(*names: str) -> list[tuple[RebootTarget, RebootOutcome]]:
    reasons = ["driver 580.159.04 is installed, 570.195.03 is loaded"]
    return [(RebootTarget(host(n, address=f"10.0.0.{n[-1]}"), reasons), RebootOutcome(n, reasons)) for n in names]


def test_serial_one_hands_one_node_at_a_time_to_slurm_and_resumes_each_after_verify():
    ctld = Slurmctld(gpu_1=Node(jobs=3), gpu_2=Node(jobs=1), gpu_3=Node())
    roll, seen = rollout(ctld, serial=1)
    work = todo("gpu-1", "gpu-2", "gpu-3")
    roll.run(work)
    outcomes = [o for _, o in work]
    assert [(o.status, o.batch, o.via) for o in outcomes] == [(REBOOTED, n, "slurm") for n in (1, 2, 3)]
    assert all(o.message == "verify passed: resumed in Slurm" for o in outcomes)
    assert ctld.most_out == 1 and [n.reboots for n in ctld.nodes.values()] == [1, 1, 1]
    assert all(n.flags == () and n.reason == "" and n.base == "IDLE" for n in ctld.nodes.values())
    assert seen["converged"] == seen["verified"] == [["gpu-1"], ["gpu-2"], ["gpu-3"]]
    assert all(o.sent <= o.down <= o.back for o in outcomes)
    assert "gpu-1: reboot requested" in " ".join(seen["said"]) and "gpu-1: back, drained" in " ".join(seen["said"])


def test_serial_two_takes_two_nodes_out_of_service_at_most():
    ctld = Slurmctld(gpu_1=Node(jobs=4), gpu_2=Node(), gpu_3=Node(), gpu_4=Node())
    roll, _ = rollout(ctld, serial=2)
    work = todo("gpu-1", "gpu-2", "gpu-3", "gpu-4")
    roll.run(work)
    assert [o.status for _, o in work] == [REBOOTED] * 4 and [o.batch for _, o in work] == [1, 1, 2, 2]
    assert ctld.most_out == 2


def test_a_node_out_of_service_for_someone_elses_reason_is_left_alone_and_the_rollout_goes_on():
    ctld = Slurmctld(gpu_1=Node(flags=("DRAIN",), reason="new PSU, burn-in first"), gpu_2=Node())
    roll, _ = rollout(ctld)
    work = todo("gpu-1", "gpu-2")
    roll.run(work)
    (_, held), (_, fine) = work
    assert held.status == REFUSED and "(new PSU, burn-in first): left alone" in held.message
    assert ctld.nodes["gpu-1"].reason == "new PSU, burn-in first" and ctld.asked == ["gpu-2"]
    assert fine.status == REBOOTED


def test_a_node_that_fails_verify_stays_drained_and_stops_the_rollout():
    ctld = Slurmctld(gpu_1=Node(), gpu_2=Node())
    roll, _ = rollout(ctld, {"gpu-1": "fail"})
    work = todo("gpu-1", "gpu-2")
    roll.run(work)
    (_, failed), (_, later) = work
    assert failed.status == NOT_RESUMED
    assert failed.message == "left drained in Slurm: verify failed: gpus_are_present: 3 GPUs"
    node = ctld.nodes["gpu-1"]
    assert node.flags == ("DRAIN",) and node.reason.startswith(reboots.REBOOT_REASON_PREFIX)
    assert later.status == NOT_STARTED and later.message == "the rollout stopped: gpu-1 (not resumed)"
    assert ctld.asked == ["gpu-1"]


def test_a_node_verify_could_not_load_is_not_returned_either():
    ctld = Slurmctld(gpu_1=Node())
    roll, _ = rollout(ctld, {"gpu-1": "not tested"})
    [(_, outcome)] = work = todo("gpu-1")
    roll.run(work)
    assert outcome.status == NOT_RESUMED and outcome.message.startswith("left drained in Slurm: verify says not tested")


def test_a_reboot_that_never_registers_is_not_back_after_the_timeout_counted_from_its_issue():
    ctld = Slurmctld(gpu_1=Node(jobs=30, boot=None), gpu_2=Node())
    roll, _ = rollout(ctld, timeout=0.05, serial=1)
    roll.slurm.poll = 0.01
    work = todo("gpu-1", "gpu-2")
    roll.run(work)
    (_, lost), (_, later) = work
    assert ctld.nodes["gpu-1"].reboots == 1  # the 30 polls of jobs were waited out: only the boot is timed
    assert lost.status == NOT_BACK and lost.message.startswith("still rebooting after 0.05 s; it stays drained")
    assert later.status == NOT_STARTED and ctld.asked == ["gpu-1"]


def test_a_stopped_run_leaves_the_waiting_node_to_slurm():
    ctld = Slurmctld(gpu_1=Node(jobs=1000))
    roll, _ = rollout(ctld, stop=True)
    [(_, outcome)] = work = todo("gpu-1")
    roll.run(work)
    assert outcome.status == LEFT_TO_SLURM and "stays drained until `provision apply --reboot` picks it up" in \
        outcome.message
    assert "REBOOT_REQUESTED" in ctld.nodes["gpu-1"].flags


def test_a_later_run_picks_up_the_nodes_an_earlier_rollout_still_holds_and_reboots_none_twice():
    ours = reboots.reason_for("driver 580.159.04 is installed, 570.195.03 is loaded")
    ctld = Slurmctld(gpu_1=Node(flags=("DRAIN",), reason=ours + " : reboot issued"),  # back, never verified
                     gpu_2=Node(jobs=2, flags=("DRAIN", "REBOOT_REQUESTED"), reason=ours),  # still waiting
                     gpu_3=Node(flags=("DRAIN",), reason="provision-verify: gpus_are_present: 3 of 4"),
                     gpu_4=Node())
    roll, seen = rollout(ctld)
    hosts = [host(n, address=f"10.0.0.{n[-1]}") for n in ctld.nodes]
    found = picked_up(hosts, roll.slurm.states(), pending=set())
    assert [(t.host.name, t.reasons[0].split(" (")[0]) for t in found] == [
        ("gpu-1", "picked up: back, drained"), ("gpu-2", "picked up: reboot requested")]
    work = [(t, RebootOutcome(t.host.name, t.reasons)) for t in found]
    roll.run(work)
    assert [o.status for _, o in work] == [REBOOTED, REBOOTED] and ctld.asked == []
    assert [n.reboots for n in ctld.nodes.values()] == [0, 1, 0, 0]
    assert ctld.nodes["gpu-3"].reason.startswith("provision-verify:")  # verify's drain: not the rollout's
    assert seen["verified"] == [["gpu-1"], ["gpu-2"]]


def test_an_unreachable_controller_fails_the_batch_with_why():
    roll, _ = rollout(Slurmctld())
    roll.slurm.connect = lambda h: FakeConnection(h.name, reachable=lambda: False)
    [(_, outcome)] = work = todo("gpu-1")
    roll.run(work)
    assert outcome.status == FAILED and "Connection refused" in outcome.message
