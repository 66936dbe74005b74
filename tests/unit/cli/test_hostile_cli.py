"""Hostile and broken command-line input (issue 41): each ends in a clear error, exit 2, before any host is
contacted, and never widens what a run touches. The CLI runs in-process; every way to a host is patched to refuse
and count (builders/cli.py no_host_contacted)."""

from __future__ import annotations

import os
import shutil
import signal
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable

import pytest

from provision.core.connection import SSHConnection

from builders.cli import no_host_contacted, run_cli

INVENTORY = """\
all:
  hosts:
    n1: {ansible_host: 192.0.2.1}
    n2: {ansible_host: 192.0.2.2}
"""
SECRET = "root:$6$SECRETHASH$abc:19000:0:99999:7:::"


@contextmanager
def within(seconds: float):
    """Fail instead of hanging: Python's re checks for signals while it backtracks."""
    def late(signum, frame):
        pytest.fail(f"still running after {seconds:g} s")

    before = signal.signal(signal.SIGALRM, late)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, before)


def provision(args: list[str], on_connect: Callable[[], None] = lambda: None):
    """The CLI's result (no traceback, no internal error, nothing unprintable) and the hosts it tried to reach,
    each refused (builders/cli.py); on_connect runs at each try (a file removed meanwhile)."""
    with no_host_contacted() as attempts, pytest.MonkeyPatch.context() as mp:
        refuse = SSHConnection.open

        def open_after(self):
            on_connect()
            refuse(self)

        mp.setattr(SSHConnection, "open", open_after)
        return run_cli(args), attempts


def refused(args: list[str], *words: str):
    """Exit 2, every word in the message, no host contacted."""
    result, attempts = provision(args)
    assert result.exit_code == 2, result.output
    assert "no host was touched" in result.output, result.output
    for word in words:
        assert word in result.output, (word, result.output)
    assert attempts == [], attempts
    return result


@pytest.fixture
def inventory(tmp_path) -> Path:
    path = tmp_path / "inventory.yaml"
    path.write_text(INVENTORY)
    return path


def apply_check(inventory: Path, *args: str) -> list[str]:
    return ["apply", str(inventory), "--check", "--log", str(inventory.parent / "runs.jsonl"), *args]


# --- 1. a limit that cannot be read is an error, never a wider set ---

@pytest.mark.parametrize("limit, words", [
    ("~[", ["'~['", "the '[' at position 2 is not closed"]),  # was '~': every host
    ("~n2|[", ["the '[' at position 5 is not closed"]),  # was '~n2|': every host
    ("n1]:n2", ["the ']' at position 3 closes no '['"]),
    ("~", ["no regular expression after it", "write all"]),  # every name, what "~$EMPTY" gives
    ("n1:!~", ["no regular expression after it"]),
    (":", ["holds no pattern", "write all"]),  # separators only: Ansible's "no limit"
    (" , ", ["holds no pattern"]),
])
def test_a_limit_that_cannot_be_read_is_refused_not_widened(inventory, limit, words):
    refused(apply_check(inventory, "--limit", limit), "limit", *words)


def test_an_empty_limit_file_is_refused_not_every_host(inventory, tmp_path):
    retry = tmp_path / "site.retry"
    retry.write_text("\n  \n")  # Ansible: no pattern, so every host
    refused(apply_check(inventory, "--limit", f"@{retry}"), str(retry), "holds no pattern")


# --- 2. a regular expression that backtracks without end is stopped at its bound ---

@pytest.mark.parametrize("limit, words", [
    ("~(a|aa)+$", ["'~(a|aa)+$'", "bound of 1 s", "backtracks"]),  # past the regex module's own shortcuts
    ("~(a+)+$", ["matches no host or group"]),  # the issue's: re backtracked for ever, regex sees it fail at once
])
def test_a_catastrophic_regex_ends_at_its_bound(tmp_path, limit, words):
    path = tmp_path / "inventory.yaml"
    path.write_text("all:\n  hosts:\n    " + "a" * 40 + "b: {ansible_host: 192.0.2.1}\n")
    started = time.monotonic()
    with within(20):
        refused(apply_check(path, "--limit", limit), "limit", *words)
    assert time.monotonic() - started < 10


# --- 3. output files checked before anything runs, and a failure at the end keeps the verdict ---

@pytest.mark.parametrize("command, option, path, why", [
    ("apply", "--log", "/proc/nope/x", "cannot be made"),  # was a traceback before anything ran
    ("verify", "--prometheus", "/proc/nope/x.prom", "does not exist"),  # was a traceback after every host
    ("verify", "--junitxml", "/proc/nope/x.xml", "cannot be made"),
    ("verify", "--prometheus", "{tmp}", "is a directory"),
    ("verify", "--junitxml", "/dev/null", "is a character device"),
    ("apply", "--log", "{tmp}/fifo", "is a FIFO"),
])
def test_output_files_are_checked_before_the_inventory_is_read(tmp_path, command, option, path, why):
    os.mkfifo(tmp_path / "fifo")
    path = path.format(tmp=tmp_path)
    missing = tmp_path / "no-inventory-here.yaml"  # the file is refused first: the inventory is never read
    result = refused([command, str(missing), option, path], "command line", option, repr(path), why)
    assert "no-inventory-here" not in result.output


def test_a_prometheus_file_that_cannot_be_written_at_the_end_keeps_the_verdict(inventory, tmp_path):
    metrics = tmp_path / "metrics"
    metrics.mkdir()
    result, attempts = provision(["verify", str(inventory), "--prometheus", str(metrics / "verify.prom")],
                                 on_connect=lambda: shutil.rmtree(metrics, ignore_errors=True))  # meanwhile
    assert sorted(attempts) == ["n1", "n2"]
    assert result.exit_code == 4 | 32, result.output  # unreachable, and the file not written
    assert "n1" in result.output and "unreachable" in result.output  # the verdicts
    assert f"--prometheus {metrics / 'verify.prom'}: not written: No such file or directory" in result.output


def test_a_run_log_that_cannot_be_written_at_the_end_keeps_the_results(inventory, tmp_path):
    logs = tmp_path / "logs"
    log = logs / "runs.jsonl"
    result, attempts = provision(["apply", str(inventory), "--check", "--log", str(log)],
                                 on_connect=lambda: shutil.rmtree(logs, ignore_errors=True))  # hosts in parallel
    assert sorted(attempts) == ["n1", "n2"]
    assert result.exit_code == 4 | 32, result.output
    assert "n1" in result.output and "unreachable" in result.output  # the results
    assert f"--log {log}: not written from its " in result.output and "No such file or directory" in result.output


# --- 4. an ssh_config that is not one: bad input, its text never shown ---

def ssh_configs(tmp_path: Path) -> dict[str, Path]:
    (tmp_path / "shadow").write_text(SECRET + "\n")
    (tmp_path / "binary").write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe" + bytes(range(256)))
    (tmp_path / "directory").mkdir()
    os.mkfifo(tmp_path / "fifo")
    return {"shadow": tmp_path / "shadow", "binary": tmp_path / "binary", "directory": tmp_path / "directory",
            "fifo": tmp_path / "fifo", "zero": Path("/dev/zero")}


@pytest.mark.parametrize("name, why", [
    ("shadow", "paramiko cannot read its line 1"), ("binary", "is not text"), ("directory", "is a directory"),
    ("fifo", "is a FIFO"), ("zero", "is a character device"),
])
def test_an_ssh_config_option_that_is_no_ssh_config_is_bad_input(inventory, tmp_path, name, why):
    path = ssh_configs(tmp_path)[name]
    result = refused(["facts", str(inventory), "--ssh-config", str(path)], "--ssh-config", repr(str(path)), why)
    assert "SECRETHASH" not in result.output


@pytest.mark.parametrize("name, why", [("shadow", "paramiko cannot read its line 1"), ("binary", "is not text")])
def test_an_inventory_ssh_config_that_is_no_ssh_config_is_bad_input(tmp_path, name, why):
    path = ssh_configs(tmp_path)[name]
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(INVENTORY.replace("192.0.2.2}", f"192.0.2.2, provision_ssh_config: {path}}}"))
    result = refused(apply_check(inventory), str(inventory), "host n2: ssh_config", repr(str(path)), why)
    assert "SECRETHASH" not in result.output


# --- 5. a lookalike letter is named ---

def test_a_lookalike_letter_in_a_key_is_named(tmp_path):
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(INVENTORY.replace("n1: {ansible_host: 192.0.2.1}",
                                           "n1: {ansible_host: 192.0.2.1, provision_gpu: {power_lim\u0456t: 200}}"))
    refused(apply_check(inventory), "did you mean 'power_limit'? ('power_lim\u0456t' has U+0456 CYRILLIC SMALL "
            "LETTER BYELORUSSIAN-UKRAINIAN I at position 10, not 'i')")
