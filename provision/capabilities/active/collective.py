"""The collective part of an active run: the training group's own all-reduce (provision-allreduce, which apply
writes beside the torchrun wrapper) started through the wrapper on every loaded node at once, so the launch path
is what is tested: the wrapper, its NCCL environment file, the rendezvous. NCCL on GPUs, gloo where torch has
no CUDA (the lab), told to use the interfaces NCCL would (GLOO_SOCKET_IFNAME, round-robin over them).

Bus bandwidth as nccl-tests define it: size / time x 2 (n - 1) / n for n processes, the slowest rank's. What it
should reach: the ports NCCL uses on the node with the least of them (each port held to what fabric.py holds
it to: active.expected_port_mbps, else fabric.PORT_EFFICIENCY of its speed), times ALLREDUCE_EFFICIENCY. Pure: commands/active.py
runs it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from provision.capabilities.active import fabric
from provision.core.checks import WARNING, Finding

# The share of the ports' expected rate a ring all-reduce's bus bandwidth must reach. Measured on the lab's
# shaped links (gloo, 4 MiB, four nodes with two 100 Mbit/s ports each): 0.0112 GB/s, 90 Mb/s, one port's
# worth (gloo paces itself to one), 56% of the 160 Mb/s the ports are held to there (80 Mb/s each); 0.4 leaves
# that a margin. NCCL on
# real NICs spreads over both ports and reaches more; held to this, a port or node that sets a slower pace
# still falls short.
ALLREDUCE_EFFICIENCY = 0.4
CHECK = "gpus_hold_up_under_load"  # the check whose finding this is (active/checks.py)
RANK_LINE = re.compile(r"^rank (\d+) of (\d+) on (\S+) .*?: (\w+)(?: via [^:]*)?: all_reduce sum .*?, "
                       r"([\d.]+) MiB in ([\d.]+) ms \(bus bandwidth ([\d.]+) GB/s\)$")


@dataclass
class Collective:
    group: str
    hosts: list[str]
    expected_gbs: float | None
    rule: str
    busbw_gbs: float | None = None  # the slowest rank's
    slowest: str = ""  # its node
    backend: str = ""
    error: str = ""


def expected(used: dict[str, list], setting: dict[str, float | None]) -> tuple[float | None, str]:
    """(GB/s, rule) for a group: host -> the Interfaces NCCL uses, host -> active.expected_port_mbps."""
    per_host = {}
    for host, ports in used.items():
        mbps = [setting.get(host) or (p.speed_mbps * fabric.PORT_EFFICIENCY if p.speed_mbps else 0.0) for p in ports]
        if not ports or not all(mbps):
            return None, f"{host}: no port speed to hold it to"
        per_host[host] = sum(mbps)
    if not per_host:
        return None, "no port NCCL uses"
    least = min(per_host, key=lambda host: per_host[host])
    return per_host[least] * ALLREDUCE_EFFICIENCY / 8000, (f"{ALLREDUCE_EFFICIENCY:.0%} of {per_host[least]:g} "
                                                           f"Mb/s, the ports of {least}, which has the least")


def read(outputs: dict[str, str], found: Collective) -> Collective:
    """Every node's output of the wrapper's run into the group's result: the slowest rank's bus bandwidth."""
    ranks = []
    for host, text in outputs.items():
        for line in text.splitlines():
            match = RANK_LINE.match(line.strip())
            if match:
                ranks.append((float(match[7]), host, match[4]))
    ok = any(line.startswith("all_reduce ok:") for text in outputs.values() for line in text.splitlines())
    if not ok or not ranks:
        last = [line for text in outputs.values() for line in text.strip().splitlines()[-1:]]
        found.error = "; ".join(last[:3]) or "no output"
        return found
    found.busbw_gbs, found.slowest, found.backend = min(ranks)
    return found


def finding(result: Collective, wrapper: str) -> Finding | None:
    group = f"the {result.group} group ({len(result.hosts)} nodes)"
    if result.error:
        return Finding(f"an all-reduce across {group} through {wrapper}", f"it failed: {result.error}",
                       f"run `{wrapper} provision-allreduce` on every node of the group: its output says which "
                       "node or setting stops it", about=(result.group,), severity=WARNING)
    if result.expected_gbs is None or result.busbw_gbs is None or result.busbw_gbs >= result.expected_gbs:
        return None
    return Finding(
        f"all-reduce bus bandwidth across {group} at {result.expected_gbs:.3g} GB/s ({result.rule})",
        f"{result.busbw_gbs:.3g} GB/s ({result.backend}; slowest rank on {result.slowest})",
        "the port tests name a slow port or link where there is one; else the NCCL environment (nccl.conf: "
        "NCCL_SOCKET_IFNAME, NCCL_SOCKET_NTHREADS) and the CPUs that drive the ports",
        about=(result.group,), severity=WARNING)
