"""What `provision facts` shows of the GPUs: nvidia-smi's state, a row per GPU (persistence, power limit, the
clocks set, PCIe link), their modes (ECC, pending or not, and compute mode), the GPUs it cannot read, and how they
differ from the last good run's record."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from provision.capabilities.capability import PROBLEM, FactLine
from provision.capabilities.gpu import layout, mig_shown
from provision.capabilities.gpu.model import GpuFacts
from provision.capabilities.gpu.modes import ecc_words

if TYPE_CHECKING:  # types only
    from provision.capabilities.host import HostFacts

HEADER = ("GPU  NAME                          BUS ID            PERSIST   POWER LIMIT (MIN..MAX)    "
          "CLOCKS (MHz)        PCIe NOW/MAX")
LOCK_WORDS = {"sm": "locked sm", "mem": "locked mem", "mem_deferred": "locked mem (next load)"}


def lines(host: Any, facts: HostFacts) -> list[FactLine]:
    n = facts.nvidia
    daemon = "not installed" if not n.persistenced_path else ("running" if n.persistenced_running else "stopped")
    if n.state != "ok":
        return [FactLine.labelled("nvidia", f"{n.state}: {n.message}; nvidia-persistenced {daemon}")]
    shown = [FactLine.labelled("nvidia", f"driver {n.driver_version}, {len(n.gpus)} GPU(s), "
                                         f"nvidia-persistenced {daemon}"),
             FactLine.plain(HEADER), *(FactLine.plain(row(gpu)) for gpu in n.gpus), *mode_lines(n.gpus)]
    shown += [FactLine((("unreadable", PROBLEM), (f" {lost}", ""))) for lost in n.lost]  # not tuned until repaired
    change = layout.compare(facts.gpu_layout, n)
    if change is None:
        shown.append(FactLine.labelled("layout", "not recorded yet (the next apply records it)"))
    elif not change:
        shown.append(FactLine.labelled("layout", "as recorded at the last good run"))
    shown += [FactLine.labelled("layout", line, PROBLEM) for line in (change.lines() if change else [])]
    return shown + mig_shown.lines(facts) + [FactLine.labelled("note", note) for note in n.notes]


def row(g: GpuFacts) -> str:
    power = f"{_num(g.power_limit)} W ({_num(g.power_min)}..{_num(g.power_max)})"
    pcie = f"gen{_num(g.pcie_gen_current)} x{_num(g.pcie_width_current)} / gen{_num(g.pcie_gen_max)} x{_num(g.pcie_width_max)}"
    persist = {True: "on", False: "off", None: "N/A"}[g.persistence]
    return f"{g.index:<4} {g.name[:29]:<29} {g.bus_id:<17} {persist:<9} {power:<25} {clocks_set(g):<19} {pcie}"


def mode_lines(gpus: list[GpuFacts]) -> list[FactLine]:
    """The GPUs' modes, one line per set of GPUs in the same ones: "GPU0, GPU1: ECC Enabled, compute mode default";
    none for a GPU whose driver reports neither."""
    groups: dict[str, list[str]] = {}
    for gpu in (g for g in gpus if g.ecc_enabled is not None or g.compute_mode is not None):
        groups.setdefault(f"ECC {ecc_words(gpu)}, compute mode {gpu.compute_mode or 'N/A'}", []).append(gpu.label)
    return [FactLine.labelled("modes", f"{', '.join(labels)}: {words}") for words, labels in groups.items()]


def clocks_set(gpu: GpuFacts) -> str:
    """The clocks set on a GPU, the way they are set: application clocks (-ac MEM,SM) where the board has them,
    locked ranges (-lgc/-lmc, as provision recorded them: nvidia-smi cannot read them back) on GeForce too."""
    words = [f"app {_num(gpu.app_clock_mem)},{_num(gpu.app_clock_sm)}"] if gpu.app_clock_mem is not None else []
    words += [f"{LOCK_WORDS.get(key, key)} {value}" for key, value in gpu.locked.items() if value != "default"]
    return "; ".join(words) or "default"


def _num(value: object) -> str:
    if value is None:
        return "N/A"
    return f"{value:g}" if isinstance(value, float) else str(value)
