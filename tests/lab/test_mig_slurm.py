"""Slurm schedules MIG slices, end to end, on a lab Slurm cluster whose node is a PCIe H100 with two 3g.40gb GPU
instances (tests/lab/mig-slurm.yaml): one apply makes the layout, then Slurm's files offer each MIG device as a gres
of its own (gres.conf MultipleFiles=, the device files from the simulator's /proc/driver/nvidia-caps/mig-minors, as a
real driver's); a job asking `--gres=gpu:3g.40gb:1` gets one slice and its device cgroup opens that slice's two
/dev/nvidia-caps files and not the other's; two such jobs run side by side on the two slices and a third waits
until one ends; after a reboot the boot unit makes the slices before slurmd starts, and the node is back with both.

A device the cgroup lets through still has no driver behind it in the lab: opening it fails with "No such device
or address" (ENXIO), where the cgroup refuses it with "Operation not permitted" (EPERM)."""

from __future__ import annotations

import re
import shlex
import time

import pytest
import yaml
from builders.stacklab import findings, on, verdicts

pytestmark = pytest.mark.lab

SPEC = "tests/lab/mig-slurm.yaml"
HEAD, NODE = "lab-migs-head", "lab-migs-gpu-1"
SLICE = "gpu:3g.40gb:1"
CHECK = "slurm_offers_the_nodes_mig_slices"
# What a job sees of the MIG device files: each cap file opened (ENXIO: let through) or refused (EPERM).
PROBE = ("for f in /dev/nvidia-caps/nvidia-cap*; do if head -c1 $f 2>&1 | grep -q 'not permitted'; "
         "then echo \"$f refused\"; else echo \"$f open\"; fi; done; "
         "scontrol show job -d $SLURM_JOB_ID | grep -o 'GRES=[^ ]*(IDX:[^ ]*'")


@pytest.fixture(scope="module")
def mig_slurm_lab(lab_alone):
    with lab_alone("mig-slurm", lambda cluster: cluster.lab("up", "--like", SPEC)) as cluster:
        yield cluster


def wait_for(what: str, check, timeout: float = 90.0):
    deadline = time.monotonic() + timeout
    while not (value := check()):
        assert time.monotonic() < deadline, f"{what} within {timeout:g}s"
        time.sleep(1)
    return value


def node_line(lab) -> str:
    return on(lab, HEAD, f"sinfo -h -N -n {NODE} -o '%N %t %G'").strip()


def slice_files(lab) -> dict[int, set[str]]:
    """GPU instance ID -> its two cap files, from the node's -lgi and its driver's mig-minors table."""
    minors = dict(line.split() for line in on(lab, NODE, "cat /proc/driver/nvidia-caps/mig-minors").splitlines())
    ids = [int(row.split()[5]) for row in on(lab, NODE, "nvidia-smi mig -lgi").splitlines() if " MIG " in row]
    return {gi: {f"/dev/nvidia-caps/nvidia-cap{minors[f'gpu0/gi{gi}/access']}",
                 f"/dev/nvidia-caps/nvidia-cap{minors[f'gpu0/gi{gi}/ci0/access']}"} for gi in ids}


def slurmd_start(lab) -> str:
    """When the node's slurmd last registered, as slurmctld says (SlurmdStartTime=)."""
    return re.search(r"SlurmdStartTime=(\S+)", on(lab, HEAD, f"scontrol show node {NODE}")).group(1)


def minor(cap_file: str) -> int:
    return int(cap_file.rsplit("nvidia-cap", 1)[1])


def opened(probe: str) -> set[str]:
    return set(re.findall(r"^(\S+) open$", probe, re.M))


def refused(probe: str) -> set[str]:
    return set(re.findall(r"^(\S+) refused$", probe, re.M))


def test_one_apply_offers_each_mig_device_as_a_gres_of_its_profile_and_slurm_never_drains_the_node(mig_slurm_lab):
    """One apply makes the layout and Slurm's files: the controller's copy is planned from the node as the run left
    it (core/stages.py), so slurmctld never meets the node with gres it does not expect."""
    code, result = mig_slurm_lab.apply()
    assert code == 0, result
    assert wait_for("the node idle with its two slices",
                    lambda: re.fullmatch(rf"{NODE} idle gpu:3g\.40gb:2", node_line(mig_slurm_lab)), timeout=120)
    assert "Reason=" not in on(mig_slurm_lab, HEAD, f"scontrol show node {NODE}")
    ctld = mig_slurm_lab.node_file(HEAD, "/var/log/slurm/slurmctld.log").read_text()
    drained = rf"(?m)^(?=.*{NODE})(?=.*(?:INVAL|[Dd]rain|too low|lower than configured)).*$"
    assert not re.findall(drained, ctld), ctld
    gres = mig_slurm_lab.node_file(HEAD, "/etc/slurm/gres.conf").read_text()
    files = slice_files(mig_slurm_lab)
    lines = [line for line in gres.splitlines() if line.startswith("NodeName=")]
    assert sorted(lines) == sorted(
        f"NodeName={NODE} Name=gpu Type=3g.40gb MultipleFiles=/dev/nvidia0,{','.join(sorted(caps, key=minor))}"
        for caps in files.values()), gres
    assert mig_slurm_lab.node_file(NODE, "/etc/slurm/gres.conf").read_text() == gres


def test_a_job_gets_one_slice_and_only_its_device_files(mig_slurm_lab):
    probe = on(mig_slurm_lab, HEAD, f"srun --gres={SLICE} sh -c {shlex.quote(PROBE)}")
    print(probe)
    files = slice_files(mig_slurm_lab)
    mine = [caps for caps in files.values() if caps <= opened(probe)]
    assert len(mine) == 1, probe
    others = set().union(*files.values()) - mine[0]
    assert others <= refused(probe), probe
    assert re.search(r"GRES=gpu:3g\.40gb:1\(IDX:[01]\)", probe), probe


def probed(lab, job: str) -> str:
    """A held job's probe once it has written all of it, else ""."""
    return on(lab, NODE, f"cat /tmp/slice-{job} 2>/dev/null || true")


def test_two_jobs_share_the_gpu_one_slice_each_and_a_third_waits(mig_slurm_lab):
    lab = mig_slurm_lab
    on(lab, NODE, "rm -f /tmp/release /tmp/slice-*")
    hold = (f"{{ {PROBE}; }} > /tmp/slice-$SLURM_JOB_ID.part && mv /tmp/slice-$SLURM_JOB_ID.part /tmp/slice-$SLURM_JOB_ID; "
            "while [ ! -e /tmp/release ]; do sleep 1; done")
    jobs = [on(lab, HEAD, f"sbatch --parsable --gres={SLICE} -o /dev/null --wrap {shlex.quote(hold)}").strip()
            for _ in range(3)]
    try:
        wait_for("two jobs running", lambda: on(lab, HEAD, f"squeue -h -j {','.join(jobs)} -o '%i %T %r'")
                 .count("RUNNING") == 2)
        states = dict(line.split(" ", 1) for line in on(
            lab, HEAD, f"squeue -h -j {','.join(jobs)} -o '%i %T %r'").splitlines())
        running = [j for j in jobs if states[j].startswith("RUNNING")]
        (waiting,) = [j for j in jobs if j not in running]
        assert states[waiting] == "PENDING Resources", states
        probes = [wait_for(f"job {j}'s probe", lambda j=j: probed(lab, j)) for j in running]
        files = slice_files(lab)
        taken = [next(gi for gi, caps in files.items() if caps <= opened(p)) for p in probes]
        assert sorted(taken) == sorted(files), probes  # one slice each, not the same one
        on(lab, NODE, "touch /tmp/release")
        wait_for("the third job running once a slice is free",
                 lambda: probed(lab, waiting))
    finally:
        on(lab, HEAD, f"scancel {' '.join(jobs)}")
        on(lab, NODE, "touch /tmp/release")


def test_after_a_reboot_the_slices_exist_before_slurmd_and_the_node_is_back(mig_slurm_lab):
    before = slice_files(mig_slurm_lab)
    slurmd_started = slurmd_start(mig_slurm_lab)
    mig_slurm_lab.lab("reboot", NODE)
    started = time.monotonic()
    wait_for("slurmd registered again", lambda: slurmd_start(mig_slurm_lab) != slurmd_started, timeout=300)
    assert wait_for("the node idle again with its two slices",
                    lambda: re.fullmatch(rf"{NODE} idle gpu:3g\.40gb:2", node_line(mig_slurm_lab)), timeout=120)
    print(f"idle {time.monotonic() - started:.0f} s after the reboot")
    assert slice_files(mig_slurm_lab) == before
    probe = on(mig_slurm_lab, HEAD, f"srun --gres={SLICE} sh -c {shlex.quote(PROBE)}")
    assert len([caps for caps in before.values() if caps <= opened(probe)]) == 1, probe


def test_verify_passes_the_slices_and_finds_slurm_behind_a_new_layout_once(mig_slurm_lab, tmp_path):
    """The layout changed under Slurm (the gpu tasks alone): one finding, whose step as written brings Slurm's
    files to the new layout."""
    _, judged = verdicts(mig_slurm_lab)
    assert CHECK in judged[NODE]["passed"], judged[NODE]
    tree = yaml.safe_load(mig_slurm_lab.inventory.read_text())
    tree["all"]["children"]["gpu"]["vars"]["provision_gpu"]["mig"] = ["7g.80gb"]
    whole = tmp_path / "whole.yaml"
    whole.write_text(yaml.safe_dump(tree))
    code, result = mig_slurm_lab.apply("--tags", "gpu", inventory=whole)
    assert code == 0, result
    _, judged = verdicts(mig_slurm_lab, whole)
    (behind,) = findings(judged[NODE], CHECK)
    assert behind["expected"] == "the node's MIG devices as gres (gpu:7g.80gb:1)", behind
    assert behind["found"].startswith("slurmctld holds gpu:3g.40gb:2"), behind
    code, result = mig_slurm_lab.apply("--tags", "slurm", inventory=whole)
    assert code == 0, result
    assert wait_for("the node idle with its one 7g.80gb slice",
                    lambda: re.fullmatch(rf"{NODE} idle gpu:7g\.80gb:1", node_line(mig_slurm_lab)), timeout=120)
    _, judged = verdicts(mig_slurm_lab, whole)
    assert CHECK in judged[NODE]["passed"], judged[NODE]
