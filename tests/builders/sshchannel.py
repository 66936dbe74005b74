"""A paramiko Channel as provision reads an SSH command's output from it (core/connection.py _read_until_exit),
fed by the test as a server would feed it."""

from __future__ import annotations

import os
import threading


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
