"""What verify --active's sampler reads (capabilities/active/sampler.py): nvidia-smi -lms rows of a node's two V100s,
written as --query-gpu prints them (csv,nounits, the header once, ", " between cells, [N/A] where the driver says
so). A test gives the cells it is about: `row(3.0, 1, instant="480.00")`."""

from __future__ import annotations

from provision.capabilities.gpu.model import GpuFacts

HEADER = ("timestamp, uuid, pci.bus_id, power.draw [W], power.draw.instant [W], enforced.power.limit [W], "
          "clocks.current.sm [MHz], clocks.current.memory [MHz], temperature.gpu, clocks_event_reasons.active, "
          "pcie.link.gen.current, pcie.link.width.current, utilization.gpu [%]")
V100 = [GpuFacts(index=i, uuid=f"GPU-v100-{i}", name="Tesla V100-SXM2-16GB", bus_id=f"00000000:{0x1a + i:02X}:00.0",
                 power_limit=200.0, power_enforced=200.0, app_clock_sm=1005, app_clock_mem=877, pcie_gen_max=3,
                 pcie_width_max=16) for i in range(2)]


def row(t: float, gpu: int, power: str = "190.00", instant: str = "[N/A]", sm: str = "1005",
        reasons: str = "0x0000000000000002", gen: str = "3", width: str = "16", util: str = "100", temp: str = "61",
        uuid: str | None = None) -> str:
    """GPU `gpu`'s row at `t` seconds into the run: loaded, at 190 W under its 200 W limit, unless told otherwise."""
    stamp = f"2026/11/25 17:00:{t:06.3f}"
    cells = [stamp, uuid or f"GPU-v100-{gpu}", f"00000000:{0x1a + gpu:02X}:00.0", power, instant, "200.00", sm, "877",
             temp, reasons, gen, width, util]
    return ", ".join(cells)
