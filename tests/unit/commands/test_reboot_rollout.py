"""The rolling reboot, against hosts simulated in memory: N at a time in inventory order, back when SSH answers
without the run's marker, a host that does not come back stops the rollout, never the machine running provision."""

from __future__ import annotations

import time

from builders.hosts import host
from provision.commands import reboot
from provision.core.connection import CommandResult
from provision.commands.reboot import (
    NOT_BACK,
    NOT_STARTED,
    REBOOTED,
    REFUSED,
    RebootTarget,
    Rollout,
)
from provision.capabilities.host import HostSettings

from builders.connection import FakeConnection


class FakeHost:
    """Goes down `down_for` seconds after a reboot is sent, then answers again with /run emptied (or never)."""

    def __init__(self, down_for: float | None = 0.05, slurm: str = "IDLE"):
        self.down_for, self.marker, self.down_until, self.reboots, self.slurm = down_for, None, None, 0, slurm

    def up(self) -> bool:
        return self.down_until is None or time.monotonic() >= self.down_until

    def connection(self, name: str) -> FakeConnection:
        """A connection to it as host `name`: refused while it is down."""
        return FakeConnection(name, lambda argv, stdin, timeout: self.reply(name, argv), reachable=self.up)

    def reply(self, name: str, argv: list[str]) -> CommandResult:
        if argv[:2] == ["sh", "-c"] and "reboot" in argv[2]:
            self.marker, self.reboots = argv[-1], self.reboots + 1
            if self.down_for is None:
                self.down_until = float("inf")
            else:
                self.down_until = time.monotonic() + self.down_for
                self.marker = None  # what the boot will have done to /run
            return CommandResult(argv, 0, "", "")
        if argv[:2] == ["sh", "-c"] and "scontrol" in argv[2]:
            return CommandResult(argv, 0, f"NodeName={name} Arch=x86_64 State={self.slurm} "
                                          "Reason=driver upgrade [root@2026-11-23T16:00:00]\n", "")
        if argv == ["cat", reboot.MARKER]:
            return CommandResult(argv, 0 if self.marker else 1, f"{self.marker or ''}\n", "")
        raise AssertionError(argv)


def rollout(machines: dict[str, FakeHost], **options) -> tuple[Rollout, list]:
    said = []
    roll = Rollout(lambda host: machines[host.name].connection(host.name), poll=0.01,
                   notice=said.append, **{"timeout": 2.0, **options})
    return roll, said


def targets(*names: str, machine_id: str = "0" * 32) -> list[RebootTarget]:
    return [RebootTarget(host(name, address=f"192.0.2.{i}"), ["driver 580.159.04 is installed, 570.195.03 is loaded"],
                         machine_id) for i, name in enumerate(names, 1)]


def test_serial_one_reboots_each_host_after_the_previous_one_is_back():
    machines = {name: FakeHost(0.05) for name in ("gpu-1", "gpu-2", "gpu-3")}
    roll, said = rollout(machines, serial=1)
    outcomes = roll.run(targets(*machines))
    assert [o.status for o in outcomes] == [REBOOTED] * 3 and [o.batch for o in outcomes] == [1, 2, 3]
    for earlier, later in zip(outcomes, outcomes[1:]):
        assert earlier.back <= later.sent  # never two down at once
    assert all(o.down is not None and o.down <= o.back for o in outcomes)
    assert said[0].startswith("rebooting gpu-1 (batch 1 of 3, 1 at a time)")


def test_serial_two_reboots_pairs_together():
    machines = {name: FakeHost(0.1) for name in ("gpu-1", "gpu-2", "gpu-3")}
    roll, _ = rollout(machines, serial=2)
    outcomes = roll.run(targets(*machines))
    assert [o.batch for o in outcomes] == [1, 1, 2] and outcomes[2].sent >= max(outcomes[0].back, outcomes[1].back)


def test_a_host_that_does_not_come_back_stops_the_rollout():
    machines = {"gpu-1": FakeHost(0.05), "gpu-2": FakeHost(None), "gpu-3": FakeHost(0.05)}
    roll, _ = rollout(machines, serial=1, timeout=0.3)
    first, stuck, never = roll.run(targets(*machines))
    assert first.status == REBOOTED and stuck.status == NOT_BACK and "did not come back within 0.3 s" in stuck.message
    assert never.status == NOT_STARTED and "gpu-2 did not come back" in never.message
    assert machines["gpu-3"].reboots == 0


def test_never_the_machine_running_provision(monkeypatch):
    monkeypatch.setattr(reboot, "this_machine_id", lambda: "a" * 32)
    machines = {"gpu-1": FakeHost(), "me": FakeHost(), "local": FakeHost()}
    roll, _ = rollout(machines)
    hosts = targets("gpu-1") + targets("me", machine_id="a" * 32)
    hosts += [RebootTarget(host("local", connection="local"), ["pending"])]
    done, me, local = roll.run(hosts)
    assert done.status == REBOOTED and me.status == local.status == REFUSED
    assert "machine-id aaaaaaaa" in me.message and "local connection" in local.message
    assert machines["me"].reboots == machines["local"].reboots == 0


def test_the_run_ends_with_the_second_pass_for_the_rebooted_and_unreachable_for_the_lost():
    from provision.commands.reboot import RebootOutcome, final_results
    from provision.core.results import HostResult, exit_code

    first = [HostResult(name, "changed", reboot_pending=["pending"]) for name in ("gpu-1", "gpu-2", "gpu-3")]
    outcomes = [RebootOutcome("gpu-1", ["pending"], REBOOTED), RebootOutcome("gpu-2", ["pending"], NOT_BACK,
                                                                             "did not come back within 10 s"),
                RebootOutcome("gpu-3", ["pending"], NOT_STARTED, "the rollout stopped")]
    final = final_results(first, outcomes, [HostResult("gpu-1", "ok")])
    assert [(r.host, r.status) for r in final] == [("gpu-1", "ok"), ("gpu-2", "unreachable"), ("gpu-3", "changed")]
    assert final[1].message == "rebooted, and did not come back within 10 s"
    assert exit_code(final) == 4 | 16  # unreachable, and a reboot still pending (gpu-3): no failure
    assert exit_code(first) == 16


def test_a_slurm_node_with_jobs_is_not_rebooted_and_the_rollout_goes_on():
    from provision.capabilities.slurm.settings import SlurmSettings

    machines = {"gpu-1": FakeHost(slurm="MIXED+DRAIN"), "gpu-2": FakeHost(slurm="IDLE+DRAIN")}
    roll = Rollout(lambda h: machines[h.name].connection(h.name), busy=reboot.slurm_jobs_on, poll=0.01, timeout=2)
    hosts = targets("gpu-1", "gpu-2")
    for target in hosts:
        target.host.settings = HostSettings(slurm=SlurmSettings(controller="head"))
    busy, idle = roll.run(hosts)
    assert busy.status == REFUSED and busy.message.startswith("Slurm has jobs on it (State=MIXED+DRAIN): drain it")
    assert idle.status == REBOOTED and machines["gpu-1"].reboots == 0


def test_a_host_a_capability_refuses_is_not_rebooted_and_the_rollout_goes_on():
    machines = {name: FakeHost(0.05) for name in ("gpu-1", "gpu-2", "gpu-3")}
    roll, _ = rollout(machines, serial=1)
    hosts = targets(*machines)
    hosts[1].refusals = ["the next boot's kernel 6.1.0-40-amd64 (...) has no nvidia module: it would come back "
                         "without GPUs; fix: `dkms autoinstall -k 6.1.0-40-amd64`"]
    first, refused, last = roll.run(hosts)
    assert refused.status == REFUSED and refused.message == hosts[1].refusals[0] and machines["gpu-2"].reboots == 0
    assert first.status == last.status == REBOOTED and [first.batch, last.batch] == [1, 2]
