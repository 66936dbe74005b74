"""A batch's changes go to a host as one command: each change in order, stopping at its own first failure."""

from __future__ import annotations

from provision.core.connection import LocalConnection
from provision.core.apply import Step, run_batch

from builders.connection import FakeConnection, cut_off, gone


def steps(command_lists: list[list[list[str]]]) -> list[list[Step]]:
    return [[Step(argv) for argv in commands] for commands in command_lists]


def test_changes_run_in_one_command_and_a_failure_stops_only_its_own_change(tmp_path):
    conn = LocalConnection("here")
    log = tmp_path / "log"
    errors, lost, printed = run_batch(conn, steps([
        [["sh", "-c", f"echo a >> {log}"], ["sh", "-c", f"echo b >> {log}"]],
        [["sh", "-c", "echo 'Unable to set: bad value'; exit 3"], ["sh", "-c", f"echo never >> {log}"]],
        [["sh", "-c", f"printf 'no newline' && echo c >> {log}"]],
    ]))
    assert conn.commands_run == 1 and lost is None
    assert errors[0] is None and errors[2] is None
    assert errors[1] == "`sh -c echo 'Unable to set: bad value'; exit 3` exited 3: Unable to set: bad value"
    assert log.read_text() == "a\nb\nc\n"
    assert printed[2] == "no newline"  # what a change printed, kept for its explanation (a setter's warning)


def test_hostile_words_stay_words(tmp_path):
    marker = tmp_path / "pwned"
    [error], _, _ = run_batch(LocalConnection("here"), steps([[["echo", f"$(touch {marker}); `touch {marker}`"]]]))
    assert error is None and not marker.exists()


def test_a_batch_cut_off_by_a_lost_host_says_which_changes_ran_and_which_did_not_finish():
    batch = steps([[["true"]], [["true"]], [["true"]], [["true"]]])
    errors, lost, _ = run_batch(FakeConnection("cut", cut_off(lines=7)), batch)  # two whole sections, the third begun
    assert errors[:2] == [None, None] and lost is None  # the re-read that follows says the host is gone
    assert errors[2] == "unknown whether `true` finished: the connection closed while it ran"
    # Its start never came back; it may still have run (output lost with the connection): unknown, never "not run"
    assert errors[3] == "unknown whether `true` ran: the connection closed before its output came back"
    errors, lost, _ = run_batch(FakeConnection("cut", gone("lost the connection to cut: Socket is closed")), batch)
    assert lost == "lost the connection to cut: Socket is closed"
    assert errors == ["unknown whether `true` ran: the host was lost before its output came back"] * 4


def test_a_change_run_with_another_has_its_outcome_and_runs_nothing_itself(tmp_path):
    """One nvidia-smi call for every GPU (gpu/tasks.py one_call_for_every_gpu): the others' changes carry no
    command; the call's error, and what it printed, are theirs too."""
    from provision.core.apply import apply_changes
    from provision.core.plan import Change

    conn = LocalConnection("here")
    failing = Change("GPU0", "power limit", "250", "200", commands=[["sh", "-c", "echo 'Not supported'; exit 3"]])
    others = [Change(f"GPU{i}", "power limit", "250", "200", runs_with=failing) for i in (1, 2)]
    ran = apply_changes(conn, [failing, *others])
    errors = ran.errors
    assert conn.commands_run == 1 and ran.lost is None
    assert errors[0] == errors[1] == errors[2] and errors[0].endswith("exited 3: Not supported")
    ok = Change("GPU0", "power limit", "250", "200", commands=[["sh", "-c", "echo 'All done.'"]])
    ran = apply_changes(conn, [ok, Change("GPU1", "power limit", "250", "200", runs_with=ok)])
    assert ran.errors == [None, None] and ran.printed == ["All done.", "All done."]
