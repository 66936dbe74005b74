"""A process on a simulated GPU (`gpusim fault GPU process`): a real process on the node, started detached, which
`nvidia-smi --query-compute-apps` lists on that GPU for as long as it runs, as the driver lists a CUDA process:
a node running a job. It ends when the node reboots (its processes die) or at `fault GPU clear`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

MARK = "gpusim-compute-app"  # in the process's command line: a pid reused by another process is not it
USED_MIB = 20480  # what a training process holds on the GPU, as nvidia-smi reports it


def start_app(record: dict) -> dict:
    """A process that sleeps until killed, recorded on the GPU (read with .get: a newer key)."""
    proc = subprocess.Popen([sys.executable, "-c", "import time\nwhile True: time.sleep(3600)", MARK],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True, close_fds=True)
    app = {"pid": proc.pid, "used_mib": USED_MIB}
    record["apps"] = [*record.get("apps", []), app]
    return app


def running(record: dict) -> list[dict]:
    """The GPU's processes still running, each with its process name (the executable's path, as NVML names it)."""
    found = []
    for app in record.get("apps", []):
        try:
            with open(f"/proc/{app['pid']}/cmdline", "rb") as fh:
                words = fh.read().split(b"\0")
            name = os.readlink(f"/proc/{app['pid']}/exe")
        except OSError:
            continue  # ended: no longer on the GPU
        if MARK.encode() in words:
            found.append({**app, "name": name})
    return found


def stop_apps(record: dict) -> None:
    """clear: the GPU's processes end and leave it."""
    for app in running(record):
        try:
            os.kill(app["pid"], signal.SIGTERM)
        except OSError:
            pass
    record["apps"] = []
