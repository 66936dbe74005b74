"""Where a run is, on stderr: a live bar on a terminal, plain lines on a pipe.

The engine reports events (a host finished a phase, a host started a task);
this module decides how they look. On a terminal one line is redrawn in
place (a bar, the hosts done, the host and task just started) and cleared at
the end; on a pipe (a log file, CI) each host that finishes a phase is one
plain line, and per-task events are not printed. Notices (a lock wait, a
cache that could not be written) are always printed, above the bar.
"""

from __future__ import annotations

import shutil
import threading
from typing import TextIO

from provision.core.run import Event

BAR_WIDTH = 20


class Progress:
    """A callable for RunOptions.progress, and .notice for RunOptions.notice."""

    def __init__(self, stream: TextIO, live: bool, enabled: bool = True):
        self.stream, self.live, self.enabled = stream, live, enabled
        self._shown = False  # a live line is on the screen
        self._lock = threading.RLock()  # re-entered by a signal handler's notice (stopping.py)

    def __call__(self, event: Event) -> None:
        if not self.enabled:
            return
        with self._lock:
            if self.live:
                self._draw(self.bar(event))
            elif not event.task:
                self._write(f"[{event.done}/{event.total}] {event.host} {event.phase}\n")

    def notice(self, text: str) -> None:
        with self._lock:
            self._clear()
            self._write(f"{text}\n")

    def close(self) -> None:
        with self._lock:
            self._clear()

    @staticmethod
    def bar(event: Event) -> str:
        filled = BAR_WIDTH * event.done // max(1, event.total)
        doing = f"{event.host}: {event.task}" if event.task else event.host
        phase = "applying" if event.task else event.phase
        return f"[{'#' * filled}{'.' * (BAR_WIDTH - filled)}] {event.done}/{event.total} {phase} {doing}"

    def _draw(self, line: str) -> None:
        width = shutil.get_terminal_size((80, 24)).columns - 1
        self._write("\r\x1b[K" + line[:width])
        self._shown = True

    def _clear(self) -> None:
        if self._shown:
            self._write("\r\x1b[K")
            self._shown = False

    def _write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()
