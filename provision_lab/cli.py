"""`provision lab`: a real multi-node cluster on this machine, to rehearse on and to test against."""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from provision_lab.cluster import Lab
from provision_lab.faults import FAULTS
from provision_lab.layout import DEFAULT_DIR
from provision_lab.system import LabError

EXIT_BAD_INPUT = 2


class LabGroup(click.Group):
    """Lab errors become a clear message and an exit code, never a traceback."""

    def invoke(self, ctx):
        from provision.core.errors import InputError  # --like inventories are validated like any other

        try:
            return super().invoke(ctx)
        except LabError as exc:
            click.secho(f"Error: {exc}", fg="red", err=True)
            ctx.exit(exc.exit_code)
        except InputError as exc:
            click.secho(f"Error: {len(exc.problems)} problem(s) in the --like inventory; nothing was made:",
                        fg="red", err=True)
            for problem in exc.problems:
                click.echo(f"  {problem}", err=True)
            ctx.exit(EXIT_BAD_INPUT)


def dir_option(func):
    return click.option("--dir", "lab_dir", type=click.Path(file_okay=False), default=str(DEFAULT_DIR),
                        show_default=True, envvar="PROVISION_LAB_DIR",
                        help="The lab's directory (state, inventory, ssh_config, node disks); "
                             "one lab per directory.")(func)


@click.group("lab", cls=LabGroup, context_settings={"help_option_names": ["-h", "--help"]})
def lab():
    """A real multi-node cluster on this machine: Debian nodes in network namespaces, each with its own
    root filesystem, sshd and simulated GPUs. Rehearse on it before the real cluster:

    \b
      provision lab up --like inventories/basement.yaml
      provision apply /var/lib/provision-lab/default/inventory.yaml
      provision lab fault lab-rtx4090-1 gpu-off-bus --gpu 3
      provision lab down

    The inventory's hosts carry the lab's ssh_config (key, known_hosts): the
    commands above need nothing more. Needs root and Linux. Nodes reach
    nothing but the lab's own addresses.
    """


@lab.command()
@click.option("--nodes", "-n", type=int, default=None, help="Number of nodes, each 4x V100.  [default: 3]")
@click.option("--like", type=click.Path(exists=True, dir_okay=False),
              help="Mirror this inventory: its groups, variables, GPU models and counts, NIC names.")
@dir_option
def up(nodes, like, lab_dir):
    """Start the lab and write its inventory, ssh_config, known_hosts and client key."""
    from provision_lab.spec import DEFAULT_NODES, default_spec, like_spec

    if like and nodes is not None:
        raise click.UsageError("--nodes and --like exclude each other: --like makes one node per host")
    spec = like_spec(like) if like else default_spec(DEFAULT_NODES if nodes is None else nodes)
    the_lab = Lab(lab_dir)
    made = the_lab.up(spec, log=lambda message: click.echo(message, err=True))
    if not made:
        click.echo(f"The lab in {the_lab.dir} is already up ({spec.source}).", err=True)
    _print_status(the_lab.status())
    click.echo(f"\nInventory:  {the_lab.inventory_path}\nSSH config: {the_lab.ssh_config_path}")
    click.echo(f"Try:        provision facts {the_lab.inventory_path}")  # its hosts carry the ssh_config


@lab.command()
@dir_option
def down(lab_dir):
    """Remove every namespace, mount, link, process and file the lab made (also of a crashed, half-made lab)."""
    the_lab = Lab(lab_dir)
    removed = the_lab.down(log=lambda message: click.echo(message, err=True))
    click.echo(f"Lab in {the_lab.dir} is down" + ("" if removed else " (there was nothing to remove)") + ".")


@lab.command()
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
@dir_option
def status(as_json, lab_dir):
    """Nodes, addresses, power, sshd, GPUs (visible / configured), faults."""
    found = Lab(lab_dir).status()
    if as_json:
        click.echo(json.dumps(found, indent=2))
    elif found["phase"] == "down":
        click.echo(f"No lab in {found['dir']}.")
    else:
        _print_status(found)
    sys.exit(0 if found["phase"] == "up" else 1)


@lab.command()
@click.argument("node")
@dir_option
def reboot(node, lab_dir):
    """Power-cycle NODE: its processes die, GPU settings reset, its enabled boot units run, sshd comes back.

    A node also reboots itself, as a machine does: `reboot` in it (sync, reboot(2)); the lab boots it again.
    """
    seconds = Lab(lab_dir).reboot(node, log=lambda message: click.echo(message, err=True))
    click.echo(f"{node} rebooted ({seconds:.1f}s).")


@lab.command()
@click.argument("node")
@click.argument("kind", type=click.Choice(FAULTS), metavar="KIND")
@click.option("--gpu", type=int, help="GPU slot (its index with every GPU present) for the gpu faults.  [default: 0]")
@click.option("--nic", help="NIC for nic-down and nic-slow.  [default: the node's first fabric NIC]")
@click.option("--link", type=int, help="NVLink link for the gpu-nvlink faults.  [default: 0]")
@click.option("--port", help="RDMA port for the ib faults: HCA or HCA:PORT (mlx5_1).  [default: the node's first]")
@click.option("--watts", type=click.IntRange(50, 20000), help="What the supplies give the GPUs, for psu-weak.  [default: 900]")
@dir_option
def fault(node, kind, gpu, nic, link, port, watts, lab_dir):
    """Inject a fault into NODE for a drill, or clear them all.

    \b
      gpu-off-bus      the GPU fell off the bus (Xid 79 in the kernel log):
                       nvidia-smi prints "Unable to determine the device
                       handle" for it and exits 15; a reboot brings it back
      gpu-gone         the GPU no longer enumerates (a dead card or riser):
                       nvidia-smi numbers the others again; it stays gone
                       across reboots until clear
      pcie-degraded    the GPU's PCIe link trains below its maximum
      pcie-degraded-under-load
                       the same only while a load runs (a riser that
                       retrains down under heavy traffic): at rest at its
                       maximum; until clear
      gpu-pcie-errors  PCIe AER corrected errors on the GPU's link in the
                       kernel log (a marginal riser)
      gpu-ecc          an uncorrectable ECC error (Xid 48, then 63): a page
                       retirement (V100) or row remap (H100) pending until
                       the reboot that completes it
      gpu-power-brake  the PSU asserts the power brake: clocks event reasons
                       HW Slowdown and HW Power Brake Slowdown, until clear
      gpu-thermal      HW Slowdown and HW Thermal Slowdown, until clear
      gpu-process      a process runs on the GPU (nvidia-smi lists it among
                       its compute apps): a job is there; until clear or a
                       reboot
      gpu-mig-instances-gone
                       the GPU's MIG instances are gone (as after a crash),
                       MIG mode stays on; refused on a GPU not in MIG mode
      gpu-nvlink-down  NVLink link --link of the GPU no longer trains:
                       nvidia-smi nvlink -s says <inactive>, until clear
      gpu-nvlink-errors
                       Replay, Recovery and CRC Errors counted on link
                       --link (nvidia-smi nvlink -e); a reboot zeroes them
      gpu-bad-riser    the GPU's riser goes bad under heavy traffic: its link
                       logs corrected AER errors while a load runs (verify's
                       active run), none at rest; until clear
      gpu-reset-required
                       the driver asks for a GPU reset (recovery action
                       Reset, Xid 154): `nvidia-smi -r` clears it once
                       nothing holds the GPU (persistence daemon, fabric
                       manager, DCGM, a process); so does a reboot
      gpu-needs-reboot the GPU fell off the bus and came back (Xid 79), the
                       driver asks for a reboot (Reboot, Xid 154): a reset
                       leaves it, a reboot clears it
      gpu-failing-card as gpu-needs-reboot, again after every reboot (a card
                       to replace, same serial); until clear
      nic-down         a fabric cable is pulled (the node sees NO-CARRIER)
      nic-slow         a fabric port is cabled to the 1GbE switch: its speed
                       reads 1000 Mb/s, across reboots until clear
      ib-down          an InfiniBand cable is pulled from RDMA port --port:
                       /sys/class/infiniband says 1: DOWN, 2: Polling, and
                       link_downed counts it; across reboots until clear
      ib-slow          the port's link trained on one lane of four: its rate
                       reads 25 Gb/sec (1X EDR); across reboots until clear
      ib-errors        the port counts symbol_error and port_rcv_errors (a
                       marginal cable; more at each); a reboot zeroes them
      peermem-unloaded nvidia_peermem is unloaded (rmmod): NCCL has no
                       GPUDirect RDMA; the next boot loads it again where
                       /etc/modules-load.d names it
      kernel-without-module
                       a newer kernel is installed without the NVIDIA
                       module (/boot/vmlinuz-6.1.0-40-amd64, no nvidia.ko):
                       the next boot would strand the node; until clear
      psu-failure      the BMC logs PSU1 "Failure detected" and its end (a
                       brownout tripped it; the PSU works again)
      ac-lost          the BMC logs PSU1 "Power Supply AC lost" and its end
      psu-sensor       PSU1 fails and stays failed: its sensor reads
                       "Failure detected" (and the BMC logs it)
      fan-failed       FAN1 stops: 300 RPM, below its critical thresholds
                       (and the BMC logs it); clear also clears the BMC's log
      psu-overheat     the BMC logs PSU1's own temperature sensor going
                       "Transition to Non-recoverable" and back (it overheated)
      memory-nonrecoverable
                       the BMC logs its memory sensor going "Transition to
                       Non-recoverable" and back
      psu-weak         the node's supplies give its GPUs --watts (900) from
                       now on: under a load whose transients pass it, the
                       GPU drawing most falls off the bus; across reboots
                       until clear
      fabric-manager-version
                       nvidia-fabricmanager is replaced with a release no
                       driver matches (an unpinned upgrade): the running one
                       goes on; at the next boot it aborts and the GPUs stay
                       "In Progress"; until clear (or apply)
      sshd-down        the node runs but refuses SSH (unreachable)
      mgmt-down        the node's management cable is pulled: it runs on, but
                       what is sent to it over SSH vanishes, with no answer,
                       no FIN and no RST (a dead switch port); until clear
      clear            every fault above undone
    """
    click.echo(f"{node}: {Lab(lab_dir).fault(node, kind, gpu, nic, link, port, watts)}")


def _print_status(found: dict[str, Any]) -> None:
    click.echo(f"Lab in {found['dir']} ({found.get('source')}): {found['phase']}, slot {found.get('slot')}")
    rows = [("NODE", "ADDRESS", "POWER", "SSHD", "GPUS", "VISIBLE", "FAULTS")]
    for n in found["nodes"]:
        visible = "-" if n["gpus_visible"] is None else f"{n['gpus_visible']}/{n['gpus_configured']}"
        rows.append((n["name"], n["address"], n["power"], "up" if n["sshd"] else "DOWN", n["gpus"], visible,
                     "; ".join(n["faults"]) or "-"))
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        click.echo("  " + "  ".join(str(cell).ljust(w) for cell, w in zip(row, widths)).rstrip())


if __name__ == "__main__":
    lab(prog_name="provision lab")
