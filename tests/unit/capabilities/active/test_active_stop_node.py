"""Stop means stop under load (issue 42): the real node script (capabilities/active/run.py) run by sh on this
machine, the GPU simulator as nvidia-smi and `gpusim load` as the load, as `provision verify --local --active`
runs it. Told to stop (stop_script, what the first Ctrl-C sends), it stops the load and the sampler at once and
reports what was sampled; with its controller gone (the pipe its stdout goes to closed: provision killed, the
SSH channel gone) it hangs itself up; after either, no load, sampler or temporary directory is left. Then the
load program's own stop, and the whole CLI: SIGINT a few seconds into `verify --local --active --duration 60`
prints the verdicts within seconds and exits 130. (tests/lab/test_verify_active_stop.py: the same over SSH.)"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
import time

import yaml

from provision.capabilities.active import run
from provision.commands import active
from provision.core.stopping import Stop

from builders.simnodes import (INTERVAL_MS, SECONDS, SimpleSettings, gone_within, left, node, node_state, ours,
                               script)
from paths import GPUSIM

__all__ = ["node"]  # the fixture, used by name

def test_told_to_stop_the_node_script_stops_its_load_and_sampler_at_once_and_reports_what_it_sampled(node):
    started = time.monotonic()
    proc = subprocess.Popen(["sh", "-c", script("t1")], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True)
    time.sleep(2.5)
    assert ours() and left(node)  # loading
    told = subprocess.run(["sh", "-c", run.stop_script("t1")], capture_output=True, text=True)
    assert told.stdout.strip() == "1"  # its run, and no other
    out, _ = proc.communicate(timeout=15)
    assert time.monotonic() - started < 6, "the stop took as long as the load"
    found = run.parse(out, float(SECONDS), [])
    assert found.stopped == "SIGTERM" and not found.error and 1.0 < found.seconds < 4.0
    assert len(found.samples) == 2 and all(len(rows) >= 10 for rows in found.samples.values())
    assert gone_within(3, node), (ours(), left(node))


def test_with_its_controller_gone_the_node_script_ends_itself_and_leaves_nothing(node):
    proc = subprocess.Popen(["sh", "-c", script("t2")], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
    time.sleep(2.5)
    assert ours() and left(node)
    proc.stdout.close()  # as sshd's end of the channel closes when provision is killed (kill -9) or cut off
    assert proc.wait(timeout=10) == 129  # hung up by its watchdog
    assert gone_within(4, node), (ours(), left(node))


def test_a_stop_reaches_every_loading_node_and_the_runs_come_back_with_their_samples(node):
    """commands/active.py's loads(): the first Ctrl-C (stop.request) tells each node's run to stop; a node not
    started yet is never started."""
    settings = SimpleSettings(load_command=[sys.executable, str(GPUSIM), "load"])
    states = [node_state("node1", settings), node_state("node2", settings)]
    stop = Stop(lambda words: None)
    threading.Timer(2.5, stop.request, args=(signal.SIGINT,)).start()
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=1) as pool:  # --forks 1: node2 waits for node1
        runs = active.loads(pool, states, float(SECONDS), stop)
    assert time.monotonic() - started < 8
    assert runs["node1"].stopped == "SIGINT" and runs["node1"].samples and not runs["node1"].error
    assert runs["node2"].refused == "the run was stopped (SIGINT) before its load started"
    assert gone_within(3, node), (ours(), left(node))


FAKE_TORCH = '''
import time
__version__ = "0-fake"
bfloat16 = float16 = "dtype"
class _Props:
    uuid = "fake-0"
class cuda:
    is_available = staticmethod(lambda: True)
    device_count = staticmethod(lambda: 1)
    get_device_properties = staticmethod(lambda i: _Props())
    get_device_capability = staticmethod(lambda i: (8, 0))
    synchronize = staticmethod(lambda i: None)
    class device:
        def __init__(self, i): pass
        def __enter__(self): return self
        def __exit__(self, *exc): return False
def randn(*args, **kwargs): return None
def matmul(a, b): time.sleep(0.005)
'''


def test_the_load_program_told_to_stop_reports_what_it_sustained_until_then(tmp_path):
    """load_program.py with a stand-in torch (matmul sleeps): SIGTERM a second in ends a 60 s run at once."""
    (tmp_path / "torch.py").write_text(FAKE_TORCH)
    proc = subprocess.Popen([sys.executable, "-", "--seconds", "60"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONPATH": str(tmp_path)})
    proc.stdin.write(run.PROGRAM.read_text())
    proc.stdin.close()
    time.sleep(1.5)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=5) == 0
    said = json.loads(proc.stdout.read().strip().splitlines()[-1])
    assert said["stopped"] is True and 1.0 <= said["seconds"] < 3.0
    [gpu] = said["gpus"]
    assert gpu["uuid"] == "GPU-fake-0" and gpu["tflops"] > 0 and gpu["error"] == ""


def test_sigint_under_load_prints_the_verdicts_within_seconds_and_exits_130(node, tmp_path):
    inventory = tmp_path / "local.yaml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"node1": {"ansible_connection": "local", "provision_active": {
        "load_command": [sys.executable, str(GPUSIM), "load"], "interval_ms": INTERVAL_MS}}}}}))
    proc = subprocess.Popen([sys.executable, "-m", "provision", "verify", str(inventory), "--active", "--duration",
                             SECONDS, "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "COLUMNS": "1000"})
    deadline = time.monotonic() + 30
    while not left(node) and time.monotonic() < deadline:  # the facts read first, then the load
        time.sleep(0.1)
    time.sleep(2)
    assert ours(), "the load never started"
    proc.send_signal(signal.SIGINT)
    signalled = time.monotonic()
    out, err = proc.communicate(timeout=30)
    took = time.monotonic() - signalled
    assert proc.returncode == 130, err
    assert took < 10, f"{took:.1f} s from SIGINT to the verdicts"
    data = json.loads(out)
    [host] = data["hosts"]
    assert data["stopped_by"] == "SIGINT" and host["status"] == "not tested"
    assert host["not_tested"][0].startswith("load: stopped by SIGINT after "), host["not_tested"]
    assert {f["figure"] for f in host["figures"]} >= {"power_peak_watts", "sm_clock_median_mhz"}
    assert gone_within(3, node), (ours(), left(node))
    print(f"SIGINT to verdicts: {took:.1f} s")


def test_provisions_own_load_program_still_reads_its_program_from_the_node_scripts_stdin(node, tmp_path):
    """The load runs in the background now (to be stopped at once): its stdin is still the program sent."""
    (tmp_path / "torch.py").write_text(FAKE_TORCH)
    argv, stdin = run.load_argv(None, sys.executable, 2)
    done = subprocess.run(["sh", "-c", run.node_script(argv, INTERVAL_MS, "t3")], input=stdin, capture_output=True,
                          text=True, timeout=30, env={**os.environ, "PYTHONPATH": str(tmp_path)})
    found = run.parse(done.stdout, 2, [])
    assert found.load_rc == 0 and found.load["gpus"][0]["tflops"] > 0 and not found.stopped, done.stdout[-500:]
    assert not left(node)


def test_after_a_stop_no_port_test_or_all_reduce_starts_and_each_node_with_ports_says_so():
    from types import SimpleNamespace

    states = [SimpleNamespace(host=SimpleNamespace(name=name, settings=SimpleNamespace(nccl=nccl)))
              for name, nccl in (("blade-1", {"socket_ifname": "ens803f"}), ("v100-1", None))]
    runs = {"blade-1": run.ActiveRun(5), "v100-1": run.ActiveRun(5)}
    stop = Stop(lambda words: None)
    assert active._stopped_before(stop, states, runs, "the all-reduces") is True and not runs["blade-1"].fabric_notes
    stop.request(signal.SIGTERM)
    assert active._stopped_before(stop, states, runs, "the all-reduces") is False
    assert runs["blade-1"].fabric_notes == ["the all-reduces not tested: the run was stopped (SIGTERM) before them"]
    assert runs["v100-1"].fabric_notes == []  # no port, no all-reduce: nothing it lacks
