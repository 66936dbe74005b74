"""The host lock's scripts, run by a real sh on a directory of this machine, and who may take a lock over."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from dataclasses import replace

import pytest

from provision.core import hostlock
from provision.core.hostlock import Owner

from builders.connection import FakeConnection


def sh(argv: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True)


def owner_line(lock_dir) -> str:
    return (lock_dir / "owner").read_text().strip()


def elsewhere(said: str = "provision apply by ops@ci-runner pid 77 since 2026-11-24T08:00:00Z") -> Owner:
    """A run on another control machine: this one cannot judge whether its process lives."""
    return Owner(said, "0a0a0a0a0a0a", "another-machine", "another-boot", 77, "999")


def test_a_free_lock_is_taken_with_a_lease_and_the_owner_is_reported_to_the_next(tmp_path):
    lock = tmp_path / "provision.lock"
    ours = Owner.this_run("apply")
    taken = sh(hostlock.take_argv(ours, lock_dir=str(lock)))
    assert taken.returncode == 0 and taken.stdout == "taken\n"
    line = owner_line(lock)
    parsed = Owner.parse(line)
    assert replace(parsed, lease_until=None) == ours  # every field survives the trip
    assert abs(parsed.lease_until - (time.time() + hostlock.LEASE_SECONDS)) < 5
    other = sh(hostlock.take_argv(elsewhere(), lock_dir=str(lock)))
    assert other.returncode == 1 and hostlock.take_message(other.stdout) == ("held", line)
    again = sh(hostlock.take_argv(ours, lock_dir=str(lock)))  # the same run, again (a second phase)
    assert again.returncode == 0 and again.stdout == "taken\n"


def test_a_lock_judged_stale_is_taken_over_only_while_it_is_the_line_that_was_judged(tmp_path):
    lock = tmp_path / "provision.lock"
    old = elsewhere()
    sh(hostlock.take_argv(old, lock_dir=str(lock)))
    judged = owner_line(lock)
    ours = Owner.this_run("apply")
    changed = sh(hostlock.take_argv(ours, stale_line=judged + " x", lock_dir=str(lock)))
    assert changed.returncode == 1  # someone renewed or took it since: not ours to take
    over = sh(hostlock.take_argv(ours, stale_line=judged, lock_dir=str(lock)))
    assert over.returncode == 0 and hostlock.take_message(over.stdout) == ("took over", judged)
    assert Owner.parse(owner_line(lock)).run == ours.run


def test_an_expired_lease_is_taken_over_and_a_renewed_one_is_not(tmp_path):
    lock = tmp_path / "provision.lock"
    lock.mkdir()
    dead = elsewhere()
    (lock / "owner").write_text(f"{dead.line()} lease_until={int(time.time()) - 5}\n")
    ours = Owner.this_run("apply")
    over = sh(hostlock.take_argv(ours, lock_dir=str(lock)))
    assert over.returncode == 0 and hostlock.take_message(over.stdout)[0] == "took over (lease expired)"
    assert dead.said in over.stdout
    # Ours now: its lease is renewed by the heartbeat, and another machine cannot take it meanwhile.
    (lock / "owner").write_text(f"{ours.line()} lease_until={int(time.time()) - 5}\n")
    renewed = sh(hostlock.renew_argv(ours, lock_dir=str(lock)))
    assert renewed.returncode == 0 and Owner.parse(owner_line(lock)).lease_until > time.time() + 60
    assert sh(hostlock.take_argv(elsewhere(), lock_dir=str(lock))).returncode == 1
    lost = sh(hostlock.renew_argv(elsewhere(), lock_dir=str(lock)))
    assert lost.returncode == 1 and lost.stdout.startswith("lost: ")


def test_a_lock_without_a_lease_an_older_provision_wrote_is_respected(tmp_path):
    lock = tmp_path / "provision.lock"
    lock.mkdir()
    (lock / "owner").write_text("provision apply by alice@laptop pid 42\n")
    held = sh(hostlock.take_argv(Owner.this_run("apply"), lock_dir=str(lock)))
    assert held.returncode == 1
    holder = Owner.parse(hostlock.take_message(held.stdout)[1])
    assert holder.said == "provision apply by alice@laptop pid 42" and holder.gone_here() == ""


def test_an_empty_lock_left_by_a_run_killed_while_taking_it_is_taken(tmp_path):
    lock = tmp_path / "provision.lock"
    lock.mkdir()
    taken = sh(hostlock.take_argv(Owner.this_run("apply"), lock_dir=str(lock)))
    assert taken.returncode == 0 and taken.stdout.startswith("took over: an empty lock")


def test_only_the_owner_releases(tmp_path):
    lock = tmp_path / "provision.lock"
    ours = Owner.this_run("apply")
    sh(hostlock.take_argv(ours, lock_dir=str(lock)))
    sh(hostlock.release_argv(elsewhere(), lock_dir=str(lock)))
    assert lock.exists()
    sh(hostlock.release_argv(ours, lock_dir=str(lock)))
    assert not lock.exists()


def test_removing_a_lock_checks_it_is_still_the_one_shown(tmp_path):
    lock = tmp_path / "provision.lock"
    sh(hostlock.take_argv(elsewhere(), lock_dir=str(lock)))
    line = sh(hostlock.read_argv(str(lock))).stdout.strip()
    assert sh(hostlock.remove_argv(line + "x", str(lock))).stdout.startswith("changed: ")
    assert sh(hostlock.remove_argv(line, str(lock))).stdout == "removed\n" and not lock.exists()
    assert sh(hostlock.read_argv(str(lock))).stdout == ""


def test_a_holder_on_this_machine_is_stale_once_its_process_is_gone():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        live = Owner("x", "r1", hostlock.machine_id(), hostlock.boot_id(), child.pid, hostlock.process_start(child.pid))
        assert live.gone_here() == ""
        reused = Owner("x", "r1", live.machine, live.boot, child.pid, "1")
        assert reused.gone_here() == f"pid {child.pid} is another process now"
    finally:
        child.kill()
        child.wait()
    assert live.gone_here() == f"pid {child.pid} no longer runs"
    rebooted = Owner("x", "r1", live.machine, "an-earlier-boot", child.pid, live.pidstart)
    assert rebooted.gone_here() == "this machine has booted since it was taken"
    assert Owner("x", "r1", "another-machine", "b", child.pid, "1").gone_here() == ""  # not ours to judge


def test_process_start_reads_a_command_name_with_spaces_and_parentheses():
    assert hostlock.process_start(1) != "" and hostlock.process_start(2 ** 22 + 1) == ""


def test_the_heartbeat_renews_the_locks_held_while_the_run_lasts(monkeypatch):
    from provision.core.connection import CommandResult
    monkeypatch.setattr(hostlock, "HEARTBEAT_SECONDS", 0.05)
    ours, said = Owner.this_run("apply"), []
    host = FakeConnection("node1", lambda argv, stdin, timeout: CommandResult(argv, 1 if len(host.sent) == 2 else 0,
                                                                              "lost: someone else"))

    with hostlock.Heartbeat(ours, lambda: [("node1", host)], said.append):
        time.sleep(0.3)
    count = len(host.sent)
    time.sleep(0.2)
    assert count >= 3 and len(host.sent) == count  # every beat while in it, none after
    assert host.argvs()[0] == hostlock.renew_argv(ours)
    assert said == ["node1: the host lock is no longer this run's: lost: someone else"]


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="runs the script as another user")
def test_a_lock_directory_the_user_cannot_write_is_said_not_taken_for_a_holder(tmp_path):
    parent = tmp_path / "ro"
    parent.mkdir()
    parent.chmod(0o555)
    try:
        as_nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
        taken = sh([*as_nobody, *hostlock.take_argv(Owner.this_run("apply"), lock_dir=str(parent / "provision.lock"))])
        assert taken.returncode == 2 and taken.stdout == f"cannot: {parent} is not writable by nobody\n", taken
        assert hostlock.take_message(taken.stdout)[0] == "cannot"
    finally:
        parent.chmod(0o755)


def test_a_stop_while_waiting_for_a_live_lock_gives_up_at_once_instead_of_waiting_it_out(tmp_path):
    lock = tmp_path / "provision.lock"
    sh(hostlock.take_argv(elsewhere(), lock_dir=str(lock)))  # a live run on another machine holds it
    said = sh(hostlock.take_argv(Owner.this_run("apply"), lock_dir=str(lock)))
    notices: list[str] = []
    stop = []  # falsy: not stopped
    taker = hostlock.Taker(Owner.this_run("apply"), "node-1", 600, notices.append, "inv.yaml", stop)
    started = time.monotonic()
    assert taker.judge(Held(said.returncode, said.stdout)) == taker.AGAIN  # waits (a second), with one notice
    assert notices == ["node-1: waiting up to 600 s for the host lock, held by provision apply by ops@ci-runner "
                       "pid 77 since 2026-11-24T08:00:00Z"]
    stop.append(15)  # SIGTERM arrived
    assert taker.judge(Held(said.returncode, said.stdout)) == taker.STOPPED
    assert time.monotonic() - started < 5


class Held:
    """The facts batch's "lock" section as Taker.judge reads it."""

    def __init__(self, rc: int, output: str):
        self.rc, self.output = rc, output


def test_each_release_or_removal_is_a_new_generation_and_taking_the_lock_is_not(tmp_path):
    """A run that read a host and then takes its lock at once reads it again only when the generation moved:
    another run held the lock in between (its release wrote a new one), or someone removed it."""
    lock = str(tmp_path / "provision.lock")
    boot = open("/proc/sys/kernel/random/boot_id").read().strip()
    generation = lambda: sh(hostlock.generation_argv(lock)).stdout.strip()  # noqa: E731
    assert generation() == boot  # never released here since the boot
    a, b = Owner.this_run("apply"), elsewhere()
    sh(hostlock.take_argv(a, lock_dir=lock))
    assert generation() == boot  # taken: nothing changed yet
    sh(hostlock.release_argv(b, lock_dir=lock))  # not b's lock: nothing released, no new generation
    assert generation() == boot
    sh(hostlock.release_argv(a, lock_dir=lock))
    first = generation()
    assert first.startswith(f"{a.run} ") and first.endswith(boot)
    sh(hostlock.take_argv(b, lock_dir=lock))
    assert generation() == first
    sh(hostlock.remove_argv(sh(hostlock.read_argv(lock)).stdout.strip(), lock))
    assert generation() not in (first, boot) and generation().startswith("removed ")
