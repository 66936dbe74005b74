"""What provision's facts batches cost on a real GPU node: each nvidia-smi and dmesg call they make, and the
whole apply and verify batches as sh runs them (wall, and the CPU of the processes waited for), medians of 5.
Read-only: queries alone, no setter. Run it on the node, from a checkout, with provision's dependencies:

    python3 benchmarks/node_batch_costs.py

The lab cannot say this: its nvidia-smi is the simulator (a Python start per call). On one H200 (driver
580.159.04, persistence on, 16 cores; 2026-11-26) each call took 21-48 ms of wall, the apply batch 103 ms
and the verify batch 235 ms (CPU in 10 ms steps: 90 and 210 ms)."""
import os
import statistics
import subprocess
import time

from provision.capabilities.registry import FACTS
from provision.core.facts import Reads, new_token
from provision.capabilities.gpu import smi
from provision.capabilities.active import sampler

def run(argv, n=5):
    walls, cpus = [], []
    for _ in range(n):
        r0 = os.times()
        t = time.monotonic()
        out = subprocess.run(argv, capture_output=True)
        walls.append(time.monotonic() - t)
        r1 = os.times()
        cpus.append((r1.children_user - r0.children_user) + (r1.children_system - r0.children_system))
    return statistics.median(walls) * 1000, statistics.median(cpus) * 1000, len(out.stdout)

calls = {
    "query-gpu (facts fields)": ["nvidia-smi", "--query-gpu=" + ",".join(f.name for f in smi.QUERY_FIELDS), smi.QUERY_FORMAT],
    "supported clocks": smi.SUPPORTED_CLOCKS_ARGV,
    "-q -d TEMPERATURE": ["nvidia-smi", "-q", "-d", "TEMPERATURE"],
    "nvlink -s": ["nvidia-smi", "nvlink", "-s"],
    "nvlink -e": ["nvidia-smi", "nvlink", "-e"],
    "topo -m": ["nvidia-smi", "topo", "-m"],
    "query-compute-apps": ["nvidia-smi", "--query-compute-apps=pid,process_name,gpu_uuid", "--format=csv,noheader"],
    "sampler query (one row)": ["nvidia-smi", "--query-gpu=" + ",".join(sampler.SAMPLE_FIELDS), smi.QUERY_FORMAT],
    "dmesg": ["dmesg"],
    "sh -c true": ["sh", "-c", "true"],
}
for name, argv in calls.items():
    w, c, size = run(argv)
    print(f"{name:28s} wall {w:7.1f} ms  cpu {c:6.1f} ms  out {size} B", flush=True)
for purpose in ("apply", "verify"):
    script = FACTS.script(new_token(), purpose, Reads())
    w, c, size = run(["sh", "-c", script])
    print(f"whole {purpose} batch (sh)       wall {w:7.1f} ms  cpu {c:6.1f} ms  out {size} B", flush=True)
