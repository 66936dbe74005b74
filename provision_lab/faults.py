"""Faults for drills: what `provision lab fault` does to a running node, how `clear` undoes it, and which
faults a reboot ends. The lab's state file records what was injected (Lab.fault)."""

from __future__ import annotations

import os
import signal

from provision_lab import bmc, netns, rdma, stack_containers, stack_fabric, stack_kernels
from provision_lab.layout import DRIVERS
from provision_lab.nodeinit import DRIVER_LOADED
from provision_lab.node import Node
from provision_lab.system import LabError, run

# The simulator's `fault GPU KIND` (KIND without "gpu-").
GPU_FAULTS = ("gpu-off-bus", "gpu-gone", "gpu-init-failed", "pcie-degraded", "pcie-degraded-under-load", "gpu-ecc", "gpu-power-brake", "gpu-thermal",
              "gpu-pcie-errors", "gpu-nvlink-down", "gpu-nvlink-errors", "gpu-bad-riser", "gpu-process",
              "gpu-mig-instances-gone", "gpu-reset-required", "gpu-needs-reboot", "gpu-failing-card")
NVLINK_FAULTS = ("gpu-nvlink-down", "gpu-nvlink-errors")  # these name a link: --link L (default 0)
FAULTS = (*GPU_FAULTS, "nic-down", "nic-slow", *rdma.RDMA_FAULTS, "peermem-unloaded", "kernel-without-module",
          *bmc.FAULTS, "psu-weak",
          stack_fabric.FAULT,
          "sshd-down", "mgmt-down", "stale-cdi-spec", "clear")  # ib-*: --port HCA; psu-weak: --watts N
WEAK_PSU_WATTS = 900  # psu-weak: what the V100 box's home-built supplies gave its four GPUs
SLOW_NIC_MBPS = 1000  # nic-slow: the port is cabled to the 1GbE switch (the seed blades' old internet uplink)
# What a reboot ends: a GPU off the bus is back, a pending ECC repair is done, the kernel log is new, the NVLink
# error counters start over, sshd starts, a process on a GPU has died. A gone GPU, a degraded link, an NVLink link down, a power brake or
# overheating, a pulled cable and a slow port stay.
GONE_AT_REBOOT = ("gpu-off-bus", "gpu-ecc", "gpu-pcie-errors", "gpu-nvlink-errors", "gpu-process", "sshd-down",
                  "gpu-reset-required", "gpu-needs-reboot",  # a failing card fails again at every boot
                  "gpu-mig-instances-gone",  # a reboot loses every MIG instance anyway: nothing of it stays
                  "ib-errors",  # an RDMA port's counters start over at 0; a pulled or slow IB cable stays
                  "peermem-unloaded")  # the boot loads what modules-load.d names (nodeinit.load_modules)


def inject(node: Node, kind: str, gpu: int | None, nic: str | None, link: int | None = None,
           port: str | None = None, watts: int | None = None) -> str:
    """Inject one fault; what was done, in words (as the state file records it)."""
    if kind == "psu-weak":  # the simulator's load browns out past it (gpusim psu; load.py)
        watts = WEAK_PSU_WATTS if watts is None else watts
        node.gpusim("psu", str(watts))
        return f"psu-weak {watts} W"
    if kind == stack_fabric.FAULT:  # an unpinned apt upgrade of fabric manager (stack_fabric.py)
        node.exec(["sh", "-c", stack_fabric.mismatch_script()], timeout=120)
        return f"{kind} {stack_fabric.MISMATCHED_VERSION}"
    if kind in bmc.FAULTS:  # the node's BMC: its event log, a PSU or fan sensor (bmc.py)
        return bmc.inject(node, kind)
    if kind in rdma.RDMA_FAULTS:  # in the node's own /sys/class/infiniband (rdma.py)
        port = rdma.which_port(node.spec.rdma, node.spec.name, port)
        node.exec(["sh", "-c", rdma.fault_script(kind, port)])
        return f"{kind} {port}"
    if kind == "peermem-unloaded":  # rmmod nvidia_peermem (rdma.py)
        node.exec(["sh", "-c", rdma.unload_peermem_script()])
        return kind
    if kind == "kernel-without-module":  # a newer kernel the next boot takes, without nvidia.ko (stack_kernels.py)
        node.exec(["sh", "-c", stack_kernels.fault_script()])
        return kind
    if kind in GPU_FAULTS:
        gpu = 0 if gpu is None else gpu
        if not 0 <= gpu < node.spec.gpu_count:
            raise LabError(f"--gpu {gpu}: {node.spec.name} has GPUs 0..{node.spec.gpu_count - 1}", 2)
        if kind in NVLINK_FAULTS:  # the simulator refuses a link the GPU lacks, or a GPU without NVLink
            link = 0 if link is None else link
            node.gpusim("fault", str(gpu), kind.removeprefix("gpu-"), "--link", str(link))
            return f"{kind} GPU {gpu} link {link}"
        node.gpusim("fault", str(gpu), kind.removeprefix("gpu-"))
        return f"{kind} GPU {gpu}"
    if kind in ("nic-down", "nic-slow"):
        nic = nic or node.spec.nics[0]
        if nic not in node.spec.nics:
            raise LabError(f"--nic {nic}: {node.spec.name} has {', '.join(node.spec.nics)}", 2)
        if kind == "nic-down":
            netns.set_cable(node.net, node.spec.index, node.spec.nics.index(nic), plugged=False)
        else:
            slow_link(node, nic)
        return f"{kind} {nic}"
    if kind == "mgmt-down":
        mgmt_cable(node, plugged=False)
        return kind
    if kind == "stale-cdi-spec":
        return stale_cdi_spec(node)
    if kind == "sshd-down":
        for pid, comm in node.processes().items():
            if comm == "sshd":
                os.kill(pid, signal.SIGKILL)
        return "sshd-down"
    raise LabError(f"unknown fault {kind!r}; one of {', '.join(FAULTS)}", 2)


def clear(node: Node, faults: list[str]) -> str:
    """Undo every fault (those recorded, and any GPU or cable state besides); what was done, in words."""
    for fault in faults:
        if fault.startswith(stack_fabric.FAULT) and node.init_pid() is not None:
            node.exec(["sh", "-c", stack_fabric.matching_script()], timeout=120)
        if fault.startswith("nic-slow ") and node.init_pid() is not None:
            nic = fault.split()[1]
            node.exec(["umount", f"/sys/class/net/{nic}/speed"], check=False)
            node.shape_link(nic, netns.VETH_MBPS)
    for gpu in range(node.spec.gpu_count):
        node.gpusim("fault", str(gpu), "clear")
    if node.spec.gpu_count:
        node.gpusim("psu", "clear")  # the supplies the node was made with (provision_custom.lab.psu_watts)
    for k in range(len(node.spec.nics)):
        netns.set_cable(node.net, node.spec.index, k, plugged=True)
    mgmt_cable(node, plugged=True)
    if node.spec.rdma:
        node.exec(["sh", "-c", rdma.restore_script()])  # every RDMA port as at power-on
    if "peermem-unloaded" in faults:
        node.exec(["sh", "-c", rdma.reload_peermem_script()])  # the rmmod undone
    if "kernel-without-module" in faults:
        node.exec(["sh", "-c", stack_kernels.clear_script()])
    bmc.clear(node)  # its sensors healthy, its event log cleared (ipmitool sel clear)
    if "sshd" not in node.processes().values():
        node.exec(["/usr/sbin/sshd"])  # daemonizes; the node's PID 1 adopts it
        node.wait_ssh()
    return f"cleared {', '.join(faults) or 'nothing (no fault recorded)'}"


def after_boot(node: Node, faults: list[str]) -> None:
    """The faults a boot ends leave the record (faults, changed in place); what stays is set up again where the
    node's boot undid it."""
    faults[:] = [f for f in faults if not f.startswith(GONE_AT_REBOOT)]
    for fault in faults:  # a cable into the slow switch is still there after the reboot
        if fault.startswith("nic-slow "):
            slow_link(node, fault.split()[1])
        elif fault.startswith(("ib-down ", "ib-slow ")):  # as is a pulled IB cable, or one on a lane of four
            kind, port = fault.split()
            node.exec(["sh", "-c", rdma.fault_script(kind, port, counted=False)])
    bmc.after_boot(node, faults)  # the BMC restarted with the node: a failed PSU or fan is failed again


def stale_cdi_spec(node: Node) -> str:
    """The CDI spec left from the driver before an upgrade: the node's nvidia-ctk writes the lab's other driver's
    spec to where NVIDIA's docs put it (stack_containers.py); `provision apply` generates it again."""
    loaded = node.exec(["cat", DRIVER_LOADED], check=False).stdout
    other = next(version for version in sorted(DRIVERS.values()) if version not in loaded)
    made = node.exec(["env", f"{stack_containers.STALE_DRIVER_ENV}={other}", "nvidia-ctk", "cdi", "generate",
                      f"--output={stack_containers.CDI_SPEC}"], check=False)
    if made.returncode != 0:
        raise LabError(f"stale-cdi-spec: {node.spec.name} has no nvidia-ctk ({made.stderr.strip()}): apply with "
                       "provision_driver.container_toolkit first", 2)
    return f"stale-cdi-spec {other}"


def slow_link(node: Node, nic: str) -> None:
    """The node's kernel reports its fabric NIC at 1000 Mb/s: a file bound over the interface's speed in the
    node's own /sys (its mount namespace; a veth itself always says 10000); and the link carries what such a
    port would (shaped: netns.py)."""
    speed = f"/run/lab-{nic}-speed"
    node.exec(["sh", "-c", f"echo {SLOW_NIC_MBPS} > {speed} && mount --bind {speed} /sys/class/net/{nic}/speed"])
    node.shape_link(nic, SLOW_NIC_MBPS)


def mgmt_cable(node: Node, plugged: bool) -> None:
    """The node's management cable (its eth0: SSH) pulled or plugged: the host end of its veth down or up. Pulled,
    what the controller sends it vanishes and nothing comes back, no FIN, no RST, as when its switch port dies or
    its kernel panics; the node runs on, its fabric links up."""
    run(["ip", "link", "set", node.net.host_veth(node.spec.index), "up" if plugged else "down"])
