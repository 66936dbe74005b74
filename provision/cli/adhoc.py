"""provision clocks, power, persistence, ecc, compute-mode and mig: one GPU setting now and in the boot file, planned and
applied like apply (commands/adhoc.py), on this machine unless given an inventory; and clocks --list."""

from __future__ import annotations

import json
from typing import Any, NoReturn

import click

from provision.cli.exits import exit_with
from provision.cli.options import HostArgs, RunArgs, flag_options, host_options
from provision.commands.exit_codes import clock_list_status, exit_help, run_status
from provision.core.results import to_json
from provision.output import report

gpu_option = click.option("--gpu", help="GPU indexes or UUIDs, comma-separated.  [default: every GPU]")


def adhoc_command(name: str) -> Any:
    """An ad-hoc command: every host command's options and the run's (host_options), this machine when no
    inventory is given, --gpu, and the run flags the capabilities declare for it."""
    def decorate(func: Any) -> click.Command:
        return click.command(name, epilog=exit_help(name))(
            host_options(applying=True, here_by_default=True)(gpu_option(flag_options(name)(func))))
    return decorate


def run_adhoc(command: str, change: dict[str, Any], option: str, hosts: HostArgs, run: RunArgs, gpu: str | None,
              flags: frozenset[str]) -> None:
    """Plan and apply one ad-hoc change like `apply` does (commands/adhoc.py); exits with apply's codes."""
    from provision.commands import adhoc

    target = hosts.target()
    target.flag(flags)
    command += " --check" if run.check else ""
    progress = hosts.progress(applying=True)
    options = hosts.run_options(target, command, progress, check=run.check, lock_wait=run.lock_wait,
                                keep_backups=run.keep_backups)
    log = run.log(command, target)
    try:
        results, stopped, warnings, unwritten = adhoc.adhoc(target, change, option, gpu, bool(hosts.inventory),
                                                            options, hosts.ssh, log)
    finally:
        progress.close()
    if hosts.as_json:
        click.echo(json.dumps(to_json(results, run.check, stopped) | {"warnings": warnings}, indent=2, default=str))
    else:
        report.print_results(results, run.check, run.show_diff, hosts.verbose, stopped_by=stopped)
    for warning in warnings:
        click.secho(f"Warning: {warning}", fg="yellow", err=True)
    exit_with(run_status(results, run.check, stopped, [unwritten]), [unwritten])


@adhoc_command("clocks")
@click.option("--mem", type=click.IntRange(min=1), help="Memory clock, MHz (with --sm: an application-clock pair).")
@click.option("--sm", help="Graphics clock, MHz; with --locked MIN,MAX or one value.")
@click.option("--nearest", is_flag=True, help="Use the nearest supported pair instead of refusing.")
@click.option("--locked", is_flag=True, help="Lock clocks (-lgc/-lmc; Hopper memory: -lmcd) instead: GeForce cards.")
@click.option("--reset", is_flag=True, help="Back to the driver's defaults (-rac, and -rgc/-rmc where locked).")
@click.option("--list", "list_pairs", is_flag=True, help="Show the supported clocks per GPU model, compact.")
def clocks(hosts: HostArgs, run: RunArgs, gpu: str | None, flags: frozenset[str], mem: int | None, sm: str | None,
           nearest: bool, locked: bool, reset: bool, list_pairs: bool) -> None:
    """Set GPU clocks now and at every boot: application clocks, or --locked.

    \b
      provision clocks --mem 877 --sm 1005      # the V100 fix: -ac 877,1005
      provision clocks --locked --sm 210,1695   # GeForce: lock graphics clocks
      provision clocks --reset -i inventories/basement.yaml -l v100
      provision clocks --list
    """
    if list_pairs:
        list_clocks(hosts)
    if sum([reset, mem is not None or sm is not None]) != 1:
        raise click.UsageError("give --mem and --sm (or --locked --sm/--mem), --reset, or --list")
    change: dict[str, Any]
    if reset:
        change = {"clocks": "default", "locked_clocks": "default"}
    elif locked:
        change = {"locked_clocks": {k: _mhz_range(v, f"--{k}") for k, v in (("sm", sm), ("mem", mem)) if v}}
    else:
        if mem is None or sm is None or not str(sm).isdigit():
            raise click.UsageError("application clocks are a pair: --mem MHz --sm MHz (see --list)")
        change = {"clocks": {"mem": mem, "sm": int(sm), "nearest": nearest}}
    run_adhoc("clocks", change, "--sm/--mem", hosts, run, gpu, flags)


def _mhz_range(value: object, option: str) -> list[int]:
    try:
        numbers = [int(v) for v in str(value).split(",")]
    except ValueError:
        raise click.BadParameter(f"{value!r}: MHz as MIN,MAX or one value", param_hint=option) from None
    if len(numbers) > 2 or numbers[0] > numbers[-1]:
        raise click.BadParameter(f"{value!r}: MHz as MIN,MAX (MIN <= MAX) or one value", param_hint=option)
    return numbers * 2 if len(numbers) == 1 else numbers


def list_clocks(hosts: HostArgs) -> NoReturn:
    from provision.commands import adhoc

    target = hosts.target()
    models, unusable, results = adhoc.clock_list(target, hosts.run_options(target, "clocks --list"), hosts.ssh)
    if hosts.as_json:
        click.echo(json.dumps({"models": models, "hosts_without_gpus": unusable}, indent=2))
    else:
        report.print_lines(adhoc.clock_lines(models))
        for host, why in unusable.items():
            click.secho(f"{host}: {why}", fg="red", err=True)
    exit_with(clock_list_status(results, bool(unusable)))


@adhoc_command("power")
@click.option("--watts", required=True, help='Power limit in W, within each GPU\'s min..max, or "default".')
def power(hosts: HostArgs, run: RunArgs, gpu: str | None, flags: frozenset[str], watts: str) -> None:
    """Set GPU power limits now and at every boot (nvidia-smi -pl)."""
    try:
        value: str | int | float = watts if watts == "default" else (int(watts) if watts.isdigit() else float(watts))
    except ValueError:
        raise click.BadParameter(f"{watts!r}: watts (a number) or default", param_hint="--watts") from None
    run_adhoc("power", {"power_limit": value}, "--watts", hosts, run, gpu, flags)


@adhoc_command("persistence")
@click.argument("state", type=click.Choice(["on", "off"]))
def persistence(hosts: HostArgs, run: RunArgs, gpu: str | None, flags: frozenset[str], state: str) -> None:
    """Turn persistence mode on or off now and at every boot."""
    run_adhoc("persistence", {"persistence": state == "on"}, "STATE", hosts, run, gpu, flags)


@adhoc_command("ecc")
@click.argument("state", type=click.Choice(["on", "off"]))
def ecc(hosts: HostArgs, run: RunArgs, gpu: str | None, flags: frozenset[str], state: str) -> None:
    """Turn ECC mode on or off (nvidia-smi -e): it takes effect at the next reboot.

    \b
    Until then the run says the reboot is pending (exit 16), and apply's
    reboot option reboots the hosts that wait. The driver keeps the mode
    across reboots: the boot file needs no line for it.
    """
    run_adhoc("ecc", {"ecc": state == "on"}, "STATE", hosts, run, gpu, flags)


@adhoc_command("compute-mode")
@click.argument("mode", type=click.Choice(["default", "exclusive_process", "prohibited"]))
def compute_mode(hosts: HostArgs, run: RunArgs, gpu: str | None, flags: frozenset[str], mode: str) -> None:
    """Set the GPUs' compute mode now and at every boot (nvidia-smi -c).

    \b
    exclusive_process: one process per GPU, so two jobs never share a card;
    prohibited: no process at all; default: any number.
    """
    run_adhoc("compute-mode", {"compute_mode": mode}, "MODE", hosts, run, gpu, flags)


@adhoc_command("mig")
@click.argument("layout", metavar="off|on|PROFILE,...")
def mig(hosts: HostArgs, run: RunArgs, gpu: str | None, flags: frozenset[str], layout: str) -> None:
    """MIG: off, on, or a layout of GPU instance profiles, now and at every boot.

    \b
      provision mig 3g.71gb,3g.71gb    # an H200 in two halves (-cgi ... -C)
      provision mig on                 # MIG mode on, the boot file's layout kept
      provision mig off                # instances destroyed, MIG mode off
    \b
    Profiles are named as `nvidia-smi mig -lgip` lists them, comma-separated,
    checked against each GPU before anything changes. Where the GPU is in use
    its MIG mode waits for a reset or reboot (exit 16, apply's reboot option
    takes it); the layout is made once the mode is on, and made again at
    every boot. Instances under running processes are never destroyed.
    """
    from provision.commands.adhoc import MIG_ON

    words = [word.strip() for word in layout.split(",") if word.strip()]
    if not words or (len(words) > 1 and {"on", "off"} & set(words)):
        raise click.BadParameter(f"{layout!r}: off, on, or GPU instance profiles (3g.71gb,3g.71gb)",
                                 param_hint="LAYOUT")
    change = {"mig": "disabled" if words == ["off"] else MIG_ON if words == ["on"] else words}
    run_adhoc("mig", change, "LAYOUT", hosts, run, gpu, flags)
