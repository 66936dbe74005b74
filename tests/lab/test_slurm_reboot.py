"""A driver upgrade of a Slurm cluster under a running job (issue 47): `apply --reboot --serial 1` hands each
compute node's reboot to Slurm (tests/lab/slurm_reboot.yaml). The node with a job is drained by provision, the
job runs to its end, slurmd reboots the node through RebootProgram, and it registers still drained; provision
applies it again, verifies it under a short load and only then resumes it; the next node goes only after that.
Nobody drains by hand. A run stopped while Slurm waits for a job leaves the rollout to Slurm, and a later run
picks the node up where Slurm left it."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from builders.stacklab import as_written, driver_moved, on, wait_for

from provision.capabilities.slurm import reboots
from provision_lab.layout import DRIVER_VERSION, OTHER_DRIVER_VERSION

pytestmark = pytest.mark.lab

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "how-to" / "slurm-torchrun.md"
HEAD, NODES = "lab-head", ["lab-gpu-1", "lab-gpu-2"]
# The Slurm how-to's block (tests/docs/test_readme.py: place "slurm-reboot"), each command as written but in this
# test's lab directory (as_written holds the page to showing them): the lab, and the upgrade once the inventory
# pins the other driver.
SHOWN_DIR = "/var/lib/provision-lab/slurm-reboot"
DOC_UP = f"provision lab up --like tests/lab/slurm_reboot.yaml --dir {SHOWN_DIR}"
DOC_REBOOT = f"provision apply {SHOWN_DIR}/inventory.yaml --reboot --serial 1"


@pytest.fixture(scope="module")
def reboot_lab(lab_alone):
    def up(cluster):
        made = as_written(DOC_UP, cluster, SHOWN_DIR, PAGE)
        assert made.returncode == 0, made.stdout + made.stderr
        code, result = cluster.apply()
        assert code == 0, result
        wait_for("both GPU nodes idle", lambda: idle(cluster), timeout=120)

    with lab_alone("slurm-reboot", up) as cluster:
        yield cluster


def said(lab, node: str, command: str) -> str:
    """What the command printed on the node, whatever its exit status (a state that may not be there yet)."""
    return lab.ssh(node, command).stdout


def node_lines(lab) -> dict[str, str]:
    """sinfo's state and reason per node: 'idle none', 'drain provision-reboot: ...'."""
    out = said(lab, HEAD, "sinfo -h -N -o '%N|%t|%E'")
    return {n: f"{t} {e}" for n, t, e in (line.split("|", 2) for line in out.splitlines() if line.count("|") == 2)}


def idle(lab) -> bool:
    lines = node_lines(lab)
    return all(lines.get(n) == "idle none" for n in NODES)


def loaded(lab, node: str) -> str:
    return on(lab, node, "nvidia-smi --query-gpu=driver_version --format=csv,noheader").split()[0]


def pinned(lab, version: str) -> Path:
    """The lab's own inventory, its GPU nodes' driver pinned at VERSION (as a user edits the pin)."""
    return driver_moved(lab, version, lab.inventory)


def job_on(lab, node: str, seconds: int, tag: str) -> str:
    """A batch job on NODE that runs SECONDS and then writes /root/TAG-done: proof it ran to its end there."""
    job = on(lab, HEAD, f"sbatch --parsable -w {node} -N1 -o /root/{tag}.out "
                        f"--wrap 'sleep {seconds}; hostname > /root/{tag}-done'").strip()
    wait_for(f"job {job} running", lambda: said(lab, HEAD, f"squeue -h -j {job} -o %T").strip() == "RUNNING",
             timeout=120)
    return job


class Watch(threading.Thread):
    """sinfo every second while the rollout runs: how many nodes are out of service at once, and each node's
    reasons as Slurm showed them."""

    def __init__(self, lab):
        super().__init__(daemon=True)
        self.lab, self.most_out, self.seen, self.done = lab, 0, {n: [] for n in NODES}, threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            lines = node_lines(self.lab)
            self.most_out = max(self.most_out, sum(not lines.get(n, "").startswith(("idle", "mix", "alloc"))
                                                   for n in NODES))
            for node in NODES:
                if node in lines and (not self.seen[node] or self.seen[node][-1] != lines[node]):
                    self.seen[node].append(lines[node])
            time.sleep(1)


def test_a_driver_upgrade_under_a_running_job_goes_node_by_node_through_slurm(reboot_lab):
    lab = reboot_lab
    assert {loaded(lab, n) for n in NODES} == {DRIVER_VERSION}
    conf = lab.node_file(HEAD, "/etc/slurm/slurm.conf").read_text()
    assert "RebootProgram=/usr/sbin/reboot\n" in conf and "ResumeTimeout=1800\n" in conf
    busy = NODES[0]
    job = job_on(lab, busy, 40, "upgrade")
    watch = Watch(lab)
    watch.start()
    started = time.monotonic()
    pinned(lab, OTHER_DRIVER_VERSION)
    try:
        done = as_written(DOC_REBOOT, lab, SHOWN_DIR, PAGE, "--json")
    finally:
        watch.done.set()
        watch.join()
    print(f"apply --reboot of {len(NODES)} Slurm nodes, one with a 40 s job: {time.monotonic() - started:.0f} s")
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout)
    print(json.dumps(result["reboots"], indent=1), watch.seen)
    rebooted = {o["host"]: o for o in result["reboots"]}
    assert [(o["host"], o["via"], o["status"]) for o in result["reboots"]] == [(n, "slurm", "rebooted") for n in NODES]
    assert all(o["message"] == "verify passed: resumed in Slurm" for o in rebooted.values())
    assert rebooted[NODES[1]]["sent"] >= rebooted[NODES[0]]["back"]  # one node out of service at a time
    assert watch.most_out == 1
    # the job ran to its end on its node, untouched: the reboot waited for it
    state = on(lab, HEAD, f"scontrol -o show job {job}")
    assert re.search(r"JobState=COMPLETED .*ExitCode=0:0", state), state
    assert lab.node_file(busy, "/root/upgrade-done").read_text().strip() == busy
    # Slurm's own account of it: drained by provision, the reboot issued by slurmctld, back drained, then resumed
    reasons = [line for line in watch.seen[busy] if not line.startswith(("idle", "mix", "alloc"))]
    assert any(r.startswith("drng provision-reboot: ") or r.startswith("drain provision-reboot: ") for r in reasons)
    assert any(reboots.ISSUED_WORDS in r for r in reasons), watch.seen[busy]
    assert "Node reboot request being processed" in lab.node_file(busy, "/var/log/slurm/slurmd.log").read_text()
    assert {loaded(lab, n) for n in NODES} == {OTHER_DRIVER_VERSION}
    wait_for("both nodes idle, in service", lambda: idle(lab), timeout=30)
    assert [h["status"] for h in result["after_reboot"]] == ["ok", "ok"]


def drained_back(lab, node: str) -> str:
    """sinfo's line for a node back from a reboot handed to Slurm, still drained by provision, or ''."""
    line = node_lines(lab).get(node, "")
    return line if line.startswith("drain provision-reboot:") and reboots.ISSUED_WORDS in line else ""


def test_a_stopped_rollout_is_left_to_slurm_and_a_later_run_picks_it_up(reboot_lab):
    """SIGTERM while Slurm waits for a job: the run ends and leaves both nodes of its batch to Slurm. The idle one
    is back already, the busy one reboots when its job ends; both stay out of service until a later
    `apply --reboot` verifies them and resumes them, without a second reboot."""
    lab = reboot_lab
    idle_one, busy = NODES
    job = job_on(lab, busy, 30, "pickup")
    inventory = pinned(lab, DRIVER_VERSION)
    proc = subprocess.Popen([sys.executable, "-m", "provision", "apply", str(inventory), "--ssh-config",
                             str(lab.ssh_config), "--json", "--log", str(lab.log), "--reboot", "--serial", "2"],
                            cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        wait_for("the idle node back from its reboot, still drained", lambda: drained_back(lab, idle_one),
                 timeout=240)
        assert "REBOOT_REQUESTED" in on(lab, HEAD, f"scontrol -o show node {busy}")  # its job still runs
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, out + err
    outcomes = {o["host"]: o for o in json.loads(out)["reboots"]}
    assert {n: o["status"] for n, o in outcomes.items()} == {idle_one: "left to Slurm", busy: "left to Slurm"}
    wait_for("the job done", lambda: said(lab, HEAD, f"squeue -h -j {job}").strip() == "", timeout=90)
    back = wait_for("the busy node back from Slurm's reboot, still drained", lambda: drained_back(lab, busy),
                    timeout=180)
    assert lab.node_file(busy, "/root/pickup-done").read_text().strip() == busy  # the job ran to its end
    assert {loaded(lab, n) for n in NODES} == {DRIVER_VERSION}
    time.sleep(5)
    assert node_lines(lab)[busy] == back  # nothing returns it but provision
    code, result = lab.apply("--reboot", inventory=inventory)
    assert code == 0, result
    picked = {o["host"]: o for o in result["reboots"]}
    assert {n: (o["via"], o["status"], o["down"]) for n, o in picked.items()} == {
        n: ("slurm", "rebooted", None) for n in NODES}  # verified and resumed, never rebooted a second time
    assert all(o["reasons"][0].startswith("picked up: back, drained") for o in picked.values())
    wait_for("both nodes idle, in service", lambda: idle(lab), timeout=30)
