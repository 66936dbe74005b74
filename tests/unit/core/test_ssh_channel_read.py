"""How an SSH command's output is read (core/connection.py _read_until_exit): to the end of the output and the
exit status both, in whatever order the server sends them, without polling, within the deadline."""

from __future__ import annotations

import threading
import time

from provision.core.connection import _read_until_exit

from builders.sshchannel import Channel


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
