r"""NVLink as nvidia-smi reports it: each link's speed or state (`nvidia-smi nvlink -s`) and its error counters
(`nvidia-smi nvlink -e`). Pure parsers of the real formats: a value nvidia-smi cannot give ("N/A", an NVML
line) is a state, never a crash; a GPU without NVLink has no links.

The lines read, each as found in real outputs (tabs as printed; some sources had expanded them to spaces,
which the parser takes as well):

    GPU 0: Tesla V100-SXM2-16GB (UUID: GPU-09101d09-...)     a GPU; older drivers print no "(UUID: ...)"
    \t Link 0: 25.781 GB/s                                   -s: an active link and its speed
    \t Link 0: 25 GB/s                                       -s: A100, driver 535: no decimals
    \t Link 3: <inactive>                                    -s: a link down
    NVML: Unable to retrieve NVLink information as all links are inActive     -s: every link of the GPU down
    \t Link 0: Replay Errors: 0                              -e: one counter of one link; Recovery Errors and
                                                             CRC Errors follow, then a blank line

Where they were found:
- 4x Tesla V100-SXM2-16GB, `nvidia-smi nvlink --status -i 0,1,2,3`: 6 links of 25.781 GB/s each (a public
  setup note, code index file id 35181931224); 8x V100-SXM2-32GB (DGX-1) `--status`: the same speed, headers
  without the UUID (an older driver; a public DGX-1 write-up, code index file id 48146600494).
- Tesla V100-SXM2-32GB with `Link 3: <inactive>` and `Link 5: <inactive>` among links of 25.781 GB/s:
  github Azure/azhpc-diagnostics issue #73.
- 8x NVIDIA A100-SXM4-40GB, driver 535.161.08: `nvlink -s -i 0`, 12 links of `25 GB/s`, and `nvlink -e -i N`
  (Replay, Recovery, CRC Errors per link, a blank line after each link) for all 8 GPUs (a public node
  report, code index file id 60859828466).
- NVIDIA H100 80GB HBM3: `nvlink -e` and `--status`, 18 links of 26.562 GB/s, the same three counters
  (github stas00/ml-engineering, compute/accelerator/nvidia/debug.md; its UUID anonymised, tabs expanded).
- NVIDIA RTX A6000 x3, two bridged: 4 links of 14.062 GB/s, and the third's NVML line above (github
  siboehm/bench gpu/nvlink/README.md); the same NVML line on a B200 (github leptonai/gpud issue #1085).
- NVIDIA GB200: 18 links of 53.125 GB/s (github NVIDIA/k8s-test-infra issue #371).
- NVIDIA H100 80GB HBM3 alone (no NVLink peer), driver 580.159.04: `nvlink -s` prints nothing and exits 0
  (tests/fixtures/real/h100-80gb-hbm3/nvlink.txt).

Other drivers name more counters (`CRC Flit Errors`, `CRC Data Errors`, `ECC Errors` are seen in public
parsers' test data, not verified as verbatim): every `Link N: NAME: VALUE` line is kept, and a counter whose
name ends in "Errors" is an error count (see error_counts). `nvidia-smi -q` has no NVLink section (the H100
capture's -q has only its "Fabric" block), so these two commands are the source.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

INACTIVE = "inactive"
ALL_INACTIVE = "all links are inactive"  # NVML's line, lowercased
_GPU = re.compile(r"GPU (\d+): (.*?)(?: \(UUID: (\S+)\))?")
_LINK = re.compile(r"Link (\d+): (.*)")
_SPEED = re.compile(r"(\d+(?:\.\d+)?) GB/s")


@dataclass(frozen=True)
class Link:
    """One link in `nvlink -s`: up at a speed, or a state ("inactive", or what nvidia-smi printed: "N/A")."""

    state: str
    speed: float | None = None  # GB/s, when up

    @property
    def up(self) -> bool:
        return self.speed is not None


@dataclass
class NvlinkGpu:
    index: int
    name: str
    uuid: str | None  # None where the driver prints none
    links: dict[int, Link] = field(default_factory=dict)  # none: no NVLink (or not reported)
    all_inactive: bool = False  # NVML: "Unable to retrieve NVLink information as all links are inActive"
    errors: dict[int, dict[str, int | None]] = field(default_factory=dict)  # link -> counter -> count (None: N/A)

    def error_counts(self) -> dict[int, dict[str, int]]:
        """The non-zero error counters per link: those named "... Errors" (not throughput, not BER)."""
        found = {link: {name: n for name, n in counters.items() if n and name.lower().endswith("errors")}
                 for link, counters in self.errors.items()}
        return {link: counters for link, counters in found.items() if counters}


@dataclass
class NvlinkFacts:
    """What `nvidia-smi nvlink -s` and `-e` said of each GPU (verify only). No GPU: no NVLink, or not readable."""

    gpus: list[NvlinkGpu] = field(default_factory=list)
    message: str = ""  # nvidia-smi's words when it failed (no driver); "" otherwise


def _blocks(text: str) -> list[tuple[NvlinkGpu, list[str]]]:
    """Each GPU header and the stripped, non-blank lines under it (lines before the first header are dropped:
    an error line such as "Unable to determine the device handle ...")."""
    blocks: list[tuple[NvlinkGpu, list[str]]] = []
    for raw in text.splitlines():
        line = raw.strip()
        header = _GPU.fullmatch(line)
        if header:
            blocks.append((NvlinkGpu(int(header[1]), header[2], header[3]), []))
        elif line and blocks:
            blocks[-1][1].append(line)
    return blocks


def parse_status(text: str) -> list[NvlinkGpu]:
    """`nvidia-smi nvlink -s`: each GPU's links, up at a speed or in a state."""
    gpus = []
    for gpu, lines in _blocks(text):
        for line in lines:
            link = _LINK.fullmatch(line)
            if link:
                said = link[2].strip()
                speed = _SPEED.fullmatch(said)
                gpu.links[int(link[1])] = (Link("up", float(speed[1])) if speed else
                                           Link(INACTIVE if said == "<inactive>" else said.strip("[]")))
            elif ALL_INACTIVE in line.lower():
                gpu.all_inactive = True
        gpus.append(gpu)
    return gpus


def parse_errors(text: str) -> list[NvlinkGpu]:
    """`nvidia-smi nvlink -e`: each GPU's counters per link, by the name nvidia-smi gives them."""
    gpus = []
    for gpu, lines in _blocks(text):
        for line in lines:
            link = _LINK.fullmatch(line)
            name, colon, value = link[2].rpartition(":") if link else ("", "", "")
            if link and colon:
                value = value.strip()
                gpu.errors.setdefault(int(link[1]), {})[name.strip()] = int(value) if value.isdigit() else None
        gpus.append(gpu)
    return gpus


def read(status: str, errors: str = "", rc: int = 0) -> NvlinkFacts:
    """Both outputs as one value per GPU (a GPU matched by UUID, by index where a header has none)."""
    gpus = parse_status(status)
    by_key = {g.uuid or g.index: g for g in gpus}
    for counted in parse_errors(errors):
        key = counted.uuid or counted.index
        if key in by_key:
            by_key[key].errors = counted.errors
        else:
            gpus.append(counted)
    said = "" if gpus or rc == 0 else " ".join(status.split()) or f"nvidia-smi nvlink -s exited {rc}"
    return NvlinkFacts(gpus, said)
