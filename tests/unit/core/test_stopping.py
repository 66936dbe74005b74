"""The first SIGINT or SIGTERM asks the run to stop (nothing new starts); a second abandons it."""

from __future__ import annotations

import os
import signal

import pytest

from provision.core.stopping import Stop


@pytest.mark.parametrize("signum, name", [(signal.SIGTERM, "SIGTERM"), (signal.SIGINT, "SIGINT")])
def test_the_first_signal_asks_to_stop_and_the_second_abandons(signum, name):
    said = []
    stop = Stop(said.append)
    before = signal.getsignal(signum)
    assert not stop
    with pytest.raises(KeyboardInterrupt):
        with stop.catching():
            os.kill(os.getpid(), signum)
            assert stop and stop.signum == signum
            assert said == [f"{name}: stopping; the changes in flight finish, nothing new starts "
                            "(Ctrl-C again abandons them)"]
            assert stop.words() == f"not started: the run was stopped ({name})"
            os.kill(os.getpid(), signum)
    assert signal.getsignal(signum) is before  # the handlers are put back


def test_outside_the_main_thread_nothing_is_caught():
    import threading
    caught = []

    def worker():
        with Stop(print).catching():
            caught.append(signal.getsignal(signal.SIGTERM))

    before = signal.getsignal(signal.SIGTERM)
    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert caught == [before]
