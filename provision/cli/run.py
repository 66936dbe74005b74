"""provision apply, facts and unlock: a run on the hosts (commands/apply.py, commands/facts.py, core/hostlock.py),
its results printed."""

from __future__ import annotations

import json
from dataclasses import asdict

import click

from provision.cli.exits import exit_with
from provision.cli.options import HostArgs, RunArgs, flag_options, host_options
from provision.cli.plays import plays_options, via_option
from provision.commands import apply as apply_command  # the other commands: imported where they run
from provision.commands.exit_codes import exit_help, run_status, unlock_status
from provision.commands.run import connector
from provision.commands.via_slurm import apply_arguments
from provision.core.results import to_json
from provision.output import report


@click.command(epilog=exit_help("apply"))
@host_options(applying=True)
@plays_options(tags=True)
@flag_options("apply")
@click.option("--reboot", is_flag=True,
              help="Reboot the hosts whose installed driver waits for a boot (never this machine), wait for each "
                   "to come back, then apply them again.")
@click.option("--serial", type=click.IntRange(1, 10000), default=1, show_default=True,
              help="With --reboot: hosts rebooted at a time; one that does not come back stops the rollout.")
@click.option("--reboot-timeout", type=click.FloatRange(10, 7200), default=600, show_default=True,
              help="With --reboot: seconds a host has to go down and answer SSH again (a Slurm compute node: "
                   "from Slurm issuing its reboot to the node registering again).")
@via_option("apply")
def apply(hosts: HostArgs, run: RunArgs, playbook: str | None, templates: str | None, tags: str, skip_tags: str,
          flags: frozenset[str], reboot: bool, serial: int, reboot_timeout: float, via: str) -> None:
    """Converge hosts to the INVENTORY: driver, persistence, power limits and clocks, NCCL, Slurm, torchrun.

    A driver installed or changed loads at the next boot: the host is
    reported as "reboot pending" until then. --reboot reboots those hosts,
    --serial N at a time (never this machine), and applies them again. A
    Slurm compute node's reboot is handed to Slurm: drained, rebooted when
    its jobs end, and resumed only after it passes verify under a short load.

    Each host records its GPUs (index, UUID, bus id) at a good run. When
    they differ later (one fell off the bus, was replaced or renumbered), the
    host fails until the GPU is back or --accept-gpu-changes; an `index:`
    override is never moved onto another card, and every card present keeps
    its group's values and the overrides that name it.

    The first Ctrl-C or SIGTERM lets the changes in flight finish and starts
    nothing new (exit 130 or 143); a second abandons them. A lock a lost run
    left on a host is taken over when its run is gone (see `unlock`).

    --via slurm: one srun on the controller runs `provision apply --local`
    on each compute node that takes a job, with the inventory on stdin;
    slurm-config and munge-key need the other hosts' facts and are left
    to a run over SSH (they show as skipped). Drained, down or allocated
    nodes and the controller itself are applied over SSH.
    """
    target = hosts.target()
    via_slurm = apply_arguments(run.check, tags, skip_tags, playbook, templates, run.lock_wait, run.keep_backups,
                                flags, reboot, hosts.local) if via == "slurm" else None
    tasks, warnings = apply_command.prepare(target, playbook, templates, tags, skip_tags, flags)
    for warning in warnings:
        click.secho(warning, fg="yellow", err=True)
    command = "apply --check" if run.check else "apply"
    progress = hosts.progress(applying=True)
    options = hosts.run_options(target, command, progress, check=run.check, lock_wait=run.lock_wait,
                                keep_backups=run.keep_backups)
    log = run.log(command, target)
    try:
        applied = apply_command.apply(target, tasks, options, hosts.ssh, log, reboot, serial, reboot_timeout,
                                      via_slurm)
    finally:
        progress.close()
    if hosts.as_json:
        data = to_json(applied.results, run.check, applied.stopped)
        if reboot:
            data |= {"reboots": [asdict(o) | {"seconds": o.seconds} for o in applied.reboots],
                     "after_reboot": to_json(applied.after, False)["hosts"],
                     "exit_code": run_status(applied.final, run.check, applied.stopped)}
        click.echo(json.dumps(data, indent=2, default=str))
    else:
        print_applied(applied, run, hosts.verbose, serial)
    exit_with(run_status(applied.final, run.check, applied.stopped, [log.unwritten]), [log.unwritten])


def print_applied(applied: apply_command.Applied, run: RunArgs, verbose: bool, serial: int) -> None:
    if applied.reboots:
        click.echo(click.style("Before the reboot:", bold=True))
    report.print_results(applied.results, run.check, run.show_diff, verbose, applied.stopped)
    if applied.reboots:
        report.print_reboots(applied.reboots, serial)
    if applied.after:
        click.echo(click.style("\nAfter the reboot:", bold=True))
        report.print_results(applied.after, False, run.show_diff, verbose)


@click.command(epilog=exit_help("facts"))
@host_options()
def facts(hosts: HostArgs) -> None:
    """Print what each host is now: system, the interfaces NCCL will use, driver, GPUs (read-only)."""
    from provision.commands import facts as facts_command

    target = hosts.target()
    progress = hosts.progress()
    try:
        states = facts_command.read(target, hosts.run_options(target, "facts", progress, reading="facts"),
                                    hosts.ssh)
    finally:
        progress.close()
    if hosts.as_json:
        data = {s.host.name: facts_command.as_json(s) for s in states}
        click.echo(json.dumps(data, indent=2, default=str))
    else:
        for s in states:
            report.print_facts(s.host.name, s.facts, s.result.message, facts_command.shown(s))
    exit_with(run_status([s.result for s in states]))


LOCK_COLORS = {"no lock": "green", "removed": "yellow", "left alone": "red", "unreachable": "red"}


@click.command(epilog=exit_help("unlock"))
@host_options()
@click.option("--force", is_flag=True, help="Also remove a lock whose run is still running on this machine.")
def unlock(hosts: HostArgs, force: bool) -> None:
    """Remove the host lock a run left behind, saying whose it was.

    apply takes over a stale lock on its own: one whose run was on this
    machine and is gone, or whose lease expired (its run stopped renewing
    it). This is for the rest: a lock another machine's run left less than
    a lease ago, or one written by an older provision.
    """
    from provision.core.hostlock import unlock_hosts

    target = hosts.target()
    done = unlock_hosts(target.hosts, connector(target.local, hosts.ssh), force, hosts.forks)
    if hosts.as_json:
        click.echo(json.dumps([{"host": h, "status": status, "said": said} for h, status, said in done], indent=2))
    else:
        width = max(len(h) for h, _, _ in done)
        for host, status, said in done:
            words = f"{' ' * (12 - len(status))} {said}" if said else ""
            click.echo(f"{host:<{width}}  {click.style(status, fg=LOCK_COLORS[status])}{words}")
    exit_with(unlock_status(status for _, status, _ in done))
