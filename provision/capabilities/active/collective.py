"""The collective part of an active run: the training group's own all-reduce (provision-allreduce, which apply
writes beside the torchrun wrapper) started through the wrapper, so the launch path is what is tested: the
wrapper, its NCCL environment file, the rendezvous. NCCL on GPUs, gloo where torch has no CUDA (the lab), told to
use the interfaces NCCL would (GLOO_SOCKET_IFNAME, round-robin over them). Three shapes, as GCM's check-nccl runs
them: within each node (its processes only: the GPUs' own links), across the whole group at once, and, when the
group falls short, pairwise along a ring of its nodes (N pairs, in two or three rounds of disjoint pairs) to name
the node or the link that sets its pace.

Bus bandwidth as nccl-tests define it: size / time x 2 (n - 1) / n for n processes, the slowest rank's. What it
should reach: what the ports NCCL uses carry on the node with the least (each port: provision_active.expected_port_mbps
where the inventory says, else what iperf3 measured it carry both ways, fabric.py), times ALLREDUCE_EFFICIENCY.
Held to what the ports carry, it tests what the ports cannot: NCCL (or gloo) using all of them, the launch path.
Pure: commands/active.py runs it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from provision.capabilities.active import judge
from provision.core.checks import WARNING, Finding

if TYPE_CHECKING:  # types only
    from provision.capabilities.nccl.facts import Interface

# The share of what the ports carry that a ring all-reduce's bus bandwidth must reach. Measured on the lab's
# shaped links (gloo, 4 MiB, four nodes with two 100 Mbit/s ports each, measured at 87-94 Mb/s): 0.0112 GB/s,
# 90 Mb/s, one port's worth, 48% of the two (gloo paces itself to one); 0.35 leaves that a margin. NCCL on real
# NICs spreads over both ports and reaches more; held to this, one slow port still falls well short.
ALLREDUCE_EFFICIENCY = 0.35
CHECK = judge.CHECK  # the check whose findings these are (active/checks.py)
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
    kind: str = ""  # within a node: its processes and GPU model; nodes of one kind are each other's peers

    def short(self) -> bool:
        return bool(self.error) or (self.expected_gbs is not None and self.busbw_gbs is not None
                                    and self.busbw_gbs < self.expected_gbs)


def expected(used: dict[str, list[Interface]], setting: dict[str, float | None], carried: dict[str, dict[str, float]]
             ) -> tuple[float | None, str]:
    """(GB/s, rule) for a group: host -> the Interfaces NCCL uses, host -> provision_active.expected_port_mbps, host -> port
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
    share = f"{ALLREDUCE_EFFICIENCY:.0%} of the {per_host[least]:.0f} Mb/s"
    if all(rate == per_host[least] for rate in per_host.values()):  # no node is the least: none is named so
        return per_host[least] * ALLREDUCE_EFFICIENCY / 8000, f"{share} the ports of each node carry"
    return per_host[least] * ALLREDUCE_EFFICIENCY / 8000, f"{share} the ports of {least} carry, the least"


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


PEER_SHARE = 0.7  # a node's own all-reduce below 70% of the best of its kind in the group (as fabric.py's ports)


def rounds(hosts: list[str]) -> list[list[tuple[str, str]]]:
    """The ring's pairs (each node with the next, the last with the first) in rounds no node is in twice: two
    rounds for an even ring, three for an odd one. Fewer than three nodes: none (the group's run is the pair)."""
    if len(hosts) < 3:
        return []
    pairs = [(host, hosts[(i + 1) % len(hosts)]) for i, host in enumerate(hosts)]
    if len(hosts) % 2 == 0:
        return [pairs[0::2], pairs[1::2]]
    return [pairs[0:-1:2], pairs[1::2], pairs[-1:]]


def held_to_peers(results: list[Collective]) -> list[Collective]:
    """Each node's own all-reduce held to PEER_SHARE of the best of its kind (processes, GPU model) in the group."""
    best: dict[str, Collective] = {}
    for result in results:
        top = best.get(result.kind)
        if result.busbw_gbs is not None and (top is None or (top.busbw_gbs or 0) < result.busbw_gbs):
            best[result.kind] = result
    for result in results:
        top = best.get(result.kind)
        if top is not None and top is not result and top.busbw_gbs:
            result.expected_gbs = top.busbw_gbs * PEER_SHARE
            result.rule = (f"{PEER_SHARE:.0%} of the best node of its kind ({result.kind}) in the group, "
                           f"{top.hosts[0]} at {top.busbw_gbs:.3g} GB/s")
    return results


def node_findings(results: list[Collective], wrapper: dict[str, str]) -> dict[str, Finding]:
    """Host -> the finding of its own all-reduce (its processes only), where it failed or fell short of its peers."""
    found = {}
    for result in held_to_peers(results):
        host = result.hosts[0]
        if result.error:
            found[host] = Finding(f"an all-reduce of {host}'s own {result.kind} through {wrapper[host]}",
                                  f"it failed: {result.error}",
                                  f"run `PROVISION_NNODES=1 PROVISION_RDZV_HOST=127.0.0.1 {wrapper[host]} "
                                  "provision-allreduce` on it: its output says which GPU or setting stops it",
                                  about=(host,), severity=WARNING)
        elif result.short():
            found[host] = Finding(f"all-reduce bus bandwidth within {host} at {result.expected_gbs:.3g} GB/s "
                                  f"({result.rule})", f"{result.busbw_gbs:.3g} GB/s ({result.backend})",
                                  "the links between its GPUs: `nvidia-smi topo -m` and `nvidia-smi nvlink -s` "
                                  "against a good node's; a GPU on a PCIe link below its width", about=(host,),
                                  severity=WARNING)
    return found


def pair_findings(results: list[Collective]) -> dict[str, Finding]:
    """Host -> the pairwise finding filed under it: a node whose pairs all fell short is the one (named alone); a
    pair that fell short where neither end is named that way names the link between the two."""
    found: dict[str, Finding] = {}
    hosts = list(dict.fromkeys(h for result in results for h in result.hosts))
    for host in hosts:
        mine = [r for r in results if host in r.hosts]
        if len(mine) >= 2 and all(r.short() for r in mine):
            found[host] = Finding(
                f"{host} in an all-reduce with each of its neighbours at {_expected(mine)}",
                "; ".join(f"with {_other(r, host)}: {_said(r)}" for r in mine),
                f"{host}'s ports NCCL uses and its NCCL environment (nccl.conf: NCCL_SOCKET_IFNAME, "
                "NCCL_SOCKET_NTHREADS); the port tests name a slow port where there is one; a failed run's "
                "output says which setting stops it",
                about=(host,), severity=WARNING)
    for result in results:
        if result.short() and not any(h in found for h in result.hosts):
            first, other = result.hosts
            found.setdefault(first, Finding(
                f"an all-reduce of {first} and {other} at {_expected([result])}", _said(result),
                f"the link between {first} and {other}: their ports' cables and switch ports; both nodes' other "
                "pairs are clean", about=(f"{first}+{other}",), severity=WARNING))
    return found


def _other(result: Collective, host: str) -> str:
    return next(h for h in result.hosts if h != host)


def _said(result: Collective) -> str:
    return f"failed: {result.error}" if result.error else f"{result.busbw_gbs:.3g} GB/s ({result.backend})"


def _expected(results: list[Collective]) -> str:
    figures = sorted({f"{r.expected_gbs:.3g} GB/s ({r.rule})" for r in results if r.expected_gbs is not None})
    return "; ".join(figures) or "completing"
