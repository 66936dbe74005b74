"""Every change of a batch, files included, goes to the host as ONE command: each file's bytes travel on that
command's stdin and are written atomically in the change's place in the order, between its commands and its
after-write commands; a change stops at its own first failure and never stops another."""

from __future__ import annotations

import base64
import getpass
import grp
import os

from provision.core.apply import Step, apply_changes
from provision.core.connection import LocalConnection
from provision.core.plan import Change, FileWrite

ME, MY_GROUP = getpass.getuser(), grp.getgrgid(os.getgid()).gr_name


def written(path, content: str, **kwargs) -> FileWrite:
    return FileWrite(str(path), content, owner=ME, group=MY_GROUP, **kwargs)


def test_files_and_commands_of_several_changes_run_in_order_in_one_command(tmp_path):
    log, conf, unit = tmp_path / "log", tmp_path / "etc" / "nccl.conf", tmp_path / "x.service"
    unit.write_text("old\n")
    key = bytes(range(256)) * 2  # binary: every byte value, and no line ends where text would have them
    awkward = "@@not-the-token 0.0\n$(touch pwned) `id` 'quote\" \\\n" + "x" * 70_000 + "\n"  # bigger than a pipe buffer
    conn = LocalConnection("here")
    changes = [
        Change("GPU0", "power limit", "250", "200", commands=[["sh", "-c", f"echo setter | tee -a {log}"]]),
        Change(str(conf), "file", "absent", "written", write=written(conf, awkward),
               after_write=[["sh", "-c", f"test -s {conf} && echo after-write >> {log}"]]),
        Change(str(unit), "file", "old", "new", commands=[["sh", "-c", f"echo before-write >> {log}"]],
               write=written(unit, "new\n", mode="0600")),
        Change("munge.key", "key", "absent", "written",
               write=written(tmp_path / "munge.key", base64.b64encode(key).decode(), base64=True, mode="0400")),
        Change("empty", "file", "absent", "written", write=written(tmp_path / "empty", "")),
    ]
    ran = apply_changes(conn, changes, keep_backups=1)
    errors, printed = ran.errors, ran.printed
    assert conn.commands_run == 1 and ran.lost is None and errors == [None] * 5
    assert log.read_text() == "setter\nafter-write\nbefore-write\n"
    assert conf.read_text() == awkward and not (tmp_path / "pwned").exists()
    assert unit.read_text() == "new\n" and oct(unit.stat().st_mode)[-3:] == "600"
    assert [p.read_text() for p in tmp_path.glob("x.service.*Z~")] == ["old\n"]  # the dated backup
    assert (tmp_path / "munge.key").read_bytes() == key and (tmp_path / "empty").read_bytes() == b""
    assert printed[0] == "setter"  # what a change's commands printed: a setter's words, for its explanation


def test_a_failed_write_fails_its_change_alone_and_its_after_write_never_runs(tmp_path):
    log = tmp_path / "log"
    blocked = tmp_path / "not-a-dir"
    blocked.write_text("a file where a directory should be\n")
    conn = LocalConnection("here")
    carrier = Change("GPU0", "persistence mode", "Disabled", "Enabled", commands=[["true"]])
    errors = apply_changes(conn, [
        Change(f"{blocked}/x.conf", "file", "absent", "written", write=written(blocked / "x.conf", "x\n"),
               after_write=[["sh", "-c", f"echo reloaded >> {log}"]]),
        carrier,
        Change("GPU1", "persistence mode", "Disabled", "Enabled", runs_with=carrier),  # no command of its own
        Change("after", "file", "absent", "written", write=written(tmp_path / "after.conf", "after\n")),
    ]).errors
    assert errors[0].startswith(f"writing {blocked}/x.conf failed: ") and not log.exists()
    assert errors[1:] == [None, None, None] and (tmp_path / "after.conf").read_text() == "after\n"


def test_the_staged_inputs_are_gone_when_the_command_ends(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # where mktemp stages when /run is not writable
    staged = tmp_path / "seen"
    ran = apply_changes(
        LocalConnection("here"),
        [Change("a", "file", "absent", "written", write=written(tmp_path / "a.conf", "secret\n"),
                after_write=[["sh", "-c", f"ls -d /run/provision-batch.* {tmp_path}/tmp.* > {staged} 2>/dev/null; true"]])],
        upkeep=[Step(["sh", "-c", f"cat > {tmp_path}/cache"], "caching", b"rows\n")])
    assert ran.errors == [None] and ran.upkeep_error is None and (tmp_path / "cache").read_text() == "rows\n"
    listed = staged.read_text().split()
    assert listed and not any(os.path.exists(path) for path in listed)


def test_an_upkeep_step_that_fails_is_reported_apart_and_stops_no_change(tmp_path):
    ran = apply_changes(
        LocalConnection("here"), [Change("GPU0", "power limit", "250", "200", commands=[["true"]])],
        upkeep=[Step(["sh", "-c", "echo read-only file system; exit 1"], "caching the supported clocks", b"")])
    assert ran.errors == [None] and ran.upkeep_error == "caching the supported clocks failed: read-only file system"
