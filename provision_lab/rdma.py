"""A lab node's RDMA ports: /sys/class/infiniband as the node's own processes read it, and the drills on it.

Each RDMA NIC of provision_custom.lab.rdma (mlx5_0, ...) is an HCA with one InfiniBand port, 1, at 4X EDR. Its files are
written as the kernel writes them (drivers/infiniband/core/sysfs.c): ports/1/state "4: ACTIVE", phys_state
"5: LinkUp", rate "100 Gb/sec (4X EDR)", link_layer "InfiniBand", and counters/* (the port's PMA PortCounters),
all 0 at power-on.

How the node sees them (node.py): Node.create stages that power-on tree on the node's disk (layout.NODE_RDMA);
every boot, before the chroot and inside the node's own mount namespace, SETUP puts a tmpfs over the node's
/sys/class with each of its real entries bind-mounted back (the node's sysfs: its own /sys/class/net), makes it
read-only, mounts a second, writable tmpfs at /sys/class/infiniband and copies the staged tree into it. This
machine's /sys is never touched, and the mounts go with the node's mount namespace at a power cut.

The drills (faults.py calls them) write the node's live copy, in its mount namespace: `ib-down` (a pulled cable:
DOWN, Polling, link_downed counted), `ib-slow` (the link trained 1 lane of 4: 25 Gb/s), `ib-errors` (symbol and
receive errors counted). A boot starts again from the staged tree: the counters are 0 again, and faults.after_boot
sets a pulled cable or a slow link up again, as the cable is still there.

A node with RDMA NICs has GPUDirect RDMA's peer-memory module, nvidia_peermem, to load: SETUP puts a tmpfs over
the node's /sys/module (staged empty: layout.NODE_MODULES), and `modprobe nvidia-peermem` in the node (an install
command of its modprobe.d, modprobe_files) loads it there: nvidia_peermem/version, the file NCCL looks for, says the
version of the driver loaded at that boot (/proc/driver/nvidia/version); with no driver loaded it fails as modprobe
does for a module it cannot find. Nothing loads it at boot but what /etc/modules-load.d (or Debian's /etc/modules)
names, as systemd-modules-load does (nodeinit.load_modules): provision's nvidia-peermem task, or a lab spec's
provision_custom.lab.modules_load. `peermem-unloaded` removes it (rmmod); `clear` loads it again.
"""

from __future__ import annotations

import shlex
from typing import Any

from provision_lab.layout import NODE_LAB_DIR, NODE_RDMA
from provision_lab.system import LabError

SYS_CLASS_IB = "/sys/class/infiniband"
PORT = 1  # each simulated HCA has one port
HEALTHY = {"state": "4: ACTIVE", "phys_state": "5: LinkUp", "rate": "100 Gb/sec (4X EDR)", "link_layer": "InfiniBand"}
# The kernel's counters/ files for a port (sysfs.c pma_attrs), in its order.
COUNTERS = ("symbol_error", "link_error_recovery", "link_downed", "port_rcv_errors",
            "port_rcv_remote_physical_errors", "port_rcv_switch_relay_errors", "port_xmit_discards",
            "port_xmit_constraint_errors", "port_rcv_constraint_errors", "local_link_integrity_errors",
            "excessive_buffer_overrun_errors", "VL15_dropped", "port_xmit_data", "port_rcv_data", "port_xmit_packets",
            "port_rcv_packets", "port_xmit_wait")
# The drills' values: a pulled cable polls for a peer (a down port still says a rate: ibstat's "Rate: 10");
# a link that trained on one lane of four; the errors a marginal cable counts, added at each ib-errors.
DOWN = {"state": "1: DOWN", "phys_state": "2: Polling", "rate": "10 Gb/sec (4X SDR)"}
SLOW = {"rate": "25 Gb/sec (1X EDR)"}
ERRORS = {"symbol_error": 1520, "port_rcv_errors": 37}
COUNTER_MAX = {"symbol_error": 65535, "port_rcv_errors": 65535, "link_downed": 255}  # 16 and 8 bits: they stop
RDMA_FAULTS = ("ib-down", "ib-slow", "ib-errors")
PEERMEM = "nvidia_peermem"
SYS_MODULE = "/sys/module"
MODPROBE_CONF = "/etc/modprobe.d/provision-lab-peermem.conf"
PEERMEM_LOADER = f"{NODE_LAB_DIR}/insmod-nvidia-peermem"  # what the install command runs
# The loader: the loaded driver's version from its /proc file (the first dotted number: "... Kernel Module  580.159.04
# ..." or "... Open Kernel Module for x86_64  580.159.04 ..."), as nvidia_peermem's own version.
LOADER = f"""#!/bin/sh
# provision lab: insmod nvidia_peermem into this node's /sys/module (rdma.py), at the loaded driver's version.
version=$(awk '{{for (i = 1; i <= NF; i++) if ($i ~ /^[0-9]+[.][0-9.]+$/) {{print $i; exit}}}}' \
    /proc/driver/nvidia/version 2>/dev/null)
if [ -z "$version" ]; then
    echo "modprobe: FATAL: Module {PEERMEM} not found in directory /lib/modules/$(uname -r)" >&2
    exit 1
fi
mkdir -p {SYS_MODULE}/{PEERMEM} && echo "$version" > {SYS_MODULE}/{PEERMEM}/version
"""
OLDER_LAB = ("this node has no simulated /sys/class/infiniband (a lab made before RDMA ports were simulated): "
             "`provision lab down` and `up` again")


def power_on_tree(rdma: list[dict[str, Any]]) -> dict[str, str]:
    """The staged tree of a node's RDMA NICs (NodeSpec.rdma): relative path -> content."""
    files = {}
    for nic in rdma:
        port = f"{nic['name']}/ports/{PORT}"
        files[f"{nic['name']}/node_type"] = "1: CA\n"
        files |= {f"{port}/{name}": f"{value}\n" for name, value in HEALTHY.items()}
        files |= {f"{port}/counters/{name}": "0\n" for name in COUNTERS}
    return files


def modprobe_files(rdma: list[dict[str, Any]]) -> dict[str, tuple[int, str]]:
    """The node's modprobe.d and its loader, where it has RDMA NICs (path -> mode, text): `modprobe nvidia-peermem`
    (provision's nvidia-peermem task, the boot's modules-load.d, or by hand) loads the module into the node's
    /sys/module, as the real one inserts it into the kernel; `modprobe -r` unloads it. The node's own kmod runs it
    (an install command needs no module file)."""
    if not rdma:
        return {}
    return {MODPROBE_CONF: (0o644, "# provision lab: the simulated nvidia_peermem (rdma.py)\n"
                                   f"install {PEERMEM} {PEERMEM_LOADER}\n"
                                   f"remove {PEERMEM} rm -rf {SYS_MODULE}/{PEERMEM}\n"),
            PEERMEM_LOADER: (0o755, LOADER)}


def unload_peermem_script() -> str:
    """rmmod nvidia_peermem, in the node's /sys/module; an error where the node has no such module."""
    module = f"{SYS_MODULE}/{PEERMEM}"
    return (f"[ -d {module} ] || {{ echo 'this node has no {PEERMEM} loaded (a node without RDMA NICs, or a lab "
            f"made before modules were simulated)' >&2; exit 1; }}; rm -rf {module}")


def which_port(rdma: list[dict[str, Any]], node: str, wanted: str | None) -> str:
    """"mlx5_0:1" for --port mlx5_0 (or mlx5_0:1); the node's first RDMA NIC when not given."""
    ports = [f"{nic['name']}:{PORT}" for nic in rdma]
    if not ports:
        raise LabError(f"{node} has no RDMA NIC (provision_custom.lab.rdma)", 2)
    if wanted is None:
        return ports[0]
    chosen = wanted if ":" in wanted else f"{wanted}:{PORT}"
    if chosen not in ports:
        raise LabError(f"--port {wanted}: {node} has RDMA ports {', '.join(ports)}", 2)
    return chosen


def fault_script(kind: str, port: str, counted: bool = True) -> str:
    """The sh, run inside the node, that puts `kind` on port "mlx5_0:1" in the node's /sys/class/infiniband.
    counted=False: set up again after a boot (the cable was never up: nothing counted since)."""
    hca, number = port.split(":")
    where = shlex.quote(f"{SYS_CLASS_IB}/{hca}/ports/{number}")
    lines = ["set -e", f"[ -d {where} ] || {{ echo {shlex.quote(OLDER_LAB)} >&2; exit 1; }}", f"cd {where}"]
    values = DOWN if kind == "ib-down" else SLOW if kind == "ib-slow" else {}
    lines += [f"echo {shlex.quote(value)} > {name}" for name, value in values.items()]
    added = ERRORS if kind == "ib-errors" else {"link_downed": 1} if kind == "ib-down" and counted else {}
    lines += [f"read n < counters/{name}; n=$((n + {more})); [ $n -le {COUNTER_MAX[name]} ] || n={COUNTER_MAX[name]}; "
              f"echo $n > counters/{name}" for name, more in added.items()]
    return "; ".join(lines)


def restore_script() -> str:
    """Every port as at power-on: the staged tree copied over the live one (clear); nothing in a node of a lab made
    before they were simulated."""
    return f"[ ! -d {NODE_RDMA} ] || [ ! -d {SYS_CLASS_IB} ] || cp -a {NODE_RDMA}/. {SYS_CLASS_IB}/"


def reload_peermem_script() -> str:
    """What `clear` does after peermem-unloaded: modprobe it again (the rmmod undone)."""
    return f"modprobe {PEERMEM}"
