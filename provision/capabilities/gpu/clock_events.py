"""Why a GPU's clocks are below the maximum: the clocks_event_reasons bitmask (older drivers: throttle reasons).

Bit values are NVML's nvmlClocksEventReason* constants (nvml.h); the words are nvidia-smi's own, from
`nvidia-smi -q` ("Clocks Event Reasons") and `--help-query-gpu` (real captures in tests/fixtures/real).
Idle, application clocks, the software power cap, sync boost and the display clock are how a tuned GPU
is meant to run; the hardware slowdowns and thermal capping are not: a GPU held there is sick, hot, or
short of power (a power brake is the PSU asking for less, the brownout case).
"""

from __future__ import annotations

from typing import NamedTuple


class ClockEvent(NamedTuple):
    bit: int
    label: str  # as `nvidia-smi -q` prints it
    trouble: str  # what it says about the node; "" when it is how a tuned GPU normally runs


IDLE = 0x1  # nothing runs on the GPU: clocks and the PCIe link generation drop to save power

CLOCK_EVENTS = (
    ClockEvent(IDLE, "Idle", ""),
    ClockEvent(0x2, "Applications Clocks Setting", ""),
    ClockEvent(0x4, "SW Power Cap", ""),  # the power limit at work: intended when a limit is set
    ClockEvent(0x8, "HW Slowdown", "clocks halved or worse by the hardware: too hot, or power drawn too fast"),
    ClockEvent(0x10, "Sync Boost", ""),
    ClockEvent(0x20, "SW Thermal Slowdown", "hotter than its maximum operating temperature"),
    ClockEvent(0x40, "HW Thermal Slowdown", "too hot: the hardware cut its clocks"),
    ClockEvent(0x80, "HW Power Brake Slowdown", "the power supply asserted the external power brake"),
    ClockEvent(0x100, "Display Clock Setting", ""),
)


def active(mask: int) -> list[ClockEvent]:
    return [event for event in CLOCK_EVENTS if mask & event.bit]


def troubles(mask: int) -> list[ClockEvent]:
    """The active reasons that say something is wrong."""
    return [event for event in active(mask) if event.trouble]


THERMAL = 0x20 | 0x40  # SW and HW Thermal Slowdown
HW_SLOWDOWN = 0x8  # heat or power drawn too fast: heat, when a thermal reason is active with it


def heat_only(mask: int) -> bool:
    """Whether every trouble is heat: a thermal slowdown, with or without the HW Slowdown it brings."""
    bits = sum(event.bit for event in troubles(mask))
    return bool(bits & THERMAL) and not bits & ~(THERMAL | HW_SLOWDOWN)
