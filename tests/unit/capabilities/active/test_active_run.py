"""One node's active run (capabilities/active/run.py, commands/active.py): the sh that runs on the node, what it
prints read back, the Python chosen for the load, and the refusals (GPU processes, Slurm jobs) before any load."""

from __future__ import annotations

import subprocess
from types import SimpleNamespace

from builders.facts import facts
from builders.gpus import gpu
from builders.hosts import host
from provision.capabilities.active import run
from provision.capabilities.active.judge import Target
from provision.capabilities.active.settings import ActiveSettings
from provision.capabilities.slurm.facts import SlurmNodeState
from provision.commands import active
from provision.core.stopping import Stop

from builders.connection import FakeConnection, FakeLocalConnection

TARGETS = [Target("GPU-0", "GPU0", "00000000:01:00.0", cap=200.0)]
M = run.MARK


def test_the_node_script_is_valid_sh_and_quotes_the_load_once():
    argv, stdin = run.load_argv(["/opt/site burn", "--all"], "python3", 30)
    assert argv == ["/opt/site burn", "--all", "--seconds", "30"] and stdin is None
    script = run.node_script(argv, 100)
    assert "'/opt/site burn' --all --seconds 30" in script and "-lms 100" in script
    assert subprocess.run(["sh", "-n", "-c", script], capture_output=True).returncode == 0
    argv, stdin = run.load_argv(None, "/opt/venv/bin/python3", 5)
    assert argv == ["/opt/venv/bin/python3", "-", "--seconds", "5"] and "import torch" in stdin


def test_the_python_with_torch_is_the_setting_else_beside_torchrun_else_python3():
    assert run.python_for("/opt/py/bin/python", "/opt/venv/bin/torchrun") == "/opt/py/bin/python"
    assert run.python_for(None, "/opt/venv/bin/torchrun") == "/opt/venv/bin/python3"
    assert run.python_for(None, "torchrun") == "python3" and run.python_for(None, None) == "python3"


def test_what_the_node_printed_reads_back_into_a_run():
    text = "\n".join([
        f"{M}samples",
        "timestamp, uuid, power.draw [W], utilization.gpu [%]",
        "2026/11/25 17:00:00.000, GPU-0, 190.00, 100",
        "2026/11/25 17:00:00.100, GPU-0, 191.00, 100",
        f"{M}load 0",
        "some warning the load printed first",
        '{"seconds": 5, "gpus": [{"index": 0, "uuid": "GPU-0", "tflops": 78.1, "error": ""}]}',
        f"{M}stderr",
        "a line on stderr"])
    found = run.parse(text, 5, TARGETS)
    assert found.load_rc == 0 and found.load["gpus"][0]["tflops"] == 78.1 and found.load_stderr == "a line on stderr"
    assert [s.power for s in found.samples["GPU-0"]] == [190.0, 191.0] and not found.refused and not found.error
    busy = run.parse(f"{M}busy\n4242, python, GPU-0\n", 5, TARGETS)
    assert busy.refused == "processes run on its GPUs: 4242, python, GPU-0" and busy.samples == {}
    cut = run.parse("", 5, TARGETS)
    assert cut.error == "the run ended before it reported: no output"


def state(slurm: SlurmNodeState | None = None, gpus: int = 1, active: dict | None = None):
    """The V100 node as a run holds it: its GPUs (UUIDs GPU-0, ... as the run's output names them), its Slurm
    state and provision_active block."""
    v100s = [gpu(i, "V100", uuid=f"GPU-{i}") for i in range(gpus)]
    return SimpleNamespace(host=host("v100-1", provision_active=active), facts=facts(gpus=v100s, slurm_node=slurm),
                           conn=FakeConnection("v100-1"))


def test_a_node_with_slurm_jobs_or_no_gpu_is_refused_before_anything_runs_on_it():
    for words in (("ALLOCATED",), ("MIXED", "DRAIN"), ("COMPLETING",)):
        busy = state(SlurmNodeState(name="v100-1", states=words))
        found = active.one(busy, 5)
        assert found.refused == f"Slurm has jobs on it (State={'+'.join(words)})" and busy.conn.sent == []
    empty = state(gpus=0)
    assert active.one(empty, 5).refused.startswith("no GPU was read") and empty.conn.sent == []
    idle = state(SlurmNodeState(name="v100-1", states=("IDLE",)),
                 active={"load_command": ["/usr/local/sbin/burn"], "interval_ms": 50})
    active.one(idle, 5)
    [(argv, stdin, timeout)] = idle.conn.sent
    assert argv[:2] == ["sh", "-c"] and "/usr/local/sbin/burn --seconds 5" in argv[2] and "-lms 50" in argv[2]
    assert stdin is None and timeout == 5 + active.SLACK_S


def checked(found: run.ActiveRun):
    """check_gpus_hold_up_under_load's verdict: the CheckFailed, "skip: why", or None."""
    import pytest

    from provision.capabilities.active.checks import check_gpus_hold_up_under_load
    from provision.core.checks import CheckFailed

    node = SimpleNamespace(active=found, notes=[])
    try:
        check_gpus_hold_up_under_load(node)
    except CheckFailed as failed:
        return failed
    except pytest.skip.Exception as skipped:
        return f"skip: {skipped.msg}", node.notes
    return None


def test_the_check_skips_what_was_not_loaded_and_fails_a_slow_or_failed_gpu():
    # not loaded: skipped here, and the verdict's "not tested" (test_active_untested_verdicts.py), not a note
    assert checked(run.ActiveRun(5, refused="Slurm has jobs on it (State=ALLOCATED)")) == (
        "skip: refused: Slurm has jobs on it (State=ALLOCATED)", [])
    no_torch = run.ActiveRun(5, TARGETS, load_rc=run.NOT_APPLICABLE, load={"error": "no torch in this Python"})
    assert checked(no_torch)[0] == "skip: not applicable: no torch in this Python"
    targets = [Target(f"GPU-{i}", f"GPU{i}", f"00000000:{i + 1:02X}:00.0") for i in range(4)]
    gpus = [{"uuid": "GPU-0", "tflops": 80.0, "error": ""}, {"uuid": "GPU-1", "tflops": 52.0, "error": ""},
            {"uuid": "GPU-2", "tflops": 0.0, "error": "RuntimeError: CUDA error: an illegal memory access"},
            {"uuid": "GPU-3", "tflops": 79.0, "error": ""}]
    failed = checked(run.ActiveRun(5, targets, load_rc=1, load={"gpus": gpus}))
    assert [(f.found, f.about) for f in failed.findings] == [
        ("nvidia-smi -lms recorded nothing", ()),
        ("52 TFLOP/s", ("0000:02:00",)),
        ("it stopped: RuntimeError: CUDA error: an illegal memory access", ("0000:03:00",))]
    assert failed.findings[1].expected == "GPU1 (0000:02:00.0) near the node's median 79 TFLOP/s"
    silent = checked(run.ActiveRun(5, targets, load_rc=2, load_stderr="Traceback ...\nImportError: no module x"))
    assert silent.findings[1].found == "the load exited 2: ImportError: no module x"


def test_the_active_block_is_checked_like_every_block():
    import pytest
    from pydantic import ValidationError

    assert ActiveSettings.model_validate({}).interval_ms == 100
    for wrong in ({"interval_ms": 5}, {"python": "python3; rm -rf /"}, {"load_command": "burn"}, {"lod": 1}):
        with pytest.raises(ValidationError):
            ActiveSettings.model_validate(wrong)


def test_a_gpu_slower_than_its_last_good_run_is_found_and_a_passing_run_becomes_the_last_good(tmp_path,
                                                                                               monkeypatch):
    from provision.capabilities.active import history

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    assert history.last_good("v100-1") == {}
    gpus = [{"uuid": "GPU-0", "tflops": 78.0, "error": ""}, {"uuid": "GPU-1", "tflops": 0.0, "error": "lost"}]
    active.remember_good({"v100-1": run.ActiveRun(5, load={"gpus": gpus})}, passed={"v100-1"})
    active.remember_good({"v100-2": run.ActiveRun(5, load={"gpus": gpus})}, passed=set())  # failed: not kept
    assert history.last_good("v100-1") == {"GPU-0": 78.0} and history.last_good("v100-2") == {}
    assert [p.name for p in (tmp_path / "provision" / "active").iterdir()] == ["v100-1.json"]  # no temp file left
    slower = [{"uuid": "GPU-0", "tflops": 60.0, "error": ""}]
    failed = checked(run.ActiveRun(5, [Target("GPU-0", "GPU0", "00000000:01:00.0")], load_rc=0,
                                   load={"gpus": slower}, last_good=history.last_good("v100-1")))
    [_no_samples, finding] = failed.findings  # (no samples given here: the sampler's own finding first)
    assert finding.expected == "GPU0 (0000:01:00.0) near its last good run's 78 TFLOP/s"
    assert finding.found == "60 TFLOP/s (77% of it)" and finding.about == ("0000:01:00",)


def test_a_host_lost_during_the_run_is_left_unread_so_verify_reports_it_unreachable(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    answering, lost = state(gpus=1), state(gpus=1)
    lost.host = host("v100-2")
    seen = []

    class Engine:
        stop = Stop(print)  # never asked to

        def read_into(self, st, lock):
            seen.append((st.host.name, lock))
            return st is answering

    runs = active.load_each(Engine(), [answering, lost], 5, forks=2)
    assert sorted(seen) == [("v100-1", False), ("v100-2", False)]  # read again without the lock
    assert answering.facts is not None and lost.facts is None
    assert set(runs) == {"v100-1", "v100-2"} and runs["v100-1"].error  # the fake node printed nothing


def test_inside_its_own_slurm_job_a_node_is_loaded_unless_another_job_is_on_it(monkeypatch):
    """The sbatch script for active runs: verify runs --local inside its job, so the node is ALLOCATED by that
    job; squeue on the node says whether any other job is there too."""
    def squeue_lists(jobs: str) -> FakeLocalConnection:
        return FakeLocalConnection("v100-1", lambda argv, stdin, timeout: jobs if argv[0] == "squeue" else "")

    monkeypatch.setenv("SLURM_JOB_ID", "41")
    burn = {"load_command": ["/usr/local/sbin/burn"]}
    alone = state(SlurmNodeState(name="v100-1", states=("ALLOCATED",)), active=burn)
    alone.conn = squeue_lists("41\n")
    assert active.one(alone, 5).refused == ""
    assert alone.conn.argvs()[0] == ["squeue", "--noheader", "--nodelist", "v100-1", "--format", "%A"]
    assert alone.conn.argvs()[1][:2] == ["sh", "-c"]  # loaded
    shared = state(SlurmNodeState(name="v100-1", states=("MIXED",)), active=burn)
    shared.conn = squeue_lists("41\n77\n")
    assert active.one(shared, 5).refused == "Slurm has jobs on it (State=MIXED; jobs 77 beside this one)"
    assert len(shared.conn.sent) == 1
    remote = state(SlurmNodeState(name="v100-1", states=("ALLOCATED",)), active=burn)  # over SSH: not ours
    assert active.one(remote, 5).refused == "Slurm has jobs on it (State=ALLOCATED)" and remote.conn.sent == []
