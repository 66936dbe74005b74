"""Supported application clocks, cached on each host so that reading a host costs one nvidia-smi call.

A GPU's supported (memory, graphics) pairs are a property of the board and
the driver: they do not change while both stay the same. So `apply` keeps
them on the host, one file per GPU, under

    /var/cache/provision/supported-clocks/<driver version>/<GPU UUID>

in nvidia-smi's own CSV rows (`GPU-..., 877, 1005`). The facts batch reads
the UUIDs and the driver version from its one `--query-gpu` call and cats
those files; only when any is missing (first run, new driver, new GPU) does
it ask `nvidia-smi --query-supported-clocks`, and the next `apply` that
read them that way writes the cache. Reading never writes: `facts`,
`--check` and verify leave the host as it was. A new driver version is a new
directory, so an upgrade can never be answered from an old list;
`rm -r /var/cache/provision` forgets everything.

Why a cache and not "ask only when a clock setting needs the list": the list
decides more than a clocks change (whether a GPU takes application clocks
at all, the floor of a locked range, Hopper's memory lock values,
`clocks --list`), so facts stay complete for every task and command, and
still cost one nvidia-smi call.
"""

from __future__ import annotations

import os
import re
import shlex
from typing import TYPE_CHECKING, Sequence

from provision.capabilities.gpu import smi as gpu_parsers
from provision.capabilities.gpu.model import ClockPair, GpuFacts
from provision.core.apply import Step

if TYPE_CHECKING:  # types only
    from provision.capabilities.host import HostFacts

CACHE_DIR = "/var/cache/provision/supported-clocks"
FROM_CACHE, FROM_NVIDIA_SMI, NOT_READ = "cache", "nvidia-smi", "none"
DRIVER_VERSION = re.compile(r"^[0-9][0-9.]*$")

# Reads "$q", the --query-gpu output the batch captured before this section runs: columns by the header's
# names (the header may follow an error line about a lost GPU). Prints "source=..." then the rows.
# UUIDs and versions are checked before they become file names.
READ_SNIPPET = r'''files=$(printf '%s\n' "$q" | awk -F', ' -v dir={dir} '
  !cols && /(^|, )uuid(, |$)/ {{ for (i = 1; i <= NF; i++) {{ name = $i; sub(/ .*/, "", name); col[name] = i }}
                               cols = NF; next }}
  NF == cols && col["uuid"] && col["driver_version"] {{
    uuid = $col["uuid"]; driver = $col["driver_version"]
    if (uuid ~ /^GPU-[0-9a-fA-F-]+$/ && driver ~ /^[0-9][0-9.]*$/) print dir "/" driver "/" uuid
    else print "-"
  }}')
[ -n "$files" ] || {{ echo source={none}; exit 0; }}
for f in $files; do [ -r "$f" ] || {{ echo source={smi}; exec {query}; }}; done
echo source={cache}; cat $files'''

# Stores stdin's rows under $1/$2 (the driver version): one file per GPU, each replaced atomically.
WRITE_SCRIPT = r'''set -eu
dir=$1/$2
mkdir -p "$dir"
tmp=$(mktemp -d "$dir/.new.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
awk -F', ' -v d="$tmp" '$1 ~ /^GPU-[0-9a-fA-F-]+$/ { print > (d "/" $1) }'
for f in "$tmp"/GPU-*; do [ -e "$f" ] && mv -f "$f" "$dir/"; done
'''


def cache_dir() -> str:
    """CACHE_DIR; PROVISION_CLOCK_CACHE moves it (the demo's sandbox, tests on this machine)."""
    return os.environ.get("PROVISION_CLOCK_CACHE", CACHE_DIR)


def read_snippet() -> str:
    return READ_SNIPPET.format(dir=shlex.quote(cache_dir()), query=shlex.join(gpu_parsers.SUPPORTED_CLOCKS_ARGV),
                               none=NOT_READ, smi=FROM_NVIDIA_SMI, cache=FROM_CACHE)


def source_of(output: str) -> str:
    """Where the section's rows came from: FROM_CACHE, FROM_NVIDIA_SMI or NOT_READ."""
    first = output.split("\n", 1)[0]
    return first.removeprefix("source=") if first.startswith("source=") else NOT_READ


def rows(gpus: list[GpuFacts]) -> str:
    """The cache's rows for these GPUs; a GPU without pairs (GeForce) gets an [N/A] row, which reads as none."""
    lines = []
    for gpu in gpus:
        pairs: Sequence[ClockPair | None] = gpu.supported_clocks or [None]
        lines += [f"{gpu.uuid}, {p.mem}, {p.sm}" if p else f"{gpu.uuid}, [N/A], [N/A]" for p in pairs]
    return "".join(f"{line}\n" for line in lines)


def write_argv(driver_version: str | None) -> list[str] | None:
    """The command that stores rows() (on stdin) for this driver; None for a version that cannot be a path."""
    if driver_version is None or not DRIVER_VERSION.match(driver_version):
        return None
    return ["sh", "-c", WRITE_SCRIPT, "provision-clock-cache", cache_dir(), driver_version]


def upkeep(facts: HostFacts) -> list[Step]:
    """A run that may change hosts caches the supported clocks nvidia-smi had to list, so the next reads cost one
    nvidia-smi call: a step the engine runs with the host's first changes (Extensions.upkeep). Best effort: a cache
    that cannot be written is asked again."""
    nvidia = facts.nvidia
    argv = write_argv(nvidia.driver_version)
    if nvidia.supported_clocks_source != FROM_NVIDIA_SMI or not argv:
        return []
    return [Step(argv, "caching the supported clocks", rows(nvidia.gpus).encode())]
