"""A host that goes silent mid-command, over real SSH (OpenSSH on 127.0.0.1): the sshd process that serves the
connection is stopped (SIGSTOP), so the TCP connection stays up, nothing closes it, and nothing answers, as with a
hung host. The keepalives OpenSSH answers keep a long quiet command alive; unanswered, the host is lost within the
bound, with what the command printed before: a batch's setters that came back count. The bound is scaled down
here (KEEPALIVE_S, SILENT_AFTER_S)."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time

import pytest
from simnode import needs_root
from sshd import SSHServer

from provision.core import connection
from provision.core.apply import Step, run_batch
from provision.core.connection import Lost, SSHConnection, SSHOptions

pytestmark = [needs_root(), pytest.mark.skipif(not os.path.exists("/usr/sbin/sshd"), reason="needs openssh-server")]

INTERVAL, LIMIT = 0.5, 2.0


@pytest.fixture
def conn(tmp_path, monkeypatch):
    monkeypatch.setattr(connection, "KEEPALIVE_S", INTERVAL)
    monkeypatch.setattr(connection, "SILENT_AFTER_S", LIMIT)
    server = SSHServer(tmp_path / "sshd", {"PATH": "/usr/bin:/bin:/usr/sbin:/sbin"})
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text(server.known_hosts_line())
    conn = SSHConnection("sshnode", "sshnode", None, None,
                         SSHOptions(ssh_config=str(server.client_config(known_hosts))))
    conn.open()
    yield conn
    conn.close()
    server.stop()


def test_openssh_answers_the_keepalives_so_a_quiet_command_outlives_the_bound(conn):
    result = conn.run(["sh", "-c", f"sleep {2 * LIMIT}; echo done"], timeout=30)
    assert result.ok and result.stdout == "done\n"
    assert conn.liveness is not None and conn.liveness.lost is None


def test_a_hung_sshd_is_lost_within_the_bound_with_what_came_back_before(conn):
    started = time.monotonic()
    with pytest.raises(Lost) as lost:
        conn.run(["sh", "-c", "echo $PPID; echo first; sleep 0.3; kill -STOP $PPID; echo never; sleep 30"],
                 timeout=300)
    try:
        took = time.monotonic() - started
        assert LIMIT <= took < LIMIT + 3 * INTERVAL + 2, took
        assert lost.value.stdout.splitlines()[1:] == ["first"]
        assert "it stopped answering: no reply to a keepalive for 2 s, and no FIN or RST" in str(lost.value)
        with pytest.raises(Lost):  # nothing more waits on it
            conn.run(["true"], timeout=300)
    finally:
        session = int(lost.value.stdout.split()[0])  # the sshd that served the command: let it go
        let_go(session)


def let_go(session: int) -> None:
    """Wake the sshd session a test stopped, and end it: woken, it may see its connection gone and end first."""
    os.kill(session, signal.SIGCONT)
    with contextlib.suppress(ProcessLookupError):
        os.kill(session, signal.SIGTERM)


def sshd_serving(pid: int) -> int:
    """The sshd process nearest above pid: the one that carries its session's channel."""
    while pid > 1:
        pid = int(next(line.split()[1] for line in open(f"/proc/{pid}/status") if line.startswith("PPid:")))
        if open(f"/proc/{pid}/comm").read().startswith("sshd"):
            return pid
    raise AssertionError("no sshd above it")


def test_a_batch_on_a_hung_sshd_counts_the_setters_whose_output_came_back(conn, tmp_path):
    """Two setters done, the third running when the host hangs: they are known, only the rest is unknown."""
    started = tmp_path / "third"
    batch = [[Step(["echo", "set GPU0"])], [Step(["echo", "set GPU1"])],
             [Step(["sh", "-c", f"echo $$ > {started}.tmp; mv {started}.tmp {started}; sleep 30"])],
             [Step(["echo", "set GPU3"])]]
    done: list = []
    runner = threading.Thread(target=lambda: done.append(run_batch(conn, batch)))
    runner.start()
    deadline = time.monotonic() + 10
    while not started.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.3)  # the first two setters' output is in
    session = sshd_serving(int(started.read_text()))
    os.kill(session, signal.SIGSTOP)
    try:
        runner.join(LIMIT + 3 * INTERVAL + 2)
        assert done, "run_batch still waits on the hung host"
        errors, lost, printed = done[0]
        assert errors[:2] == [None, None] and printed[:2] == ["set GPU0", "set GPU1"]
        assert errors[2].startswith("unknown whether `sh -c echo $$ > ") and "finished: the host was lost" in errors[2]
        assert errors[3] == "unknown whether `echo set GPU3` ran: the host was lost before its output came back"
        assert lost and "it stopped answering" in lost
    finally:
        let_go(session)
        runner.join(10)
