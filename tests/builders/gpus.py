"""GPUs as nvidia-smi reports them (GpuFacts), for the cards our users run.

Each card's identity and power range are its real ones: the H100's from the capture in
tests/fixtures/real/h100-80gb-hbm3 (qgpu-nh.txt), the others' as the simulator models them
(provision_lab/gpusim/models.py, sourced in provision_lab/gpu_models.md). A test names the card and
overrides what it is about: `gpu(3, "RTX 4090", power_limit=300.0)`. Everything else a card may report
(clocks, health, PCIe link) is left unread (None), as nvidia-smi's "[N/A]" is: a test that needs it sets it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from provision.capabilities.gpu.model import GpuFacts


@dataclass(frozen=True)
class Card:
    name: str  # as nvidia-smi prints it
    compute_cap: str
    power_default: float  # W; the power limit a fresh boot sets
    power_min: float
    power_max: float
    device: str  # its PCI device id, in its UUIDs (hex digits, as an override's uuid: must be)


CARDS = {
    "V100": Card("Tesla V100-SXM2-16GB", "7.0", 300.0, 150.0, 300.0, "1db1"),
    "RTX 3090": Card("NVIDIA GeForce RTX 3090", "8.6", 350.0, 100.0, 375.0, "2204"),
    "RTX 4090": Card("NVIDIA GeForce RTX 4090", "8.9", 450.0, 150.0, 450.0, "2684"),
    "H100": Card("NVIDIA H100 80GB HBM3", "9.0", 700.0, 200.0, 700.0, "2330"),
}


def gpu(index: int = 0, model: str | Card = "RTX 4090", **values: Any) -> GpuFacts:
    """GPU `index` of a host of `model` cards (a key of CARDS, or a Card of the test's own), at its default
    power limit, persistence on; `values` override any GpuFacts field (uuid, bus_id, power_limit, ...)."""
    card = CARDS[model] if isinstance(model, str) else model
    made = GpuFacts(index=index, uuid=f"GPU-{card.device}-{index:04x}", name=card.name,
                    bus_id=f"00000000:{index + 1:02X}:00.0", compute_cap=card.compute_cap, persistence=True,
                    power_limit=card.power_default, power_default=card.power_default,
                    power_min=card.power_min, power_max=card.power_max)
    return replace(made, **values)


def gpus(n: int, model: str | Card = "RTX 4090", **values: Any) -> list[GpuFacts]:
    """A host's `n` GPUs of one model, indexed 0..n-1, each with `values` (see gpu)."""
    return [gpu(i, model, **values) for i in range(n)]
