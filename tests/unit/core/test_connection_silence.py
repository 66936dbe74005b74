"""A host that goes silent mid-command (no FIN, no RST: its link cut, its kernel panicked) is lost within a bound,
with what its command printed until then (core/connection.py Liveness, run_on_channel, SSHConnection._run), and a
batch of changes cut short says exactly which changes ran (core/apply.py run_batch).

The transport and channel are fakes with paramiko's shape; the commands are real: the channel runs them here with
sh, as sshd would on the host, and the fake host answers keepalives until the test cuts its link."""

from __future__ import annotations

import subprocess
import threading
import time

import paramiko
import pytest

from provision.core.apply import Step, run_batch
from provision.core.connection import (KEEPALIVE_S, SILENT_AFTER_S, CommandResult, Liveness, Lost, SSHConnection,
                                       SSHOptions, run_on_channel)

from builders.connection import FakeConnection, here
from builders.sshchannel import Channel

INTERVAL, LIMIT = 0.05, 0.4  # the bound scaled down: the judging is the same


class Packetizer:
    """paramiko's keepalive: the callback each interval in which nothing was sent (here: each interval)."""

    def __init__(self, transport: "Transport"):
        self.transport = transport

    def set_keepalive(self, interval, callback):
        def tick():
            while not self.transport.closed.wait(interval):
                callback()
        threading.Thread(target=tick, daemon=True).start()


class Transport:
    """What Liveness and run_on_channel use of a paramiko Transport. The host answers each keepalive (OpenSSH
    refuses it: REQUEST_FAILURE) until cut(); close() closes its channels, as paramiko's does."""

    def __init__(self):
        self.answering = True
        self.asks = 0
        self.closed = threading.Event()
        self.channels: list[HostChannel] = []
        self.clear_to_send = threading.Event()
        self.clear_to_send.set()
        self.packetizer = Packetizer(self)
        self._handler_table = {paramiko.common.MSG_REQUEST_SUCCESS: lambda m: None,
                               paramiko.common.MSG_REQUEST_FAILURE: lambda m: None}

    def cut(self):
        self.answering = False

    def is_active(self):
        return not self.closed.is_set()

    def _send_user_message(self, message):
        self.asks += 1
        if self.answering:
            self._handler_table[paramiko.common.MSG_REQUEST_FAILURE](paramiko.Message())

    def close(self):
        self.closed.set()
        for channel in self.channels:
            channel.lose()

    def open_session(self):
        if self.closed.is_set():
            raise paramiko.SSHException("SSH session not active")
        self.channels.append(HostChannel(self))
        return self.channels[-1]


class HostChannel(Channel):
    """A session channel whose command runs here with sh; its output reaches us while the host's link is up."""

    def __init__(self, transport: Transport):
        super().__init__()
        self.transport = transport
        self.proc: subprocess.Popen | None = None

    def exec_command(self, command):
        self.proc = subprocess.Popen(["sh", "-c", command], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE)
        threading.Thread(target=self._forward, daemon=True).start()

    def _forward(self):
        for line in iter(self.proc.stdout.readline, b""):
            if self.transport.answering:  # a cut link carries nothing more
                self.feed(line)
        if self.transport.answering:
            self.eof()
            self.exit(self.proc.wait())

    def sendall(self, data):
        self.proc.stdin.write(data)

    def shutdown_write(self):
        self.proc.stdin.close()

    def lose(self):
        """paramiko's Channel._set_closed: what was buffered stays readable, every wait ends."""
        with self.lock:
            self.closed = True
            self._signal()
        self.status_event.set()

    def recv_exit_status(self):
        self.status_event.wait()
        return -1 if self.status is None else self.status

    def close(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def host():
    """An SSHConnection (no network: its transport is the fake) whose host answers keepalives until cut."""
    transport = Transport()
    conn = SSHConnection("gpu-7", "192.0.2.7", None, None, SSHOptions())
    conn.fabric.client._transport = transport
    conn.liveness = Liveness(transport, INTERVAL, LIMIT)
    yield conn, transport
    transport.close()
    conn.liveness.stop()


def test_the_bound_is_a_few_unanswered_keepalives_and_fits_the_issue():
    assert 15 <= SILENT_AFTER_S <= 30 and SILENT_AFTER_S >= 3 * KEEPALIVE_S


def test_a_keepalive_never_answered_closes_the_transport_within_the_bound_and_says_why():
    transport = Transport()
    transport.cut()
    started = time.monotonic()
    liveness = Liveness(transport, INTERVAL, LIMIT)
    assert transport.closed.wait(5)
    assert LIMIT <= time.monotonic() - started < LIMIT + 4 * INTERVAL + 1
    assert liveness.lost.startswith("it stopped answering: no reply to a keepalive for 0 s, and no FIN or RST")
    assert transport.asks >= 2  # asked again while waiting, as OpenSSH's ServerAliveInterval does


def test_a_connection_closed_by_the_host_is_not_called_silent_afterwards():
    transport = Transport()
    liveness = Liveness(transport, INTERVAL, LIMIT)
    transport.cut()
    time.sleep(3 * INTERVAL)
    assert liveness.asked is not None  # an ask unanswered when ...
    transport.close()  # ... sshd went: a FIN or RST, and paramiko's transport ended
    time.sleep(LIMIT + 4 * INTERVAL)
    assert liveness.lost is None


def test_a_host_that_answers_its_keepalives_is_alive_however_long_it_is_quiet():
    transport = Transport()
    liveness = Liveness(transport, INTERVAL, LIMIT)
    time.sleep(3 * LIMIT)
    assert not transport.closed.is_set() and liveness.lost is None and transport.asks >= 10
    liveness.stop()


def test_a_long_quiet_command_on_a_live_host_runs_to_its_end(host):
    conn, _ = host
    result = conn.run(["sh", "-c", f"sleep {2 * LIMIT}; echo done"], timeout=10)
    assert result.ok and result.stdout == "done\n"


def test_a_host_silent_mid_command_is_lost_within_the_bound_with_what_came_back_before(host):
    conn, transport = host
    started = time.monotonic()
    threading.Timer(0.5, transport.cut).start()
    with pytest.raises(Lost) as lost:
        conn.run(["sh", "-c", "echo first; sleep 0.2; echo second; sleep 60; echo never"], timeout=600)
    assert time.monotonic() - started < 0.5 + LIMIT + 2
    assert lost.value.stdout == "first\nsecond\n"
    assert str(lost.value).startswith("lost the connection to gpu-7: it stopped answering: no reply to a keepalive")
    with pytest.raises(Lost):  # the next command fails at once: no channel opens on a closed transport
        conn.run(["true"])


def test_a_setter_batch_cut_by_a_silent_host_counts_what_finished_and_says_unknown_for_the_rest(host):
    """Two setters came back with their exit status, the third was running when the link went, the fourth had
    not begun: only the last two are unknown; nothing reads "exited 124" or failed."""
    conn, transport = host
    threading.Timer(1.0, transport.cut).start()
    batch = [[Step(["sh", "-c", "echo set GPU0"])], [Step(["sh", "-c", "echo set GPU1"])],
             [Step(["sh", "-c", "sleep 60"])], [Step(["sh", "-c", "echo set GPU3"])]]
    started = time.monotonic()
    errors, lost, printed = run_batch(conn, batch)
    assert time.monotonic() - started < 1.0 + LIMIT + 2
    assert errors[:2] == [None, None] and printed[:2] == ["set GPU0", "set GPU1"]
    assert errors[2] == "unknown whether `sh -c sleep 60` finished: the host was lost while it ran"
    assert errors[3] == "unknown whether `sh -c echo set GPU3` ran: the host was lost before its output came back"
    assert lost.startswith("lost the connection to gpu-7: it stopped answering")


def test_a_batch_stopped_at_its_deadline_is_unknown_from_the_step_in_flight_never_exited_124():
    hurried = FakeConnection("here", lambda argv, stdin, timeout: here(argv, stdin, 1))  # the deadline, come early
    errors, lost, _ = run_batch(hurried, [[Step(["true"])], [Step(["sleep", "5"])], [Step(["true"])]])
    assert lost is None and errors[0] is None
    assert errors[1] == "unknown whether `sleep 5` finished: the command was stopped at its deadline (480 s) while it ran"
    assert errors[2].startswith("unknown whether `true` ran: the command was stopped at its deadline")


def test_a_line_cut_in_two_by_the_lost_connection_is_not_read_as_an_exit_code():
    def cut_in_an_exit_code(argv: list[str], stdin: str | None, timeout: float | None) -> CommandResult:
        done = here(argv, stdin, timeout)
        raise Lost("lost the connection to cut: it stopped answering", done.stdout[:done.stdout.rindex("rc=") + 3])

    [error], lost, _ = run_batch(FakeConnection("cut", cut_in_an_exit_code), [[Step(["true"])]])
    assert error == "unknown whether `true` finished: the host was lost while it ran" and lost


def test_run_on_channel_without_a_transport_is_a_lost_connection_not_a_crash():
    with pytest.raises(EOFError):
        run_on_channel(None, "true", None, 1)
