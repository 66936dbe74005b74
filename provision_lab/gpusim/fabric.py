"""nv-fabricmanager: NVIDIA Fabric Manager's stand-in on an NVSwitch board (the lab's nvidia-fabricmanager-<branch>
package runs it as its service).

As the real one at start: it checks the loaded driver against its own version (what its package ships,
NVIDIA_SIM_FABRIC_MANAGER) and, at any other, logs the line the real one logs and exits 1; else it registers the
board's GPUs with the fabric (fabric.state Completed, status Success), logs its start lines and stays running
until it is killed. Its lines are the real ones (../shared/reference/node-lifecycle-reference.md, 1.4 and 1.6).
"""

from __future__ import annotations

import signal
import sys

from .env import env_path
from .errors import SimError
from .state import open_state, require_config

MISMATCH = ("fabric manager NVIDIA GPU driver interface version {fm} don't match with driver version {driver}. "
            "Please update with matching NVIDIA driver package.")
STARTED = ("Connected to 1 node.",
           "Successfully configured all the available NVSwitches to route GPU NVLink traffic. NVLink Peer-to-Peer "
           "support will be enabled once the GPUs are successfully registered with the NVLink fabric.")


def own_version() -> str:
    path = env_path("NVIDIA_SIM_FABRIC_MANAGER")
    try:
        with open(path) as fh:
            return fh.read().strip()
    except OSError as exc:
        raise SimError(f"cannot read the fabric manager's version {path}: {exc}")


def register() -> str | None:
    """The board's GPUs registered with the fabric, where the loaded driver is this fabric manager's version; else
    the line it logs before it exits."""
    version = own_version()
    with open_state(require_config()) as state:
        driver = state.get("driver_version")
        if driver is None:
            return "NVIDIA GPU driver is not loaded"  # not captured from a real one: the lab's own words
        if driver != version:
            return MISMATCH.format(fm=version, driver=driver)
        if not state.get("nvswitches"):
            return "No NVSwitch found on this system"  # not captured either
        for record in state["gpus"]:
            record.update(fabric_state="Completed", fabric_status="Success")
    return None


def fabric_manager_main(args: list) -> int:
    """nv-fabricmanager [-c CONFIG]: the options are taken, not read."""
    failed = register()
    if failed:
        sys.stderr.write(failed + "\n")
        return 1
    sys.stdout.write("".join(line + "\n" for line in STARTED))
    sys.stdout.flush()
    while True:  # a daemon: until it is stopped (the node's power, kill)
        signal.pause()
