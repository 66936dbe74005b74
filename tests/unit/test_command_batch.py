"""A task's setters go to a host as one command: each change in order, stopping at its own first failure."""

from __future__ import annotations

from provision.connection import LocalConnection
from provision.engine import Engine


def test_changes_run_in_one_command_and_a_failure_stops_only_its_own_change(tmp_path):
    conn = LocalConnection("here")
    log = tmp_path / "log"
    errors = Engine.run_batch(conn, [
        [["sh", "-c", f"echo a >> {log}"], ["sh", "-c", f"echo b >> {log}"]],
        [["sh", "-c", "echo 'Unable to set: bad value'; exit 3"], ["sh", "-c", f"echo never >> {log}"]],
        [["sh", "-c", f"printf 'no newline' && echo c >> {log}"]],
    ])
    assert conn.commands_run == 1
    assert errors[0] is None and errors[2] is None
    assert errors[1] == "`sh -c echo 'Unable to set: bad value'; exit 3` exited 3: Unable to set: bad value"
    assert log.read_text() == "a\nb\nc\n"


def test_hostile_words_stay_words(tmp_path):
    marker = tmp_path / "pwned"
    [error] = Engine.run_batch(LocalConnection("here"), [[["echo", f"$(touch {marker}); `touch {marker}`"]]])
    assert error is None and not marker.exists()
