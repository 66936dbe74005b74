"""provision on a pipe (`provision apply ... | cat`, a CI log): each host's progress line once, the live bar as
wide as the terminal it is drawn on, and the "Needs attention" reasons whole (issue 44)."""

from __future__ import annotations

import fcntl
import io
import os
import pty
import re
import struct
import subprocess
import sys
import termios

import pytest
import yaml

from provision.commands.demo import HOST, demo_environment, write_demo_files
from provision.core.plan import FAILED
from provision.core.results import UNREACHABLE, HostResult
from provision.core.run import Event
from provision.output import report
from provision.output.progress import Progress

LONG_REASON = ("cannot connect to 127.0.0.1:1: connection refused on port 1: is sshd running there, and on that "
               "port (ansible_port)?")


@pytest.fixture(scope="module")
def piped_apply(tmp_path_factory) -> subprocess.CompletedProcess:
    """`provision apply ... | cat` on the demo's simulated node and a host whose sshd is not there (127.0.0.1:1,
    refused at once), stdout and stderr each a pipe."""
    workdir = tmp_path_factory.mktemp("piped")
    env = demo_environment(workdir)
    inventory, playbook = write_demo_files(workdir)
    data = yaml.safe_load(inventory.read_text())
    data["all"]["children"]["v100"]["hosts"]["ghost"] = {"ansible_host": "127.0.0.1", "ansible_port": 1}
    inventory.write_text(yaml.safe_dump(data))
    return subprocess.run([sys.executable, "-m", "provision", "apply", str(inventory), "--playbook", str(playbook),
                           "--log", str(workdir / "runs.jsonl")], env={**env, "COLUMNS": "80"}, cwd=workdir,
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)


def test_apply_on_a_pipe_gives_each_host_one_progress_line(piped_apply):
    """Each host's line was printed twice: "read" and then its word; the unreachable one "unreachable" twice."""
    assert piped_apply.returncode == 4, piped_apply.stderr
    progress = [line for line in piped_apply.stderr.splitlines() if re.match(r"\[\d+/\d+\] ", line)]
    assert sorted(line.split(maxsplit=1)[1] for line in progress) == ["basement-v100 changed", "ghost unreachable"]


def test_apply_on_a_pipe_gives_the_whole_reason_a_host_needs_attention(piped_apply):
    """The reason was cut at 100 characters with "..." wherever stdout went."""
    attention = piped_apply.stdout.split("Needs attention:\n")[1].splitlines()
    [ghost] = [line for line in attention if line.split()[0] == "ghost"]
    assert ghost.endswith("is sshd running there, and on that port (ansible_port)?"), ghost
    assert HOST not in "".join(attention)  # converged: nothing to attend to


def pipe_lines(events: list[Event], applying: bool) -> list[str]:
    pipe = io.StringIO()
    progress = Progress(pipe, live=False, applying=applying)
    for event in events:
        progress(event)
    return pipe.getvalue().splitlines()


def test_an_applying_run_says_each_host_once_on_a_pipe():
    """As core/run.py says them: every host after its read, then every host after its changes (a host that
    failed its read at both); then a second round, as apply --reboot runs one after the reboot."""
    read = [Event("unreachable", 1, 3, "ghost"), Event("read", 2, 3, "gpu01"), Event("read", 3, 3, "gpu02")]
    applied = [Event("unreachable", 1, 3, "ghost"), Event("applied", 1, 3, "gpu01", "gpu-clocks"),
               Event("changed", 2, 3, "gpu01"), Event("failed", 3, 3, "gpu02")]
    again = [Event("read", 1, 1, "gpu01"), Event("ok", 1, 1, "gpu01")]
    assert pipe_lines(read + applied + again, applying=True) == [
        "[1/3] ghost unreachable", "[2/3] gpu01 changed", "[3/3] gpu02 failed", "[1/1] gpu01 ok"]


def test_a_read_only_run_says_each_host_read():
    events = [Event("read", 1, 2, "gpu01"), Event("unreachable", 2, 2, "ghost")]
    assert pipe_lines(events, applying=False) == ["[1/2] gpu01 read", "[2/2] ghost unreachable"]


def test_the_live_bar_fits_the_terminal_it_is_drawn_on(monkeypatch):
    """stderr a 40-column terminal, stdout a pipe: the bar is cut to 39 columns, not to stdout's (none: 80)."""
    monkeypatch.delenv("COLUMNS", raising=False)
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 40, 0, 0))
    with os.fdopen(slave, "w") as terminal:
        Progress(terminal, live=True)(Event("applied", 1, 4, "a-node-with-a-long-name", "gpu-boot-unit-file"))
        drawn = os.read(master, 4096).decode()
    os.close(master)
    frame = drawn.split("\r\x1b[K")[-1]
    assert frame.startswith("[#####") and len(frame) == 39, frame


def test_needs_attention_gives_the_whole_reason_on_a_pipe(capsys):
    failed = HostResult("gpu02", FAILED, message="nvidia-smi -pl 200 refused: " + "x" * 120)
    report.print_summary([HostResult("ghost", UNREACHABLE, message=LONG_REASON), failed], False, 6)
    out = capsys.readouterr().out
    assert f"  ghost   unreachable: {LONG_REASON}\n" in out
    assert "x" * 120 in out and "..." not in out
