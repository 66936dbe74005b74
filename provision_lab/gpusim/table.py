"""nvidia-smi's plain summary table, -L and --version."""

from __future__ import annotations

import time

from .gpu import Host, memory_used
from .migviews import render_mig_list, render_mig_table
from .modes import compute_mode, ecc_on, mig_on, mode_word

# The table's Compute M. column abbreviates (real tables: `0%   E. Process`; gpu_models.md "Modes").
TABLE_COMPUTE_WORDS = {"DEFAULT": "Default", "EXCLUSIVE_PROCESS": "E. Process", "PROHIBITED": "Prohibited"}

PROCESSES_BOX = """\
+-----------------------------------------------------------------------------------------+
| Processes:                                                                              |
|  GPU   GI   CI              PID   Type   Process name                        GPU Memory |
|        ID   ID                                                               Usage      |
|=========================================================================================|
|  No running processes found                                                             |
+-----------------------------------------------------------------------------------------+
"""


def table_row(cells: list) -> str:
    return "|" + "|".join(cells) + "|"


def spread(left: str, right: str, width: int) -> str:
    return left + " " * max(1, width - len(left) - len(right)) + right


def render_table(host: Host, gpus: list) -> str:
    rule = "+" + "-" * 89 + "+"
    grid = "+" + "-" * 41 + "+" + "-" * 24 + "+" + "-" * 22 + "+"
    lines = [
        time.asctime() + "       ", rule,
        f"| NVIDIA-SMI {host.driver:<23}Driver Version: {host.driver:<15}CUDA Version: {host.cuda:<9}|", grid,
        "| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |",
        "| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |",
        "|                                         |                        |               MIG M. |",
        "|=========================================+========================+======================|",
    ]
    for g in gpus:
        m = g.model
        ecc = "N/A" if ecc_on(g.record) is None else str(g.record["ecc_volatile"]) if g.ecc_enabled else "Off"
        if g.mig_enabled:  # in MIG mode the row shows the ECC mode; the counts are the MIG devices'
            ecc = "On" if g.ecc_enabled else "Off"
        util = "N/A" if g.mig_enabled else "0%"
        fan = "  0%" if m.fan else " N/A"
        used = memory_used(g)
        lines += [
            table_row([spread(f"{g.index:>4}  {m.name}", "On  " if g.persistent else "Off ", 41),
                       f"{g.bus_id + ' Off':>23} ", f"{ecc:>21} "]),
            table_row([spread(f"{fan}  {g.temperature:>3}C    {m.idle_pstate}",
                              f"{int(g.power_draw)}W / {int(g.power_limit):>4}W ", 41),
                       f"{used:>8}MiB / {g.memory_total:>6}MiB ",
                       f"{util:>8}{TABLE_COMPUTE_WORDS[compute_mode(g.record)]:>13} "]),
            table_row([" " * 41, " " * 24, f"{mode_word(mig_on(g.record)) or 'N/A':>21} "]),
            grid,
        ]
    mig = render_mig_table(gpus)
    return "\n".join(lines) + "\n\n" + "".join(line + "\n" for line in mig) + ("\n" if mig else "") + PROCESSES_BOX


def render_list(gpus: list) -> str:
    return "".join(f"GPU {g.index}: {g.model.name} (UUID: {g.uuid})\n" + render_mig_list(g) for g in gpus)


def render_version(host: Host) -> str:
    nvml = ".".join(host.driver.split(".")[:2])
    return (f"NVIDIA-SMI version  : {host.driver}\nNVML version        : {nvml}\n"
            f"DRIVER version      : {host.driver}\nCUDA Version        : {host.cuda}\n")
