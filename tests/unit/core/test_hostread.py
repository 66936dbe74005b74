"""The locked read (core/hostread.py): which command comes next after a take, and how a read ends, each
command's answer given (no host, no real lock)."""

from __future__ import annotations

import threading

import pytest

from provision.core.connection import Unreachable
from provision.core.facts import Section
from provision.core.hostlock import Owner, Taker
from provision.core.hostread import Stage, after_take, first_stage, read_host

HELD = "held: provision apply by ops@elsewhere pid 77 since 2026-11-26T00:00:00Z; run=0a0a0a0a0a0a machine=m"


@pytest.mark.parametrize(("stage", "judged", "free", "same", "after"), [
    (Stage.TAKE, Taker.TAKEN, True, True, Stage.STANDS),  # nobody had the host since it was read
    (Stage.TAKE, Taker.TAKEN, True, False, Stage.READ),  # another run released it in between
    (Stage.TAKE, Taker.TAKEN, False, True, Stage.READ),  # taken only after a wait or a take-over
    (Stage.TAKE_AND_READ, Taker.TAKEN, False, False, Stage.FRESH),
    (Stage.TAKE, Taker.AGAIN, True, True, Stage.TAKE),
    (Stage.TAKE_AND_READ, Taker.AGAIN, False, False, Stage.TAKE_AND_READ),
    (Stage.TAKE, Taker.STOPPED, False, True, Stage.STOPPED),
    (Stage.TAKE_AND_READ, "another run holds the lock on this host", False, False, Stage.REFUSED),
])
def test_the_stage_after_a_take(stage, judged, free, same, after):
    assert after_take(stage, judged, free, same) is after


def test_the_first_stage_takes_the_lock_alone_only_when_the_generation_was_read():
    assert first_stage(False, None) is Stage.READ and first_stage(False, "7 boot") is Stage.READ
    assert first_stage(True, None) is Stage.TAKE_AND_READ and first_stage(True, "7 boot") is Stage.TAKE


class Host:
    """Answers each command with the next of its answers (sections by name), recording what was sent."""

    def __init__(self, *answers: dict[str, Section] | Exception):
        self.answers, self.sent = list(answers), []

    def send(self, take: list[str] | None, facts: bool) -> dict[str, Section]:
        self.sent.append(("take" if take else "no take", "facts" if facts else "no facts"))
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def taker(notices: list[str] | None = None) -> Taker:
    return Taker(Owner.this_run("apply"), "node-1", 0, (notices if notices is not None else []).append)


def test_a_lock_taken_at_once_with_the_same_generation_keeps_the_facts_read_before():
    host = Host({"lock": Section(0, "taken\n"), "lock-generation": Section(0, "7 boot\n")})
    read = read_host(host.send, taker(), "7 boot", threading.Event())
    assert read.stage is Stage.STANDS and read.ok and read.locked
    assert host.sent == [("take", "no facts")]


def test_a_generation_changed_since_the_read_reads_again_under_the_lock_now_ours():
    host = Host({"lock": Section(0, "taken\n"), "lock-generation": Section(0, "8 boot\n")},
                {"lock-generation": Section(0, "8 boot\n")})
    read = read_host(host.send, taker(), "7 boot", threading.Event())
    assert read.stage is Stage.FRESH and read.locked and read.sections["lock-generation"].output == "8 boot\n"
    assert host.sent == [("take", "no facts"), ("no take", "facts")]


def test_a_host_lost_after_its_lock_was_taken_is_lost_with_the_lock_still_counted_as_held():
    host = Host({"lock": Section(0, "taken\n"), "lock-generation": Section(0, "8 boot\n")}, Unreachable("gone"))
    taking = threading.Event()
    read = read_host(host.send, taker(), "7 boot", taking)
    assert read.stage is Stage.LOST and read.locked and read.message == "gone" and not read.ok
    assert taking.is_set()  # no take in flight any more: an abandon's release need not wait


def test_a_lock_held_by_a_live_run_past_the_wait_is_refused_with_the_way_out():
    notices: list[str] = []
    host = Host({"lock": Section(1, HELD + "\n")})
    read = read_host(host.send, taker(notices), None, threading.Event())
    assert read.stage is Stage.REFUSED and not read.locked
    assert read.message.startswith("another run holds the lock on this host (provision apply by ops@elsewhere")
    assert "provision unlock INVENTORY --limit node-1" in read.message


def test_a_take_that_did_not_answer_is_refused():
    read = read_host(Host({}).send, taker(), None, threading.Event())
    assert read.stage is Stage.REFUSED and read.message.startswith("cannot take the host lock")


def test_a_plain_read_is_one_command_with_the_facts_and_no_lock():
    host = Host({"system": Section(0, "uid=0\n")})
    read = read_host(host.send, None, None, threading.Event())
    assert read.stage is Stage.FRESH and not read.locked and host.sent == [("no take", "facts")]
