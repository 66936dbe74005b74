"""The exit codes' one table (commands/exit_codes.py): every status a command can compute is made of codes the
table gives that command, and every command's --help lists exactly its records."""

from __future__ import annotations

import itertools
import signal

import pytest

from provision.commands import exit_codes
from provision.commands.exit_codes import (EXIT_CODES, clock_list_status, codes_of, exit_help, run_status,
                                           unlock_status, verify_status)
from provision.core.plan import CHANGED, FAILED, OK
from provision.core.results import NOT_STARTED, UNREACHABLE, HostResult
from provision.verify import FAIL, NOT_TESTED, PASS, UNREACHABLE as VERIFY_UNREACHABLE, Verdict

HOST_STATUSES = (OK, CHANGED, FAILED, UNREACHABLE, NOT_STARTED)
STOPS = (None, signal.SIGINT, signal.SIGTERM)


def explained(command: str, status: int) -> bool:
    """The status is one of the command's codes, or a sum of its bit flags."""
    codes = {record.code for record in codes_of(command)}
    if status in codes:
        return True
    flags = codes & exit_codes.BIT_FLAGS
    return status < 128 and status & ~sum(flags) == 0


def host_results(changes: bool = True) -> list[list[HostResult]]:
    """Each set of hosts' statuses; with and without a reboot pending where the run changes hosts (a read alone
    never says one: core/run.py sets it after the changes)."""
    runs = []
    for statuses in itertools.chain.from_iterable(itertools.combinations(HOST_STATUSES, n) for n in range(1, 4)):
        for pending in ([], ["a driver waits for the next boot"])[:2 if changes else 1]:
            runs.append([HostResult(f"h{i}", s, reboot_pending=pending) for i, s in enumerate(statuses)])
    return runs


@pytest.mark.parametrize("command", ["apply", "clocks", "power", "persistence"])
def test_every_status_a_run_that_changes_hosts_returns_is_in_the_table(command):
    for results, check, stopped, unwritten in itertools.product(host_results(), (False, True), STOPS,
                                                                ([], ["--log: disk full"])):
        status = run_status(results, check, stopped, unwritten)
        assert explained(command, status), (command, status)


def test_every_status_facts_and_clocks_list_return_is_in_the_table():
    for results in host_results(changes=False):
        assert explained("facts", run_status(results)), results
        for without_gpus in (False, True):
            assert explained("clocks", clock_list_status(results, without_gpus))


def test_every_status_verify_returns_is_in_the_table():
    verdicts = [Verdict("a", status) for status in (PASS, FAIL, VERIFY_UNREACHABLE, NOT_TESTED)]
    verdicts.append(Verdict("b", NOT_TESTED, not_tested=["load: no load program"]))
    for n in range(1, 4):
        for chosen, stopped, unwritten in itertools.product(itertools.combinations(verdicts, n), STOPS,
                                                            ([], ["--junitxml: disk full"])):
            status = verify_status(list(chosen), stopped, unwritten)
            assert explained("verify", status), (chosen, status)


def test_every_status_unlock_returns_is_in_the_table():
    found = ("no lock", "removed", "left alone", "unreachable")
    for n in range(1, 5):
        for statuses in itertools.combinations(found, n):
            assert explained("unlock", unlock_status(statuses)), statuses


def test_the_flags_add_up_and_a_stop_wins():
    failed, lost = HostResult("a", FAILED), HostResult("b", UNREACHABLE)
    assert run_status([failed, lost], unwritten=["--log: disk full"]) == 1 | 4 | 32
    assert run_status([failed, lost], stopped=signal.SIGINT, unwritten=["--log: disk full"]) == 130
    assert verify_status([Verdict("a", FAIL), Verdict("b", NOT_TESTED, not_tested=["load: none"])]) == 1 | 64
    assert unlock_status(["left alone", "unreachable", "removed"]) == 5
    assert clock_list_status([HostResult("a", OK)], without_gpus=True) == 1


def test_every_record_is_one_sentence_for_known_commands():
    commands = set(exit_codes.EVERY_COMMAND)
    for record in EXIT_CODES:
        assert record.meaning and "\n" not in record.meaning and set(record.commands) <= commands, record
    assert {record.code for record in EXIT_CODES} >= {0, 1, 2, 4, 8, 16, 32, 64, 130, 143}


@pytest.mark.parametrize("command", exit_codes.EVERY_COMMAND)
def test_the_help_epilog_lists_the_commands_records(command):
    text = exit_help(command)
    assert text.startswith("\b\nExit codes")
    listed = [line.split()[0] for line in text.splitlines()[2:] if not line.startswith(" " * 6)]
    assert listed == [str(record.code) for record in codes_of(command)]
    assert all(len(line) <= 78 for line in text.splitlines())


def test_every_command_s_help_shows_its_exit_codes_from_the_table():
    import click

    from provision.cli import main

    ctx = click.Context(main)
    for name in exit_codes.EVERY_COMMAND:
        assert main.get_command(ctx, name).epilog == exit_help(name), name
