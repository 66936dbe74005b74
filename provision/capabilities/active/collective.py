"""The collective part of an active run: the training group's own all-reduce (provision-allreduce, which apply
writes beside the torchrun wrapper) started through the wrapper on every loaded node at once, so the launch path
is what is tested: the wrapper, its NCCL environment file, the rendezvous. NCCL on GPUs, gloo where torch has
no CUDA (the lab), told to use the interfaces NCCL would (GLOO_SOCKET_IFNAME, round-robin over them).

Bus bandwidth as nccl-tests define it: size / time x 2 (n - 1) / n for n processes, the slowest rank's. What it
should reach: what the ports NCCL uses carry on the node with the least (each port: active.expected_port_mbps
where the inventory says, else what iperf3 measured it carry both ways, fabric.py), times ALLREDUCE_EFFICIENCY.
Held to what the ports carry, it tests what the ports cannot: NCCL (or gloo) using all of them, the launch path.
Pure: commands/active.py runs it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from provision.core.checks import WARNING, Finding

# The share of what the ports carry that a ring all-reduce's bus bandwidth must reach. Measured on the lab's
# shaped links (gloo, 4 MiB, four nodes with two 100 Mbit/s ports each, measured at 87-94 Mb/s): 0.0112 GB/s,
# 90 Mb/s, one port's worth, 48% of the two (gloo paces itself to one); 0.35 leaves that a margin. NCCL on real
# NICs spreads over both ports and reaches more; held to this, one slow port still falls well short.
ALLREDUCE_EFFICIENCY = 0.35
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


def expected(used: dict[str, list], setting: dict[str, float | None], carried: dict[str, dict[str, float]]
             ) -> tuple[float | None, str]:
    """(GB/s, rule) for a group: host -> the Interfaces NCCL uses, host -> active.expected_port_mbps, host -> port
    -> Mb/s measured (fabric.measured)."""
    per_host = {}
    for host, ports in used.items():
        rates = [setting.get(host) or carried.get(host, {}).get(p.name) for p in ports]
        if not ports or not all(rates):
            return None, f"{host}: no port measured or set to hold it to"
        per_host[host] = sum(r for r in rates if r)
    if not per_host:
        return None, "no port NCCL uses"
    least = min(per_host, key=lambda host: per_host[host])
    return per_host[least] * ALLREDUCE_EFFICIENCY / 8000, (f"{ALLREDUCE_EFFICIENCY:.0%} of the {per_host[least]:.0f} "
                                                           f"Mb/s the ports of {least} carry, the least")


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
