"""A second Ctrl-C gives back every lock the run may hold, the one whose take is still in flight included."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

from provision.capabilities.registry import EXTENSIONS
from provision.core.run import Engine, HostState, RunOptions

from builders.connection import FakeConnection


class TakeInFlight(FakeConnection):
    """A host whose command that takes the lock is still running when the abandon's release is sent."""

    def __init__(self):
        super().__init__("node1", self.reply)
        self.said: list[str] = []
        self.taking = threading.Event()

    def reply(self, argv: list[str], stdin: str | None, timeout: float | None) -> str:
        if argv[3:4] == ["provision-unlock"]:  # sh -c RELEASE provision-unlock LOCK_DIR RUN
            self.said.append("release " + argv[3])
            return ""
        self.said.append("take sent")  # the facts batch, which takes the lock
        self.taking.set()
        time.sleep(0.5)  # the take runs on the host: the lock is made at its end
        self.said.append("take done")
        return ""


def test_the_release_of_an_abandon_waits_for_a_take_in_flight():
    engine = Engine([], RunOptions(lock_wait=0), lambda host: None, EXTENSIONS)
    conn = TakeInFlight()
    state = HostState(SimpleNamespace(name="node1"), conn=conn, generation="7 boot")
    worker = threading.Thread(target=engine.read_into, args=(state, True))
    worker.start()
    assert conn.taking.wait(5)
    engine.release_lock(state, timeout=10, maybe=True)  # what _abandon runs for every host, at once
    worker.join(5)
    assert conn.said[:2] == ["take sent", "take done"] and conn.said[2].startswith("release ")
    assert state.locked is False


def test_a_release_without_a_take_in_flight_goes_at_once():
    engine = Engine([], RunOptions(lock_wait=0), lambda host: None, EXTENSIONS)
    conn = TakeInFlight()
    state = HostState(SimpleNamespace(name="node1"), conn=conn)
    started = time.monotonic()
    engine.release_lock(state, timeout=10, maybe=True)
    assert conn.said and conn.said[0].startswith("release ") and time.monotonic() - started < 0.5
