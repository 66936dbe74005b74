"""Stop means stop under load (issue 42), on the basement lab (conftest's `basement`): SIGINT 12 s into
`verify --active --duration 60` printed nothing until 64.6 s, then "Aborted!", rc 1; a killed provision left the
load and the sampler running on every node until --duration ended, and /tmp/provision-active.XXXXXX behind.
Now the first SIGINT stops every node's load within seconds, the verdicts of what was measured are printed, rc
130; and a provision killed with SIGKILL leaves nodes that stop and clean up by themselves. Each test fails on
d9c2a07. The nodes: the V100 box and the 4090 riser box, loaded by the GPU simulator's stand-in."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import pytest

from builders.activelab import NODES, loaded, on_nodes

pytestmark = pytest.mark.lab


def start(lab) -> subprocess.Popen:
    """verify --active --duration 60 on both nodes, returned once both are loading."""
    proc = subprocess.Popen([sys.executable, "-m", "provision", "verify", str(loaded(lab, "active-stop")), "--active", "--duration",
                             "60", "--limit", ",".join(NODES)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "COLUMNS": "1000"})
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        running = on_nodes(lab)
        if all(any("gpusim load" in line for line in lines) for lines in running.values()):
            return proc
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.5)
    proc.kill()
    raise AssertionError(f"the loads never started: {running}")


def nothing_left_within(lab, seconds: float) -> tuple[bool, dict]:
    deadline = time.monotonic() + seconds
    while True:
        found = on_nodes(lab)
        if not any(found.values()):
            return True, found
        if time.monotonic() > deadline:
            return False, found
        time.sleep(0.5)


def test_sigint_under_load_prints_the_verdicts_within_seconds_and_stops_every_node(basement):
    assert basement.apply()[0] == 0
    proc = start(basement)
    time.sleep(3)
    proc.send_signal(signal.SIGINT)
    signalled = time.monotonic()
    try:
        out, err = proc.communicate(timeout=40)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    took = time.monotonic() - signalled
    assert proc.returncode == 130, (proc.returncode, took, out, err)
    assert took < 15, f"{took:.1f} s from SIGINT to the verdicts"
    assert out.startswith("Stopped by SIGINT: every node's load was stopped"), out
    for node in NODES:
        assert re.search(rf"^{node} +NOT TESTED ", out, re.M) and "untested load: stopped by SIGINT after" in out, out
    clean, found = nothing_left_within(basement, 5)
    assert clean, found
    print(f"SIGINT to verdicts: {took:.1f} s")


def test_a_killed_provision_leaves_nodes_that_stop_and_clean_up_by_themselves(basement):
    assert basement.apply()[0] == 0
    proc = start(basement)
    time.sleep(2)
    proc.kill()  # SIGKILL: no handler runs, only the connections close
    proc.communicate()
    killed = time.monotonic()
    clean, found = nothing_left_within(basement, 15)
    assert clean, found  # before: the loads ran on to the end of --duration, the directories stayed
    print(f"nodes clean {time.monotonic() - killed:.1f} s after provision was killed")
