"""One phase of a run over its hosts in parallel, at most `forks` at once: a host's failure (a bug included)
is its own, and the progress display hears of each host done."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from provision.core.hoststate import HostState
from provision.core.plan import FAILED
from provision.core.runoptions import Event, RunOptions, progress_word


class HostPool:
    def __init__(self, options: RunOptions):
        self.options = options
        self.done = self.total = 0  # hosts done in the current phase, of how many
        self._lock = threading.Lock()

    def each(self, work: Callable[[HostState], None], states: list[HostState], label: str | None) -> None:
        """work on every host; label: the phase the progress display says each host is done with (None: says
        nothing)."""
        self.done, self.total = 0, len(states)

        def one(state: HostState) -> None:
            try:
                work(state)
            except Exception as exc:  # a bug must not take the other hosts down with it
                state.result.status = FAILED
                state.result.message = f"internal error: {type(exc).__name__}: {exc}"
            if label:
                word = progress_word(label, state.result.status, self.options.check)
                with self._lock:
                    self.done += 1
                    self.options.progress(Event(word, self.done, len(states), state.host.name))

        # Not `with`: its exit waits for every queued host, and an abandoned run must not.
        pool = ThreadPoolExecutor(max_workers=max(1, min(self.options.forks, len(states))))
        try:
            for future in [pool.submit(one, s) for s in states]:
                future.result()
        finally:
            pool.shutdown(wait=False, cancel_futures=True)
