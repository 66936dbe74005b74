"""A Slurm lab as its users see it (tests/lab/slurm*.yaml): each node's state and reason in sinfo, and batch jobs
that prove they ran to their end."""

from __future__ import annotations

from builders.stacklab import on, wait_for


def node_lines(lab, head: str) -> dict[str, str]:
    """sinfo's state and reason per node: 'idle none', 'drng provision-verify: ...'."""
    out = lab.ssh(head, "sinfo -h -N -o '%N|%t|%E'").stdout
    return {n: f"{t} {e}" for n, t, e in (line.split("|", 2) for line in out.splitlines() if line.count("|") == 2)}


def job_state(lab, head: str, job: str) -> str:
    """The job's state as slurmctld keeps it after its end too: RUNNING, COMPLETED, CANCELLED, ..."""
    shown = on(lab, head, f"scontrol -o show job {job}")
    return next(word.partition("=")[2] for word in shown.split() if word.startswith("JobState="))


def job_on(lab, head: str, node: str, seconds: int, tag: str) -> str:
    """A batch job on NODE that runs SECONDS and then writes /root/TAG-done there (proof it ran to its end),
    waited for until it runs; its id."""
    job = on(lab, head, f"sbatch --parsable -w {node} -N1 -o /root/{tag}.out "
                        f"--wrap 'sleep {seconds}; hostname > /root/{tag}-done'").strip()
    wait_for(f"job {job} running", lambda: job_state(lab, head, job) == "RUNNING", timeout=120)
    return job
