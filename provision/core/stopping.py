"""Stopping a run: the first SIGINT (Ctrl-C) or SIGTERM (a CI cancel, `timeout`) stops it gracefully, a second
abandons it.

Graceful: the engine lets the changes in flight on each host finish and be verified, then starts no new host
and no new task, and reports what changed and what was never started (exit 128 + the signal's number).
Abandoned: a KeyboardInterrupt in the main thread; the engine gives back the locks it can and the process ends.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from types import FrameType
from typing import Callable, Iterator

from provision.core.results import signal_name


class Stop:
    """Whether, and by which signal, a run was asked to stop. False until then."""

    def __init__(self, notice: Callable[[str], None]):
        self.signum: int | None = None
        self.notice = notice
        self.said = "the changes in flight finish, nothing new starts"  # what stopping does, as the command does it

    def __bool__(self) -> bool:
        return self.signum is not None

    @contextmanager
    def catching(self) -> Iterator[None]:
        """SIGINT and SIGTERM stop the run while in it (only the main thread can catch signals)."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def on_signal(signum: int, frame: FrameType | None) -> None:
            if self.signum is None:
                self.request(signum)
            else:
                raise KeyboardInterrupt  # the second one: abandon what is in flight

        previous = {signum: signal.signal(signum, on_signal) for signum in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)

    def request(self, signum: int) -> None:
        self.signum = signum
        self.notice(f"{signal_name(signum)}: stopping; {self.said} (Ctrl-C again abandons them)")

    def words(self) -> str:
        """What a host or task not started says."""
        return f"not started: the run was stopped ({signal_name(self.signum or 0)})"
