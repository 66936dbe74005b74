"""How an SSH command's output is read (core/connection.py _read_until_exit): to the end of the output and the
exit status both, in whatever order the server sends them, without polling, within the deadline."""

from __future__ import annotations

import os
import threading
import time

from provision.core.connection import _read_until_exit


class Channel:
    """What _read_until_exit uses of a paramiko Channel, fed by the test as a server would feed it: a real pipe
    for select, set while data waits or once the output has ended."""

    def __init__(self):
        self.out, self.err = bytearray(), bytearray()
        self.eof_received = self.closed = False
        self.status = None
        self.status_event = threading.Event()
        self._r, self._w = os.pipe()
        self._set = False
        self.lock = threading.Lock()

    def fileno(self):
        return self._r

    def _signal(self):
        if not self._set:
            os.write(self._w, b"x")
            self._set = True

    def _clear(self):
        if self._set and not (self.out or self.err or self.eof_received):
            os.read(self._r, 1)
            self._set = False

    # the server's side
    def feed(self, out=b"", err=b""):
        with self.lock:
            self.out += out
            self.err += err
            self._signal()

    def eof(self):
        with self.lock:
            self.eof_received = True
            self._signal()

    def exit(self, status):
        self.status = status
        self.status_event.set()

    # paramiko's reading side
    def recv_ready(self):
        return bool(self.out)

    def recv_stderr_ready(self):
        return bool(self.err)

    def exit_status_ready(self):
        return self.status is not None

    def recv(self, n):
        with self.lock:
            data, self.out[:] = bytes(self.out[:n]), self.out[n:]
            self._clear()
            return data

    def recv_stderr(self, n):
        with self.lock:
            data, self.err[:] = bytes(self.err[:n]), self.err[n:]
            self._clear()
            return data


def later(seconds, *steps):
    def run():
        for step in steps:
            time.sleep(seconds)
            step()
    threading.Thread(target=run, daemon=True).start()


def test_output_that_arrives_after_the_exit_status_is_read_too():
    """OpenSSH sends exit-status when the command exits; what it wrote just before may come after."""
    channel = Channel()
    channel.feed(b"section 1\n")
    channel.exit(0)
    later(0.1, lambda: channel.feed(b"section 2\n", b"a warning\n"), channel.eof)
    assert _read_until_exit(channel, time.monotonic() + 5) == (b"section 1\nsection 2\n", b"a warning\n", False)


def test_the_exit_status_that_arrives_after_the_output_is_waited_for():
    channel = Channel()
    channel.feed(b"all of it\n")
    channel.eof()
    later(0.1, lambda: channel.exit(3))
    started = time.monotonic()
    assert _read_until_exit(channel, started + 5) == (b"all of it\n", b"", False)
    assert channel.exit_status_ready() and time.monotonic() - started < 2


def test_a_command_that_outlives_its_deadline_times_out_with_what_it_said():
    channel = Channel()
    channel.feed(b"started\n")
    started = time.monotonic()
    assert _read_until_exit(channel, started + 0.3) == (b"started\n", b"", True)
    assert 0.3 <= time.monotonic() - started < 2


def test_a_channel_closed_mid_command_ends_the_read():
    channel = Channel()
    later(0.1, lambda: setattr(channel, "closed", True), channel.eof)
    assert _read_until_exit(channel, None) == (b"", b"", False)
