"""One GPU as nvidia-smi shows it, the host it is in, and the words nvidia-smi prints for its values."""

from __future__ import annotations

import random
import time
from functools import cached_property

from .load_model import reading as load_reading, running as load_running
from .models import Clocks, MODELS
from .modes import ecc_on, mig_on
from .state import is_persistent, sync_daemon

# Clock event reason bits (nvml.h nvmlClocksEventReason*): the ones a fault forces.
REASON_IDLE, REASON_HW_SLOWDOWN, REASON_HW_THERMAL, REASON_HW_POWER_BRAKE = 0x1, 0x8, 0x40, 0x80


class Special(str):
    """A value nvidia-smi prints bare in -q and in brackets in CSV: N/A, Not Supported, ..."""


NA = Special("N/A")
DEPRECATED = Special("Requested functionality has been deprecated")


def clamp(value: int, bounds: list | None) -> int:
    return value if not bounds else max(bounds[0], min(bounds[1], value))


class Host:
    """What one run sees: the state, the daemon, the GPUs the driver enumerated (indexed 0..n-1), among them
    any that fell off the bus since (lost: counted, but no handle)."""

    def __init__(self, state: dict):
        self.state = state
        self.daemon = sync_daemon(state)
        enumerated = [r for r in state["gpus"] if not r.get("gone")]
        self.gpus = [Gpu(self, record, index) for index, record in enumerate(enumerated)]

    @property
    def driver(self) -> str:
        return self.state["driver_version"]

    @property
    def cuda(self) -> str:
        return self.state["cuda_version"]

    @property
    def nics(self) -> list:
        return self.state.get("nics") or []  # a state file from before NICs were simulated has none


class Gpu:
    def __init__(self, host: Host, record: dict, index: int):
        self.host, self.record, self.index = host, record, index
        self.model = MODELS[record["model"]]

    @property
    def bus_id(self) -> str:
        return self.record["bus_id"]

    @property
    def lost(self) -> bool:
        return bool(self.record["off_bus"])

    def handle_error(self) -> str:
        """What nvidia-smi prints for a GPU whose handle NVML cannot get (a 4-digit PCI domain)."""
        return f"Unable to determine the device handle for GPU{self.bus_id[4:]}: Unknown Error\n"

    @property
    def uuid(self) -> str:
        return self.record["uuid"]

    @property
    def persistent(self) -> bool:
        return is_persistent(self.record, self.host.daemon)

    @property
    def power_limit(self) -> float:
        return self.record["power_limit"] if self.record["power_limit"] is not None else self.model.power_default

    @property
    def app_clocks(self) -> tuple[int, int] | None:
        """(memory, graphics) applications clocks; None on GPUs without them."""
        return tuple(self.record["app_clocks"]) if self.record["app_clocks"] else self.model.default_app_clocks

    @cached_property
    def under_load(self) -> dict | None:
        """This GPU's readings while a load runs (load_model.py); None at idle or off the bus."""
        load = load_running(self.host.state)
        if load is None or self.lost:
            return None
        return load_reading(self.record, self.power_limit, load, time.time())

    @property
    def utilization(self) -> int:
        return 100 if self.under_load else 0

    @property
    def clocks(self) -> Clocks:
        """Idle clocks, pulled into the locked ranges: locked clocks apply even with no work running. Under a
        load, the load model's."""
        if self.under_load:
            sm, mem = self.under_load["sm"], self.under_load["mem"]
            return Clocks(sm, sm, mem, self.model.max_clocks.video)
        idle = self.model.idle_clocks
        graphics = clamp(idle.graphics, self.record["locked_gpu"])
        memory = clamp(idle.memory, self.record["locked_mem"])
        if self.record["deferred_active"] and not self.record["locked_mem"]:
            memory = self.record["deferred_active"]
        return Clocks(graphics, graphics, memory, idle.video)

    @property
    def link(self) -> dict:
        """How the link trained: below its maximum where a fault says so, or (a riser that retrains down under
        heavy traffic, read with .get: a newer key) only while a load runs."""
        under_load = self.record.get("link_under_load")
        return (under_load if under_load and self.under_load else self.record["link"]) or {}

    @property
    def link_gen(self) -> int:
        return self.link.get("gen") or self.model.pcie_gen

    @property
    def link_width(self) -> int:
        return self.link.get("width") or self.model.pcie_width

    @property
    def pci(self) -> tuple:
        """(domain, bus, device, function) as integers."""
        domain, bus, rest = self.bus_id.split(":")
        device, function = rest.split(".")
        return int(domain, 16), int(bus, 16), int(device, 16), int(function, 16)

    @property
    def ecc_enabled(self) -> bool:
        return bool(ecc_on(self.record))

    @property
    def memory_reserved(self) -> int:
        """The driver reserves bytes, not whole MiB: nvidia-smi rounds reserved and free each on its own."""
        return round(self.model.reserved_mib)

    @property
    def memory_free(self) -> int:
        return round(self.memory_total - self.model.reserved_mib - memory_used(self))

    @property
    def mig_enabled(self) -> bool:
        return bool(mig_on(self.record))

    @property
    def memory_total(self) -> int:
        """The frame buffer nvidia-smi reports: less what ECC takes where it costs memory."""
        return self.model.memory_mib - (self.model.ecc_cost_mib if self.ecc_enabled else 0)

    @property
    def event_reasons(self) -> int:
        """The active clock event reasons (NVML bits): Idle, unless a hardware fault holds others active."""
        if self.under_load:
            return self.record["forced_reasons"] | self.under_load["reasons"]
        return self.record["forced_reasons"] or REASON_IDLE

    def event_reason_us(self, bit: int) -> int:
        """Microseconds the reason has been active since the driver loaded (0 where it never was)."""
        since = self.record["reasons_since"].get(f"0x{bit:x}")
        if since is None or not self.record["forced_reasons"] & bit:
            return 0
        return max(0, int((time.time() - since) * 1e6))

    # Live readings: near the model's idle values, a little noise so nothing depends on them.
    @cached_property
    def temperature(self) -> int:
        """Near the model's idle value; at its slowdown threshold while a thermal fault holds it there."""
        if self.record["forced_reasons"] & REASON_HW_THERMAL:
            t = self.model.thermal
            return (t.slowdown if t.tlimit_total is None else t.tlimit_total - t.slowdown) + random.randint(0, 1)
        if self.under_load:
            return self.under_load["temp"]
        return self.model.idle_temp + random.randint(0, 1)

    @cached_property
    def memory_temperature(self) -> int | None:
        return None if self.model.memory_temp is None else self.model.memory_temp + random.randint(0, 1)

    @cached_property
    def power_draw(self) -> float:
        if self.under_load:
            return self.under_load["power"]
        return round(self.model.idle_power * random.uniform(0.995, 1.01), 2)

    @cached_property
    def power_instant(self) -> float:
        """power.draw.instant: under a load, the transients the averaged draw hides."""
        if self.under_load:
            return self.under_load["power_instant"]
        return self.power_draw

    @cached_property
    def power_average(self) -> float:
        if self.under_load:
            return self.under_load["power"]
        return round(self.model.idle_power * random.uniform(0.995, 1.01), 2)


# --- words and values every view of a GPU shares ---------------------------------------------------------


def enabled(flag: bool) -> str:
    return "Enabled" if flag else "Disabled"


def active(flag: int) -> str:  # a flag, or a clock event reason's bit of the active ones
    return "Active" if flag else "Not Active"


def memory_used(g: Gpu) -> int:
    return 0


def yes_no(flag: bool) -> str:
    return "Yes" if flag else "No"


def normal_bus_id(text: str) -> str:
    """00:06.0, 0000:00:06.0 and 00000000:00:06.0 all name the same GPU."""
    parts = text.upper().split(":")
    if len(parts) == 2:
        parts = ["0"] + parts
    if len(parts) != 3:
        return ""
    return f"{parts[0][-8:]:0>8}:{parts[1]}:{parts[2]}"
