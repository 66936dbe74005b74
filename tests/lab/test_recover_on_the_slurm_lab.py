"""provision recover on a Slurm cluster (issue 47; the Slurm reboot lab, tests/lab/slurm_reboot.yaml: a controller
and two GPU nodes of two simulated V100s). A GPU that asks for a reset on a node running a job: recover drains the
node with provision's reason, waits for the job to end (or, with --now, cancels it), resets the GPU, verifies and
resumes the node; a node someone else drained is never touched, fault and all. A recover stopped while it waits
for the job leaves the node drained with provision's reason and says so; a later recover goes on. A node drained
by verify --active for a cause only a load shows is resumed only once a short load passes."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from builders.slurmlab import job_on, job_state, node_lines
from builders.stacklab import on, wait_for

from provision.commands.recovery.ladder import UNDER_LOAD
from provision.core.results import EXIT_OK, EXIT_TASK_FAILED, EXIT_WOULD_CHANGE

pytestmark = pytest.mark.lab

REPO = Path(__file__).resolve().parents[2]
LAB = REPO / "tests" / "lab" / "slurm_reboot.yaml"
HEAD, NODES = "lab-head", ["lab-gpu-1", "lab-gpu-2"]
OURS = "provision-verify: recover reset: "  # the reason recover drains with before a reset


@pytest.fixture(scope="module")
def slurm_lab(lab_alone):
    def up(cluster):
        cluster.lab("up", "--like", str(LAB))
        code, result = cluster.apply()
        assert code == EXIT_OK, result
        wait_for("both GPU nodes idle", lambda: in_service(cluster), timeout=120)

    with lab_alone("recover-slurm", up) as cluster:
        yield cluster


@pytest.fixture
def lab(slurm_lab):
    """The converged Slurm lab; after each test, every fault cleared, every job gone, every node in service."""
    yield slurm_lab
    on(slurm_lab, HEAD, "scancel --user=root || true")
    for node in NODES:
        slurm_lab.lab("fault", node, "clear")
        slurm_lab.ssh(HEAD, f"scontrol update NodeName={node} State=RESUME")
    wait_for("both GPU nodes idle", lambda: in_service(slurm_lab), timeout=120)


def in_service(lab, nodes: list[str] = NODES) -> bool:
    lines = node_lines(lab, HEAD)
    return all(lines.get(n) == "idle none" for n in nodes)


def resumed(lab, node: str) -> None:
    """Back in service: idle, no reason (slurmctld may mark it not responding, idle*, for a poll after a load)."""
    assert node_lines(lab, HEAD)[node].startswith("idle") and node_lines(lab, HEAD)[node].endswith(" none")
    wait_for(f"{node} idle and responding", lambda: in_service(lab, [node]), timeout=60)


def recover_argv(lab, *more: str) -> list[str]:
    return [sys.executable, "-m", "provision", "recover", str(lab.inventory), "--ssh-config", str(lab.ssh_config),
            "--json", "--log", str(lab.log), "--wait", "300", *more]


def recovered(lab, *more: str) -> tuple[int, dict[str, dict]]:
    """`provision recover --json` on the lab: (exit code, host -> its recovery)."""
    proc = subprocess.run(recover_argv(lab, *more), cwd=REPO, capture_output=True, text=True, timeout=600,
                          stdin=subprocess.DEVNULL)
    assert proc.stdout.strip(), proc.stderr
    return proc.returncode, {r["host"]: r for r in json.loads(proc.stdout)["hosts"]}


def actions(lab, node: str) -> list[str]:
    return on(lab, node, "nvidia-smi --query-gpu=gpu_recovery_action --format=csv,noheader").split()


class Watch(threading.Thread):
    """sinfo every second while recover runs: each node's states and reasons as Slurm showed them."""

    def __init__(self, lab):
        super().__init__(daemon=True)
        self.lab, self.seen, self.done = lab, {n: [] for n in NODES}, threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            lines = node_lines(self.lab, HEAD)
            for node in NODES:
                if node in lines and (not self.seen[node] or self.seen[node][-1] != lines[node]):
                    self.seen[node].append(lines[node])
            time.sleep(1)


def test_a_reset_waits_for_the_job_and_a_node_drained_by_someone_else_is_left_alone(lab):
    busy, theirs = NODES
    job = job_on(lab, HEAD, busy, 30, "reset")
    on(lab, HEAD, f"scontrol update NodeName={theirs} State=DRAIN Reason='RMA 4711'")
    for node in NODES:
        lab.lab("fault", node, "gpu-reset-required", "--gpu", "0")
    watch = Watch(lab)
    watch.start()
    started = time.monotonic()
    try:
        code, recoveries = recovered(lab)
    finally:
        watch.done.set()
        watch.join()
    print(f"recover of a node with a 30 s job: {time.monotonic() - started:.0f} s", json.dumps(recoveries, indent=1))
    assert code == EXIT_TASK_FAILED, recoveries  # the node someone else drained still fails
    mended = recoveries[busy]
    assert (mended["status"], [s["action"] for s in mended["steps"]]) == ("recovered", ["reset"]), mended
    # the job ran to its end on the node, untouched: the reset waited for it
    assert job_state(lab, HEAD, job) == "COMPLETED"
    assert lab.node_file(busy, "/root/reset-done").read_text().strip() == busy
    assert any(line.startswith(("drng " + OURS, "drain " + OURS)) for line in watch.seen[busy]), watch.seen[busy]
    assert actions(lab, busy) == ["None", "None"]
    resumed(lab, busy)  # once verify passed
    left = recoveries[theirs]
    assert (left["status"], left["steps"]) == ("left alone", []), left
    assert "RMA 4711" in left["message"]
    assert actions(lab, theirs)[0] == "Reset" and node_lines(lab, HEAD)[theirs] == "drain RMA 4711"


def test_a_stopped_recover_leaves_the_node_drained_and_recover_now_goes_on(lab):
    """Ctrl-C while recover waits for a long job: it ends at once, the node stays drained with provision's reason
    and the job runs on; `recover --now` cancels the job, resets the GPU and resumes the node."""
    busy = NODES[0]
    job = job_on(lab, HEAD, busy, 900, "long")
    lab.lab("fault", busy, "gpu-reset-required", "--gpu", "0")
    proc = subprocess.Popen(recover_argv(lab), cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        wait_for("the busy node drained by recover", lambda: node_lines(lab, HEAD).get(busy, "").startswith(
            ("drng " + OURS, "drain " + OURS)), timeout=180)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGINT, out + err
    stopped = {r["host"]: r for r in json.loads(out)["hosts"]}[busy]
    assert stopped["status"] == "stopped", stopped
    assert "the run was stopped (SIGINT) while its jobs still ran" in stopped["message"], stopped
    assert job_state(lab, HEAD, job) == "RUNNING" and actions(lab, busy)[0] == "Reset"
    assert node_lines(lab, HEAD)[busy].startswith("drng " + OURS)  # left as it was, drained by provision
    code, recoveries = recovered(lab, "--now")
    assert code == EXIT_OK, recoveries
    assert [s["action"] for s in recoveries[busy]["steps"]] == ["reset"] and recoveries[busy]["status"] == "recovered"
    assert job_state(lab, HEAD, job) == "CANCELLED"
    assert not lab.node_file(busy, "/root/long-done").exists()
    assert actions(lab, busy) == ["None", "None"]
    resumed(lab, busy)


def test_a_node_drained_for_a_cause_under_load_is_resumed_only_after_a_load_passes(lab):
    """A riser that trains down only under load: verify --active --drain drains the node; idle it passes, so
    recover plans a short load, and once the riser is mended resumes the node after that load passed."""
    node = NODES[0]
    lab.lab("fault", node, "pcie-degraded-under-load", "--gpu", "0")
    drained = lab.provision("verify", str(lab.inventory), "--ssh-config", str(lab.ssh_config), "--active",
                            "--duration", "6", "--json", "--limit", node, "--drain")
    assert drained.returncode == EXIT_TASK_FAILED, drained.stdout + drained.stderr
    assert node_lines(lab, HEAD)[node].startswith(f"drain provision-verify: {UNDER_LOAD}: ")
    code, planned = recovered(lab, "--check")
    assert code == EXIT_WOULD_CHANGE, planned
    assert planned[node]["status"] == "planned" and planned[node]["plan"].startswith("verify --active (10 s)"), planned
    lab.lab("fault", node, "clear")  # the riser reseated
    code, recoveries = recovered(lab)
    assert code == EXIT_OK, recoveries
    assert [(s["action"], s["ok"]) for s in recoveries[node]["steps"]] == [("verify --active", True)], recoveries
    assert recoveries[node]["status"] == "recovered"
    resumed(lab, node)
