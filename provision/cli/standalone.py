"""The commands that contact no host: demo (a simulated node on this machine) and advise (an estimate from the
inventory)."""

from __future__ import annotations

import json
import sys

import click

from provision.cli.options import (InventoryArgs, given_sources, inventory_source_option, json_option, limit_option,
                                    select_hosts)
from provision.commands.exit_codes import exit_help


@click.command(epilog=exit_help("demo"))
def demo() -> None:
    """Converge a simulated 4x V100 node on this machine, twice (no GPU, no root needed)."""
    from provision.commands.demo import run_demo

    sys.exit(run_demo(click.echo))


def _parameter_count(ctx: click.Context, param: click.Parameter, value: str) -> int:
    from provision.capabilities.nccl.advise import parse_count

    try:
        return parse_count(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


@click.command(epilog=exit_help("advise"))
@click.argument("inventory", required=False)
@inventory_source_option
@limit_option
@click.option("--params", required=True, callback=_parameter_count,
              help="Model parameters: 25M, 25.6M, 1.5B, 7e9, 350k.")
@click.option("--bytes-per-grad", type=click.IntRange(1, 8), default=4, show_default=True,
              help="Bytes per gradient value the all-reduce sends (float32 4, bf16 2).")
@click.option("--step-ms", type=click.FloatRange(0, min_open=True),
              help="Ts, measured: one training step's compute on one GPU, ms. Without it: no efficiency.")
@click.option("--comm-ms", type=click.FloatRange(0, min_open=True),
              help="Tc, measured: one gradient all-reduce, ms. The what-ifs start from it instead of the estimate.")
@click.option("--nodes", type=click.IntRange(min=2), help="Nodes.  [default: the selected hosts]")
@click.option("--gpus-per-node", type=click.IntRange(1, 64), help="GPUs per node.  [default: provision_gpu.count, else 1]")
@click.option("--link-mbps", type=click.IntRange(min=1),
              help="Speed of one link, Mb/s (10 GbE: 10000).  [default: the lowest provision_nccl.expected_link_speed_mbps]")
@click.option("--links", type=click.IntRange(1, 64),
              help="Links per node NCCL spreads over.  [default: the names of an exact provision_nccl.socket_ifname, else 1]")
@click.option("--accumulate", type=click.IntRange(min=2), default=2, show_default=True,
              help="Steps per all-reduce in the gradient-accumulation what-if.")
@click.option("--gpu-memory-gib", type=click.FloatRange(0, min_open=True),
              help="Memory of one GPU, GiB: adds how many GPUs the model state needs.")
@json_option
def advise(inventory: str | None, inventory_option: tuple[str, ...], limit: str | None, params: int,
           bytes_per_grad: int, step_ms: float | None, comm_ms: float | None, nodes: int | None,
           gpus_per_node: int | None, link_mbps: int | None, links: int | None, accumulate: int,
           gpu_memory_gib: float | None, as_json: bool) -> None:
    """Estimate how well a data-parallel job scales over the network, and what would help.

    Reads the INVENTORY only (no host is contacted): nodes, GPUs, link
    speed and links per node; options override it. A ring all-reduce sends
    2(N-1)/N x the gradient bytes per step; eta = Ts/(Ts+Tc) (weak scaling,
    no overlap, bandwidth only). Then, added one by one: bf16 gradients,
    gradient accumulation, a second link per node.

    \b
      provision advise inventories/basement.yaml -l rtx3090 --params 25M \\
          --step-ms 234 --comm-ms 106
      provision advise --nodes 8 --gpus-per-node 8 --link-mbps 100000 \\
          --params 7B --gpu-memory-gib 80
    """
    from provision.capabilities.nccl.advise import Job, advise as estimate, network_from_hosts, report_lines, to_json

    sources = given_sources(inventory, inventory_option)
    if not sources and nodes is None:
        raise click.UsageError("give an INVENTORY file, or --nodes N (and --link-mbps)")
    hosts = select_hosts(InventoryArgs(sources), False, limit).hosts if sources else []
    try:
        network, notes = network_from_hosts(hosts, nodes, gpus_per_node, link_mbps, links)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    job = Job(params, network, bytes_per_grad, step_s=step_ms / 1000 if step_ms else None,
              comm_s=comm_ms / 1000 if comm_ms else None)
    advice = estimate(job, accumulate, gpu_memory_gib, notes)
    if as_json:
        click.echo(json.dumps(to_json(advice), indent=2))
    else:
        for line in report_lines(advice):
            click.echo(line)

