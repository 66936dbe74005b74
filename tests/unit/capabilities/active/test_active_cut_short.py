"""verify --active cut short (issue 42's two last gaps), on this machine with the real node-side sh:
- an all-reduce told to stop (the first Ctrl-C: run.stop_script with its run's token) ends at once, torchrun's
  whole process group with it, and is not tested, never judged; with its controller gone it hangs itself up; no
  process nor temporary directory is left after either (before: it ran to its end, up to 300 s);
- a node lost mid-load (core/connection.py's Lost, with the stdout that came back before the loss) is judged on the
  samples it streamed until then: the loss is its finding, with when and its GPUs' peak, or a consequence of the
  supply's finding where the samples show one (a brown-out that took the node down); with no sample, the run was
  cut off as before. (tests/lab/test_verify_active_cut_short.py: the same over SSH on the basement lab.)"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from provision.capabilities.active import judge, outcome, run, sampler
from provision.capabilities.active.settings import ActiveSettings
from provision.commands import active
from provision.core.connection import LocalConnection, Lost
from provision.core.stopping import Stop
from provision.verify import FAIL

from builders.connection import FakeLocalConnection, lost_after
from builders.samples import HEADER, V100, row
from builders.simnodes import SECONDS, SimpleSettings, gone_within, left, node, node_state, ours
from paths import GPUSIM

__all__ = ["node"]  # the fixture, used by name
WAITING = "33.3"  # the stand-in torchrun's sleep: its process is found by it


@pytest.fixture
def wrapper(tmp_path, monkeypatch):
    """A torchrun wrapper whose torchrun waits at its rendezvous (a peer that never comes), and the program."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setenv("TMPDIR", str(temp))
    torchrun = tmp_path / "grp-torchrun"
    torchrun.write_text(f"#!/bin/sh\necho \"rank 0 waiting at $PROVISION_RDZV_HOST\"\nsleep {WAITING}\necho done\n")
    program = tmp_path / "provision-allreduce"
    program.write_text("#!/bin/sh\n")
    for path in (torchrun, program):
        path.chmod(0o755)
    yield SimpleNamespace(torchrun=str(torchrun), program=str(program), temp=temp)
    for pid in waiting():
        os.kill(pid, signal.SIGKILL)


def waiting() -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            said = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state != "Z" and said.startswith(b"sleep " + WAITING.encode()):
            found.append(int(entry.name))
    return found


def script(wrapper, token: str) -> str:
    check = f"[ -x {wrapper.torchrun} ] || {{ echo 'not there'; exit 3; }}"
    return run.allreduce_script(check, [wrapper.torchrun, wrapper.program, "--mib", "4"],
                                {"PROVISION_RDZV_HOST": "127.0.0.1"}, token)


def test_an_all_reduce_told_to_stop_ends_at_once_with_its_process_group(wrapper):
    proc = subprocess.Popen(["sh", "-c", script(wrapper, "a1")], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            text=True)
    time.sleep(1.5)
    assert waiting() and left(wrapper.temp)  # torchrun at its rendezvous
    told = subprocess.run(["sh", "-c", run.stop_script("a1")], capture_output=True, text=True)
    assert told.stdout.strip() == "1"
    started = time.monotonic()
    out, _ = proc.communicate(timeout=15)
    assert time.monotonic() - started < 3, "the stop waited for the all-reduce"
    assert run.words_after(out, "stopped") == "SIGTERM" and "rank 0 waiting at 127.0.0.1" in out, out
    assert gone_within(3, wrapper.temp, waiting), (waiting(), left(wrapper.temp))


def test_an_all_reduce_whose_controller_is_gone_hangs_itself_up(wrapper):
    proc = subprocess.Popen(["sh", "-c", script(wrapper, "a2")], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
    time.sleep(1.5)
    assert waiting()
    proc.stdout.close()  # as sshd's end of the channel closes when provision is killed (kill -9) or cut off
    assert proc.wait(timeout=5) == 129
    assert gone_within(3, wrapper.temp, waiting), (waiting(), left(wrapper.temp))


def group_state(name: str, wrapper):
    """A node of the group "grp" with a launcher (one process: no all-reduce of its own) and an nccl block."""
    from provision.capabilities.gpu.model import GpuFacts, NvidiaFacts
    from provision.capabilities.host import HostFacts

    launcher = SimpleNamespace(group="grp", wrapper_path=wrapper.torchrun, nproc_per_node="1")
    settings = SimpleNamespace(launcher=launcher, nccl=SimpleNamespace(socket_ifname=None), active=None, gpu=None)
    gpus = [GpuFacts(index=0, uuid="GPU-0", name="NVIDIA GeForce RTX 3090", bus_id="00000000:01:00.0")]
    return SimpleNamespace(host=SimpleNamespace(name=name, address="127.0.0.1", groups=["grp"], settings=settings),
                           facts=HostFacts(nvidia=NvidiaFacts(state="ok", gpus=gpus)), conn=LocalConnection(name))


def test_a_stop_during_the_groups_all_reduce_stops_it_on_every_node_and_it_is_not_tested(wrapper, monkeypatch):
    monkeypatch.setattr(active, "allreduce_path", lambda host: wrapper.program)
    states = [group_state("blade-1", wrapper), group_state("blade-2", wrapper)]
    runs = {s.host.name: run.ActiveRun(5) for s in states}
    stop = Stop(lambda words: None)
    threading.Timer(1.5, stop.request, args=(signal.SIGINT,)).start()
    started = time.monotonic()
    active.all_reduce(states, runs, {}, stop, "a3")
    assert time.monotonic() - started < 8, "the all-reduce ran on after the stop"
    for found in runs.values():
        assert found.fabric == [] and found.allreduce == {}  # never judged, never a figure
        assert found.fabric_notes == ["the all-reduce of grp not tested: stopped by SIGINT during it"]
        assert outcome.untested(found) == ["ports and all-reduce: the all-reduce of grp not tested: stopped by "
                                           "SIGINT during it"]
    assert gone_within(3, wrapper.temp, waiting), (waiting(), left(wrapper.temp))


def test_a_node_lost_mid_load_is_judged_on_the_samples_it_sent_and_the_loss_is_its_finding(node):
    state = node_state("node1", SimpleSettings(load_command=[sys.executable, str(GPUSIM), "load"]))
    listed = subprocess.run(["nvidia-smi", "--query-gpu=uuid,pci.bus_id", "--format=csv,noheader"], check=True,
                            capture_output=True, text=True).stdout.splitlines()
    for gpu, line in zip(state.facts.nvidia.gpus, listed):  # the simulated GPUs, as the facts read them
        gpu.uuid, gpu.bus_id = (cell.strip() for cell in line.split(","))
    state.conn = FakeLocalConnection("node1", lost_after(3.5, "lost the connection to node1: it stopped answering"))
    found = active.one(state, float(SECONDS), "l1")
    assert not found.error and found.lost.startswith("lost at +") and f"of the {SECONDS} s load" in found.lost
    assert "it stopped answering" in found.lost  # why, as the connection said it
    assert len(found.samples) == 2 and all(len(rows) >= 10 for rows in found.samples.values())
    assert 1.0 < found.seconds < 4.0  # the last sample that came back
    assert outcome.untested(found) == [f"load: cut short: the node was {found.lost}"]
    verdicts = active.lost_verdicts({"node1": found, "other": run.ActiveRun(5)}, {})
    assert set(verdicts) == {"node1"}  # a node not lost is the checks' to judge
    verdict = verdicts["node1"]
    [cause] = verdict.findings
    assert verdict.status == FAIL and verdict.message == found.lost
    assert cause.failure.expected == "the node answering through the load" and not cause.consequences
    assert cause.failure.found.startswith(found.lost + "; its GPUs' instant draws peaked at ")
    assert "BMC" in cause.failure.fix
    assert {f["figure"] for f in outcome.figures(found)} >= {"power_peak_watts", "power_sum_peak_watts"}
    assert gone_within(4, node), (ours(), left(node))


def lost_run(rows: list[str], budget: float | None) -> run.ActiveRun:
    found = run.ActiveRun(4.0, [judge.target_of(g) for g in V100], power_budget=budget,
                          lost="lost at +4 s of the 60 s load (its last sample came then): lost the connection")
    found.samples = sampler.by_gpu(sampler.parse("\n".join([HEADER, *rows])))
    return found


def test_a_brownout_that_took_the_node_down_is_the_finding_and_the_loss_follows_it():
    rows = [row(t / 10, gpu, instant="480.00" if t >= 30 else "190.00") for t in range(41) for gpu in (0, 1)]
    verdict = active.lost_verdicts({"v100": lost_run(rows, budget=900)}, {})["v100"]
    [cause] = verdict.findings
    assert cause.failure.expected.startswith("the GPUs' instant draws within the 900 W")
    assert cause.failure.found.startswith("960 W at +3.0 s")  # its peak
    [loss] = cause.consequences
    assert loss.expected == "the node answering through the load" and "peaked at 960 W together" in loss.found
    # under its budget, the same samples show no supply that failed: the loss is the finding
    [alone] = active.lost_verdicts({"v100": lost_run(rows, budget=2000)}, {})["v100"].findings
    assert alone.failure.expected == "the node answering through the load" and not alone.consequences


def test_a_power_brake_before_the_loss_is_the_finding_it_follows():
    rows = [row(t / 10, gpu, reasons="0x0000000000000080" if gpu == 1 and t > 10 else "0x0000000000000000")
            for t in range(41) for gpu in (0, 1)]
    [cause] = active.lost_verdicts({"v100": lost_run(rows, budget=None)}, {})["v100"].findings
    assert cause.failure.expected.endswith("under load without a power brake")
    assert [c.expected for c in cause.consequences] == ["the node answering through the load"]


def test_a_node_lost_before_any_sample_came_back_was_cut_off_as_before():
    lost = Lost("lost the connection to node1", stdout=f"{run.MARK}samples\n\n")
    found = active._lost(lost, 60, [], ActiveSettings(), ports=True)
    assert found.error == "the run was cut off: lost the connection to node1" and not found.lost
    assert active.lost_verdicts({"node1": found}, {}) == {}  # unreachable, as its re-read says
