"""`nvidia-smi topo -m`: how far apart a host's GPUs and RDMA NICs are.

The matrix is what decides whether GPUDirect RDMA and P2P are worth having: a GPU whose
nearest NIC is across the CPU interconnect (SYS) pays for every byte it sends off the node.

The text comes in more shapes than one:
- nvidia-smi separates cells with tabs; copies from web pages and logs often have the tabs
  expanded to spaces (8-column stops), so the cells are rebuilt from the tab stops.
- 5xx drivers wrap the header row in ANSI underline escapes.
- the self cell is " X " (older drivers: " X" in the last column).
- NIC columns are NIC0..NICk with a "NIC Legend:" naming each device (mlx5_0, mlx5_bond_0);
  older drivers put the device name in the header itself.
- the affinity columns (CPU Affinity, NUMA Affinity, GPU NUMA ID) may be empty, N/A, or carry
  one extra empty cell: nvidia-smi prints two tabs before its last column.
- drivers before 384 said SOC where newer ones say SYS.

parse_topo raises TopoParseError where the text holds no matrix at all (empty output, "No
devices were found", an error): an empty Topology would read as "no GPU is far from a NIC".
A cell word we do not know is kept as printed and counts as no known level.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# Closest first. NV stands for every NV<n> (n bonded NVLinks): closer than any PCIe path.
LEVELS = ("X", "NV", "PIX", "PXB", "PHB", "NODE", "SYS")
LEVEL_ALIASES = {"SOC": "SYS"}  # the pre-384 drivers' word for the same path
AFFINITY_COLUMNS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
MISSING = ("", "N/A")

ANSI_ESCAPE = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")
GPU_LABEL = re.compile(r"GPU\d+")
NVLINK = re.compile(r"NV\d+")
NIC_LEGEND_LINE = re.compile(r"\s*(NIC\d+):\s*(\S+)\s*")
WORD = re.compile(r"\S+")
TAB_STOP = 8  # where `expand` and most viewers put the tabs they replace


class TopoParseError(ValueError):
    """The text holds no `nvidia-smi topo -m` matrix (no header row naming a GPU)."""


def level_of(cell: str) -> str | None:
    """The LEVELS entry a cell stands for ("NV18" -> "NV", "SOC" -> "SYS"); None for a word we do not know."""
    word = "NV" if NVLINK.fullmatch(cell) else LEVEL_ALIASES.get(cell, cell)
    return word if word in LEVELS else None


def _rank(cell: str | None) -> int | None:
    """The cell's place in LEVELS (smaller: closer); None for no cell or a word we do not know."""
    level = level_of(cell or "")
    return LEVELS.index(level) if level is not None else None


@dataclass
class Topology:
    """One host's matrix. GPUs and NICs go by their column label (GPU0, NIC0 or, from older drivers, mlx5_0).

    links holds both directions of every pair the matrix shows, never a device with itself.
    cpu_affinity and numa_affinity are per GPU (NIC rows have none); None where nvidia-smi printed
    nothing or N/A.
    """

    gpus: list[str] = field(default_factory=list)
    nics: dict[str, str] = field(default_factory=dict)  # column label -> device name ("NIC0" -> "mlx5_0")
    links: dict[tuple[str, str], str] = field(default_factory=dict)
    cpu_affinity: dict[str, str | None] = field(default_factory=dict)
    numa_affinity: dict[str, str | None] = field(default_factory=dict)

    def link(self, a: str, b: str) -> str | None:
        """The cell between two devices as printed ("NV18", "PIX", ...); "X" for a device with itself."""
        if a == b and (a in self.gpus or a in self.nics):
            return "X"
        return self.links.get((a, b))

    def nearest_nic(self, gpu: str) -> tuple[str, str] | None:
        """(device name, level) of the NIC closest to a GPU ("SOC" read as "SYS"), the first in column order
        among equals; None where no NIC is at a known level."""
        known = [(rank, label) for label in self.nics if (rank := _rank(self.link(gpu, label))) is not None]
        if not known:
            return None
        rank, label = min(known, key=lambda pair: pair[0])  # min keeps the first of equals: column order
        return self.nics[label], LEVELS[rank]

    def cross_socket_gpu_pairs(self) -> list[tuple[str, str]]:
        """GPU pairs (each once, in column order) whose traffic crosses the CPU interconnect (SYS)."""
        return [(a, b) for i, a in enumerate(self.gpus) for b in self.gpus[i + 1:]
                if level_of(self.link(a, b) or "") == "SYS"]

    def gpus_without_nic_within(self, level: str) -> list[str]:
        """GPUs with no NIC at `level` (a LEVELS word, e.g. "PXB") or closer.

        On a host without NICs that is every GPU: whether that matters (a single node, a
        TCP-only cluster) is the caller's call.
        """
        limit = _rank(level)
        if limit is None:
            raise ValueError(f"unknown topology level {level!r}; levels: {', '.join(LEVELS)}")
        return [gpu for gpu in self.gpus
                if not any((rank := _rank(self.link(gpu, nic))) is not None and rank <= limit for nic in self.nics)]


def parse_topo(text: str) -> Topology:
    """The matrix of `nvidia-smi topo -m` output, tab-separated or with its tabs expanded."""
    lines = ANSI_ESCAPE.sub("", text).splitlines()
    start = next((i for i, line in enumerate(lines) if _is_header(_cells(line))), None)
    if start is None:
        raise TopoParseError("no `nvidia-smi topo -m` matrix: no header row naming GPU0.. found"
                             + (f" in {text.strip()[:80]!r}" if text.strip() else " (empty output)"))
    names = [cell.strip() for cell in _cells(lines[start]) if cell.strip()]
    tail_at = next((i for i, name in enumerate(names) if _is_affinity_column(name)), len(names))
    columns, tail_names = names[:tail_at], names[tail_at:]
    topo = Topology(gpus=[name for name in columns if GPU_LABEL.fullmatch(name)])
    # Any other matrix column is a NIC: NICk (named in the legend) or an old header's device name.
    topo.nics = {name: name for name in columns if name not in topo.gpus}
    for line in lines[start + 1:]:
        if line.lstrip().startswith("Legend:"):
            break
        cells = _cells(line)
        label = cells[0].strip() if cells else ""
        if label not in columns:
            continue
        for column, cell in zip(columns, cells[1:1 + len(columns)]):
            if column != label:
                topo.links[(label, column)] = cell.strip()
        if label in topo.gpus:
            affinity = _affinities(tail_names, cells[1 + len(columns):])
            topo.cpu_affinity[label] = affinity.get("CPU Affinity")
            topo.numa_affinity[label] = affinity.get("NUMA Affinity")
    for (a, b), cell in list(topo.links.items()):
        topo.links.setdefault((b, a), cell)  # a trimmed copy may lack a row: the matrix is symmetric
    topo.nics.update(_nic_legend(lines[start:], topo.nics))
    return topo


def _is_header(cells: list[str]) -> bool:
    """The header names GPUs; a row names one GPU too, but has its self cell (X)."""
    words = [cell.strip() for cell in cells if cell.strip()]
    return bool(words) and GPU_LABEL.fullmatch(words[0]) is not None and "X" not in words


def _is_affinity_column(name: str) -> bool:
    # A device name has no space in it; a column header with one is a per-row value, not a device.
    return name in AFFINITY_COLUMNS or " " in name


def _affinities(names: list[str], cells: list[str]) -> dict[str, str | None]:
    """Affinity column name -> value. A row with more cells than names has nvidia-smi's extra empty cell
    before the last column: the last name takes the last cell, the others are read from the left."""
    if names and len(cells) > len(names):
        cells = cells[:len(names) - 1] + cells[-1:]
    values = [cell.strip() for cell in cells]
    return {name: value if value not in MISSING else None for name, value in zip(names, values)}


def _nic_legend(lines: list[str], nics: dict[str, str]) -> dict[str, str]:
    """NICk -> device name from the "NIC Legend:" block, for the NIC columns the header has."""
    found: dict[str, str] = {}
    in_legend = False
    for line in lines:
        if line.strip() == "NIC Legend:":
            in_legend = True
        elif in_legend and (match := NIC_LEGEND_LINE.fullmatch(line)) and match[1] in nics:
            found[match[1]] = match[2]
    return found


def _cells(line: str) -> list[str]:
    """A matrix line's cells as nvidia-smi printed them, one per tab, empty cells included."""
    if "\t" in line:
        return line.split("\t")
    return _cells_from_tab_stops(line)


def _cells_from_tab_stops(line: str) -> list[str]:
    """The cells of a line whose tabs were expanded to spaces.

    Each cell began on a tab stop (the self cell " X " one column after it), and a tab moves at least one
    column: a word that starts on a stop, or after two or more spaces, starts a new cell, and every tab stop
    skipped in between held an empty cell. Words one space apart belong to one cell ("CPU Affinity").
    """
    cells: list[str] = []
    end = 0  # where the last cell's text ended
    for word in WORD.finditer(line):
        start = word.start()
        if cells and start == end + 1 and start % TAB_STOP:
            cells[-1] += " " + word[0]
        else:
            next_stop = (end // TAB_STOP + 1) * TAB_STOP if cells else 0
            cells += [""] * max(0, (start // TAB_STOP * TAB_STOP - next_stop) // TAB_STOP)
            cells.append(word[0])
        end = word.end()
    return cells


def cross_socket_warnings(topology: Topology) -> list[str]:
    """What crosses the CPU interconnect (SYS): GPU pairs, and GPUs whose nearest NIC is that far. One line
    each kind, naming them; empty when nothing does (or the host has one socket)."""
    said = []
    pairs = topology.cross_socket_gpu_pairs()
    if pairs:
        said.append("GPU pairs that meet only across sockets (SYS): " + ", ".join(f"{a}-{b}" for a, b in pairs))
    far = [f"{gpu} (nearest {nic})" for gpu in topology.gpus
           if (nearest := topology.nearest_nic(gpu)) and nearest[1] == "SYS" for nic in [nearest[0]]]
    if far:
        said.append("GPUs whose nearest NIC is across sockets (SYS): " + ", ".join(far))
    return said


@dataclass
class TopologyFacts:
    """`nvidia-smi topo -m`, parsed (capabilities/topology/topo.py); message says why not where it could not be read."""

    matrix: Topology | None = None
    message: str = ""
