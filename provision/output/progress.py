"""Where a run is, on stderr: a live bar on a terminal, plain lines on a pipe.

The engine reports events (a host finished a phase, a host started a task);
this module decides how they look. On a terminal one line is redrawn in
place (a bar, the hosts done, the host and task just started) and cleared at
the end; on a pipe (a log file, CI) each host is one plain line when it is
done, and per-task events are not printed. Notices (a lock wait, a cache that
could not be written) are always printed, above the bar.

A run that changes hosts reads each host, then says how its changes went: on a
pipe its host's line is that word alone (or the failed read's), never the read
before it as well. The bar is as wide as the terminal it is drawn on (stderr),
whatever stdout is: measured on stdout, `provision apply | cat` drew 80 columns
on a narrower terminal, and each redraw left the wrapped row behind.
"""

from __future__ import annotations

import os
import threading
from typing import TextIO

from provision.core.run import Event

BAR_WIDTH = 20


class Progress:
    """A callable for RunOptions.progress, and .notice for RunOptions.notice."""

    def __init__(self, stream: TextIO, live: bool, enabled: bool = True, applying: bool = False):
        """applying: the run changes the hosts it reads (apply, the ad-hoc commands): a read is not a host's end."""
        self.stream, self.live, self.enabled, self.applying = stream, live, enabled, applying
        self._shown = False  # a live line is on the screen
        self._lock = threading.RLock()  # re-entered by a signal handler's notice (stopping.py)
        self._read: set[str] = set()  # applying: hosts read, their changes' word still to come
        self._ended: set[str] = set()  # applying: hosts whose read failed and was printed; the run's word follows

    def __call__(self, event: Event) -> None:
        if not self.enabled:
            return
        with self._lock:
            if self.live:
                self._draw(self.bar(event))
            elif not event.task and self._ends_host(event):
                self._write(f"[{event.done}/{event.total}] {event.host} {event.phase}\n")

    def _ends_host(self, event: Event) -> bool:
        """Whether this event is the host's last word for a pipe. A run that applies says a host's word twice,
        after its read and after its changes (core/run.py); a host that failed its read says it at both."""
        if not self.applying:
            return True
        if event.phase == "read":
            self._read.add(event.host)
            return False
        if event.host in self._ended:
            self._ended.discard(event.host)
            return False
        if event.host not in self._read:  # failed at its read: said now, its run's word skipped
            self._ended.add(event.host)
        self._read.discard(event.host)
        return True

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
        width = self._columns() - 1
        self._write("\r\x1b[K" + line[:width])
        self._shown = True

    def _columns(self) -> int:
        """The width of the terminal under the stream; COLUMNS wins, as it does for shutil.get_terminal_size."""
        if os.environ.get("COLUMNS", "").isdigit():
            return int(os.environ["COLUMNS"])
        try:
            return os.get_terminal_size(self.stream.fileno()).columns
        except (AttributeError, ValueError, OSError):  # no terminal under it (a test's StringIO)
            return 80

    def _clear(self) -> None:
        if self._shown:
            self._write("\r\x1b[K")
            self._shown = False

    def _write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()
