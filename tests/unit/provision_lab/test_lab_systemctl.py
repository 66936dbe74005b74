"""The systemctl of a lab node whose spec says systemd (provision_lab/nodeinit.py systemctl): start, restart, stop
and is-active act on the unit now, as where systemd runs, and a unit that is not there fails in systemctl's words.
On tmp_path: the unit directories, the state and the log are moved there; the unit runs as a real process."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from provision_lab import nodeinit

ENGINE = """\
[Unit]
Description=a long-running service

[Service]
ExecStart=/bin/sh -c 'echo $$ > {pids}; exec sleep 60'
"""


@pytest.fixture
def node(tmp_path: Path, monkeypatch) -> Iterator[Path]:
    units = tmp_path / "lib-systemd-system"
    units.mkdir()
    (units / "engine.service").write_text(ENGINE.format(pids=tmp_path / "pids"))
    monkeypatch.setattr(nodeinit, "UNIT_DIRS", (str(tmp_path / "etc-systemd-system"), str(units)))
    monkeypatch.setattr(nodeinit, "UNIT_STATE", str(tmp_path / "units"))
    monkeypatch.setattr(nodeinit, "LOG", str(tmp_path / "boot.log"))
    monkeypatch.setattr(nodeinit, "QUIET_LOG", True)
    yield tmp_path
    pid = nodeinit.main_pid_of("engine.service")
    if pid and nodeinit.alive(pid):
        os.killpg(pid, signal.SIGKILL)


def test_start_runs_the_unit_now_is_active_says_so_and_a_second_start_leaves_it(node: Path, capsys):
    assert nodeinit.systemctl(["is-active", "engine"]) == 3 and capsys.readouterr().out == "inactive\n"
    assert nodeinit.systemctl(["start", "engine"]) == 0
    pid = nodeinit.main_pid_of("engine.service")
    assert pid and nodeinit.alive(pid)
    assert nodeinit.systemctl(["--quiet", "is-active", "engine.service"]) == 0 and capsys.readouterr().out == ""
    assert nodeinit.systemctl(["start", "engine"]) == 0 and nodeinit.main_pid_of("engine.service") == pid


def test_restart_replaces_the_process_and_stop_ends_it(node: Path):
    nodeinit.systemctl(["start", "engine"])
    first = nodeinit.main_pid_of("engine.service")
    assert nodeinit.systemctl(["restart", "engine"]) == 0
    second = nodeinit.main_pid_of("engine.service")
    assert first and second and second != first and not nodeinit.alive(first) and nodeinit.alive(second)
    assert nodeinit.systemctl(["stop", "engine"]) == 0
    assert not nodeinit.alive(second) and nodeinit.systemctl(["--quiet", "is-active", "engine"]) == 3
    assert nodeinit.systemctl(["try-restart", "engine"]) == 0 and nodeinit.main_pid_of("engine.service") is None


def test_a_unit_that_is_not_there_fails_as_systemctl_says_it(node: Path, capsys):
    assert nodeinit.systemctl(["restart", "docker"]) == 5
    assert capsys.readouterr().err == "Failed to restart docker.service: Unit docker.service not found.\n"
