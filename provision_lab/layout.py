"""Where the lab's things live and which versions it makes: the one place for the paths, versions and defaults
that lab modules share (each imports them from here).

Two programs run inside a node on their own, without this package: the GPU simulator (gpusim/, stdlib only)
and the node's init (nodeinit.py). Each keeps a copy of the few values below that it needs (the simulator:
its default driver and where a driver package puts its library version; nodeinit: where the simulator and
its config are); tests/unit/provision_lab/test_lab_layout.py checks that the copies agree with this file.
"""

from __future__ import annotations

from pathlib import Path

# --- this checkout: the lab's own sources -----------------------------------------------------------

LAB_SOURCE = Path(__file__).parent  # provision_lab
SOURCE_ROOT = LAB_SOURCE.parent  # the directory holding this package (and provision): what a supervisor imports
SIM_PACKAGE = LAB_SOURCE / "gpusim"  # the GPU simulator's package; nodes get it as one zipapp (simzip.py)
NODEINIT_SOURCE = LAB_SOURCE / "nodeinit.py"  # a node's PID 1, copied to NODE_INIT

# --- this machine -----------------------------------------------------------------------------------

DEFAULT_DIR = Path("/var/lib/provision-lab/default")  # the default lab is slot 0: inventories/lab.yaml
LOCK = Path("/run/lock/provision-lab.lock")  # one lab command at a time changes labs on this machine
CACHE = Path("/var/cache/provision-lab")  # built once, shared by every lab: image, Python layers, apt repository
NETNS_DIR = Path("/var/run/netns")  # where `ip netns add` puts a network namespace (iproute2's NETNS_RUN_DIR)

# --- inside a node ----------------------------------------------------------------------------------

NODE_LAB_DIR = "/usr/lib/provision-lab"  # the lab's own files in a node
NODE_SIM = f"{NODE_LAB_DIR}/gpusim"  # the simulator's own commands (reboot, fault): a wrapper
NODE_SIM_ZIPAPP = f"{NODE_LAB_DIR}/gpusim.pyz"  # the simulator itself, which the wrappers import (zipimport)
NODE_NVML_LIBRARY = f"{NODE_LAB_DIR}/nvml-library-version"  # the installed driver's version (a driver package's)
NODE_SIM_CONFIG = "/etc/nvidia-sim/config.json"  # the node's GPUs, as the simulator reads them
NODE_RDMA = f"{NODE_LAB_DIR}/infiniband"  # the RDMA ports at power-on, copied to /sys/class/infiniband each boot
NODE_MODULES = f"{NODE_LAB_DIR}/modules"  # /sys/module at power-on (empty) of a node with RDMA NICs (rdma.py)
NVIDIA_SMI = "/usr/bin/nvidia-smi"  # wrappers around the simulator, as a driver package installs them
NVIDIA_PERSISTENCED = "/usr/bin/nvidia-persistenced"
DMESG = "/usr/bin/dmesg"  # the simulated kernel's log (the node shares this machine's real one)
NODE_INIT = "/usr/local/sbin/provision-lab-init"  # nodeinit.py: PID 1 of the node
NODE_REBOOT = "/usr/sbin/reboot"  # the node reboots itself with it (node.py REBOOT)
APT_REPO_IN_NODE = "/srv/provision-lab/apt"  # the lab's apt repository, a read-only bind mount (Node.create)
NODE_BMC_DIR = f"{NODE_LAB_DIR}/bmc"  # the node's simulated BMC: ipmi_sim's configuration (bmc.py)
NODE_BMC_STATE = "/var/lib/provision-lab-bmc"  # ipmi_sim's state: its SDRs, and its event log across reboots
NODE_BMC_CONSOLE = 9000  # ipmi_sim's command console, on the node's 127.0.0.1: how the lab injects BMC faults

# --- versions and a node's defaults -------------------------------------------------------------------

DRIVER_VERSION = "580.159.04"  # the simulated driver a node gets unless its inventory says provision_driver.version
OTHER_DRIVER_VERSION = "570.195.03"  # a second branch in the apt repository: drivers to move between


def driver_package(version: str) -> str:
    """The simulated driver package of a version: nvidia-driver-<branch>, as Ubuntu names them."""
    return f"nvidia-driver-{version.split('.')[0]}"


# The apt repository's simulated driver packages: name -> driver version (branches gpusim's CUDA_FOR_DRIVER knows).
DRIVERS = {driver_package(v): v for v in (DRIVER_VERSION, OTHER_DRIVER_VERSION)}
DEFAULT_GPUS = ({"model": "v100-sxm2-16gb", "count": 4},)  # the basement's main box
DEFAULT_NICS = ("ens803f0", "ens803f1")  # the seed cluster's dual-port 10GbE
