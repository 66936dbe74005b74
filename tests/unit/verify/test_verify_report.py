"""verify's human output: a finding too long for the terminal wraps at its width under its own text, never inside
a word, and a command to run stays on one line."""

from __future__ import annotations

import os
import re

import pytest

from provision.output import report
from provision.verify import FAIL, PASS, UNREACHABLE, Failure, Verdict

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
FOUND = ("Xid 79 on GPU 3 (00000000:41:00.0) at 12.345 s: the GPU has fallen off the bus; Xid 48 on GPU 1 "
         "(00000000:01:00.0): a double-bit ECC error, the page retirement pending until the next reboot")
FIX = ("reseat the GPU or its riser, check its power cables, then reboot; if it falls off again, replace the "
       "riser (provision/facts/kernlog.py says why)")
COMMAND = "provision apply /srv/cluster/inventories/production-hall-b/inventory.yaml --limit rtx4090-1"
NOTE = ("Xid 13 on GPU 0 (00000000:01:00.0): Graphics Engine Exception, an application's error (a bad kernel "
        "launch or a memory access out of bounds); not a hardware fault, not failed")


def verdicts() -> list[Verdict]:
    return [
        Verdict("rtx4090-1", FAIL, passed=["a"] * 12, notes=[NOTE], failures=[
            Failure("no_xid_errors_since_boot", "no Xid that needs attention since boot", FOUND, FIX),
            Failure("as_intended[gpu-power-limit]", "GPU2 power limit 200.00 W", "GPU2 power limit 250.00 W",
                    COMMAND + " (after a reboot: is provision-gpu-tuning.service enabled?)")]),
        Verdict("v100-1", PASS, passed=["a"] * 14),
        Verdict("rtx3090-2", UNREACHABLE, "cannot connect to 192.0.2.22:22: timed out after 10 s (is the host "
                                          "up and its sshd running? check the address in the inventory)"),
    ]


def printed(capsys) -> list[str]:
    report.print_verdicts(verdicts())
    return ANSI.sub("", capsys.readouterr().out).splitlines()


def block(lines: list[str], first: str) -> list[str]:
    """The line starting with `first` (after its indent) and the continuation lines under it."""
    start = next(i for i, line in enumerate(lines) if line.lstrip().startswith(first))
    indent = len(lines[start]) - len(lines[start].lstrip())
    end = start + 1
    while end < len(lines) and lines[end].startswith(" " * (indent + 1)) and \
            not lines[end].lstrip().startswith(("failed ", "what to do:", "note ")):
        end += 1
    return lines[start:end]


@pytest.mark.parametrize("columns", [60, 80, 120])
def test_long_findings_wrap_at_the_terminal_width_with_a_hanging_indent(capsys, monkeypatch, columns):
    monkeypatch.setenv("COLUMNS", str(columns))
    lines = printed(capsys)
    too_long = [line for line in lines if len(line) > columns and COMMAND not in line]
    assert not too_long, too_long
    failed = block(lines, "failed no_xid_errors_since_boot")
    assert len(failed) > 1 and all(line.startswith(" " * 11) and line[11] != " " for line in failed[1:])
    fix = block(lines, "what to do: reseat")
    assert all(line.startswith(" " * 23) and line[23] != " " for line in fix[1:])
    note = block(lines, "note")
    assert len(note) > 1 and all(line.startswith(" " * 11) for line in note[1:])
    unreachable = block(lines, "rtx3090-2")
    assert all(line.startswith(" " * len("rtx4090-1  UNREACHABLE  ")) for line in unreachable[1:])
    # no word cut, none lost: the wrapped text reads as the finding
    said = " ".join(" ".join(failed).split())
    assert said == f"failed no_xid_errors_since_boot: expected no Xid that needs attention since boot; found {FOUND}"
    assert " ".join(" ".join(fix).split()) == f"what to do: {FIX}"
    assert " ".join(" ".join(note).split()) == f"note {NOTE}"


def test_a_command_to_run_stays_on_one_line_to_be_copied(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    lines = printed(capsys)
    assert f"           what to do: {COMMAND}" in lines  # longer than 80 columns: its own width, not cut
    fix = block(lines, f"what to do: {COMMAND}")
    assert len(fix) > 1 and all(len(line) <= 80 for line in fix[1:])  # the words after it wrap as usual
    assert " ".join(" ".join(fix[1:]).split()) == "(after a reboot: is provision-gpu-tuning.service enabled?)"


def test_on_a_pipe_the_width_is_100(capsys, monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)

    def not_a_terminal(fd=None):
        raise OSError("not a terminal")

    monkeypatch.setattr(os, "get_terminal_size", not_a_terminal)
    lines = printed(capsys)
    assert max(len(line) for line in lines if COMMAND not in line) <= 100
    assert max(len(line) for line in lines if COMMAND not in line) > 90  # used, not a narrower default
    assert "    failed no_xid_errors_since_boot: expected no Xid that needs attention since boot; found Xid 79" \
           in lines


def test_short_lines_are_as_before(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    report.print_verdicts([Verdict("node1", PASS, passed=["a"] * 3),
                           Verdict("node2", FAIL, passed=["a"], failures=[Failure("c", "1", "2", "do x")])])
    assert ANSI.sub("", capsys.readouterr().out).splitlines() == [
        "node1  PASS  3 checks passed",
        "node2  FAIL  1 of 2 checks failed",
        "    failed c: expected 1; found 2",
        "           what to do: do x",
        "",
        "2 hosts: 1 pass, 1 fail",
    ]
