"""provision verify: every host checked (commands/verify.py), the verdicts printed."""

from __future__ import annotations

import json

import click

from provision.cli.exits import exit_with
from provision.cli.options import HostArgs, host_options, output_file
from provision.cli.plays import plays_options, via_option
from provision.commands.exit_codes import exit_help, verify_status
from provision.commands.playbook import load_playbook, playbook_file
from provision.commands.via_slurm import verify_arguments
from provision.core.resources import templates_dir
from provision.output import report


@click.command(epilog=exit_help("verify"))
@host_options()
@plays_options(tags=False)
@click.option("--junitxml", type=click.Path(), callback=output_file("--junitxml", make_directory=True),
              help="Also write the results as JUnit XML (for CI).")
@click.option("--drain", is_flag=True, help="Drain failed Slurm compute nodes, the reason starting 'provision-verify:'.")
@click.option("--resume", is_flag=True, help="Resume the Slurm nodes verify drained that now pass (no other drain).")
@click.option("--prometheus", type=click.Path(), metavar="FILE", callback=output_file("--prometheus"),
              help="Also write the results as node_exporter textfile metrics, atomically (name it *.prom, in the "
                   "collector's directory).")
@click.option("--active", is_flag=True, help="Also load every GPU for --duration and judge the node under load "
              "(refuses a node with GPU processes or Slurm jobs; changes no setting).")
@click.option("--duration", type=click.FloatRange(5, 3600), default=60, show_default=True, metavar="SECONDS",
              help="How long --active loads each node.")
@via_option("verify")
def verify(hosts: HostArgs, playbook: str | None, templates: str | None, junitxml: str | None, drain: bool,
           resume: bool, prometheus: str | None, active: bool, duration: float, via: str) -> None:
    """Check every host is as the INVENTORY intends and healthy; change nothing.

    Each host is read once (the facts batch of apply); then the shipped
    checks run: the driver answers, the GPUs of the last good run are all
    there and readable, PCIe links at full width and speed, no Xid or PCIe
    error in the kernel log since boot, no uncorrectable memory error or
    pending repair, no clocks held down by heat or power, and every task's
    state (persistence, power, clocks, boot file and unit, managed files) is
    as intended. -v shows every check: the consequences' own words, and the
    checks that passed or did not apply, and why.

    One cause, one finding: a check that fails only because of another
    finding (a GPU off the bus fails nvidia-smi's exit code, the layout,
    the Xid log and the tasks that use it) is listed under it.

    With --active, every GPU of each host is loaded for --duration first
    (provision's load program with torch, provision_active.load_command, or dcgmi diag
    with provision_active.dcgm_diag), sampled at 10 Hz, and the host judged as the load
    left it: a GPU lost, power past the supplies' budget, the power brake,
    heat, clocks below those set, a PCIe link trained down, a GPU slower than
    its peers, kernel errors during the load. Then iperf3 on every port NCCL
    uses, in a ring over each training group, and the all-reduce through the
    group's torchrun wrapper: within each node, across the group, and
    pairwise along a ring when the group falls short. A node with GPU
    processes or Slurm jobs (other than the job verify runs in) is left alone.

    --via slurm: one srun on the controller runs `provision verify --local`
    on each compute node that takes a job, with the inventory on stdin (with
    --active: each node's load and its own all-reduce, as the sbatch script
    runs them; the group's all-reduce and iperf3 ring need a run over SSH).
    The other hosts are verified over SSH.

    A node --active did not load (no load program, GPU processes or jobs
    on it, lost, stopped) is "not tested", never a pass, with why; so is one
    whose ports or all-reduce did not run. The first Ctrl-C or SIGTERM stops
    every node's load, judges what was measured and prints the verdicts
    (exit 130 or 143); a second abandons the run at once.
    """
    from provision.commands.verify import verify as verify_command
    from provision.output import verify_json

    target = hosts.target()
    via_slurm = verify_arguments(playbook, templates, hosts.local, drain, resume, duration if active else None,
                                 junitxml) if via == "slurm" else None
    tasks = load_playbook(playbook_file(playbook), templates_dir(templates))
    progress = hosts.progress()
    options = hosts.run_options(target, "verify", progress, reading="verify")
    try:
        verdicts, done, unwritten, stopped = verify_command(target, tasks, options, hosts.ssh, junitxml, drain,
                                                            resume, duration if active else None, via_slurm,
                                                            prometheus)
    finally:
        progress.close()
    if hosts.as_json:
        click.echo(json.dumps(verify_json.to_json(verdicts, done, stopped), indent=2))
    else:
        report.print_verdicts(verdicts, hosts.verbose, stopped)
        for line in done:
            click.echo(f"{line['host']}: {line['said']}")
    exit_with(verify_status(verdicts, stopped, unwritten), unwritten)
