"""provision recover: the recovery ladder over the nodes verify fails (commands/recover.py), what became of each
printed."""

from __future__ import annotations

import json
from dataclasses import asdict

import click

from provision.cli.exits import exit_with
from provision.cli.options import HostArgs, RunArgs, host_options
from provision.cli.plays import plays_options
from provision.commands.exit_codes import exit_help, recover_status


@click.command(epilog=exit_help("recover"))
@host_options(applying=True)
@plays_options(tags=False)
@click.option("--now", is_flag=True, help="Cancel a node's Slurm jobs rather than wait for them to end before its "
              "reset or reboot.")
@click.option("--wait", type=click.FloatRange(0, 7 * 86400), default=3600, show_default=True, metavar="SECONDS",
              help="How long to wait for a drained node's jobs to end; past it the node stays drained for a later "
                   "recover.")
@click.option("--reboot-timeout", type=click.FloatRange(10, 7200), default=1800, show_default=True,
              help="Seconds a node has to reboot and answer again.")
def recover(hosts: HostArgs, run: RunArgs, playbook: str | None, templates: str | None, now: bool, wait: float,
            reboot_timeout: float) -> None:
    """Bring the nodes verify fails back, each by the smallest step that can
    clear its causes, with verify after every step.

    Each finding names its remedy (`provision verify --json`, "remedy"):
    apply (a setting drifted), reset (the driver asks for a GPU reset: Xid
    154, NV_ERR_RESET_REQUIRED, the GPU's recovery action), reboot (a GPU off
    the bus; an unknown hardware fault gets one), service (a person must act).
    A node takes the largest step its causes ask for: apply converges it; a
    reset drains it in Slurm, waits for its jobs (--now cancels them), stops
    what holds the GPUs (persistenced, the fabric manager, DCGM), resets them
    (all of them on an NVSwitch board), starts them again and applies the
    GPU settings; a reboot goes through Slurm on a Slurm node, else over SSH.

    A cause still there after its step climbs one rung; one a reboot did not
    clear is a card to replace: recorded under the state directory with its
    serial, slot and what failed, and the node stays drained. A node that
    passes is resumed where provision drained it, never one drained for
    another reason; where its cause showed only under load, once verify
    passes it under a short load too. --check says each node's first step
    and touches nothing. Ctrl-C or SIGTERM lets the steps in
    flight end and starts none; recover again goes on.
    Every step goes to the run log with why it was chosen.
    """
    from provision.commands import recover as recover_command
    from provision.commands.playbook import load_playbook, playbook_file
    from provision.core.resources import templates_dir

    target = hosts.target()
    tasks = load_playbook(playbook_file(playbook), templates_dir(templates))
    command = "recover --check" if run.check else "recover"
    progress = hosts.progress(applying=not run.check)
    options = hosts.run_options(target, command, progress, check=run.check, lock_wait=run.lock_wait,
                                keep_backups=run.keep_backups, reading="verify")
    log = run.log(command, target)
    told = recover_command.Options(check=run.check, now=now, wait=wait, reboot_timeout=reboot_timeout)
    try:
        recoveries, stopped = recover_command.recover(target, tasks, options, hosts.ssh, log, told)
    finally:
        progress.close()
    if hosts.as_json:
        click.echo(json.dumps({"hosts": [asdict(r) for r in recoveries]}, indent=2))
    else:
        for recovery in recoveries:
            print_recovery(recovery)
    exit_with(recover_status([r.status for r in recoveries], recover_command.UNREACHED, recover_command.PLANNED,
                             (recover_command.PASSES, recover_command.RECOVERED), [log.unwritten], stopped),
              [log.unwritten])


def print_recovery(recovery) -> None:
    click.echo(f"{recovery.host}: {recovery.status}" + (f": {recovery.message}" if recovery.message else ""))
    if recovery.plan:
        click.echo(f"  would {recovery.plan}")
    for step in recovery.steps:
        click.echo(f"  {step.action} ({step.why}): {'' if step.ok else 'FAILED: '}{step.said}")
