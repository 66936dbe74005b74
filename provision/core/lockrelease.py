"""Giving a run's host locks back: a host done (release), and a run abandoned by a second signal (abandon),
which gives back within seconds every lock it may hold, a take still in flight included."""

from __future__ import annotations

import threading

from provision.core.hostlock import Owner
from provision.core.hostread import give_back
from provision.core.hoststate import HostState


def release_lock(state: HostState, owner: Owner, timeout: float = 30, maybe: bool = False) -> None:
    """Give the host's lock back (best effort: a lost host's lock goes stale, for the next run to take). With
    maybe, also where this run may be taking it now: the release removes only this run's own lock. The host
    counts as locked until the release is done, so that an abandon never takes it for given back."""
    if (state.locked or maybe) and state.conn is not None:
        give_back(state.conn, owner, state.not_taking, timeout, maybe)
        state.locked = False


def release(state: HostState, owner: Owner) -> None:
    """Done with the host: its lock given back, its connection closed, the commands run on it counted."""
    if state.conn is None:
        return
    try:
        release_lock(state, owner)
    finally:
        state.conn.close()
    state.result.commands = state.conn.commands_run


def abandon(states: list[HostState], owner: Owner) -> None:
    """Give back the locks that can be given within seconds, then close every connection (the commands in flight
    on the hosts may finish or not; the next run reads what they did)."""
    releasing = [threading.Thread(target=release_lock, args=(s, owner, 10, True), daemon=True) for s in states]
    for thread in releasing:
        thread.start()
    for thread in releasing:
        thread.join(12)
    for state in states:
        if state.conn is not None:
            try:
                state.conn.close()
            except Exception:  # a connection in use by a worker: closing is all we want of it
                pass
