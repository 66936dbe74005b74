"""What nvidia-smi says of a host's GPUs: plain values parsed from real output ("[N/A]" is None, never a number made up)."""

from __future__ import annotations
from dataclasses import dataclass, field


@dataclass(frozen=True)
class ClockPair:
    """One supported (memory, graphics) application-clock pair, in MHz."""

    mem: int
    sm: int

    def __str__(self) -> str:
        return f"{self.mem},{self.sm}"


@dataclass
class GpuFacts:
    index: int
    uuid: str
    name: str
    bus_id: str  # "00000000:00:06.0" as nvidia-smi prints it
    compute_cap: str | None = None  # "7.0" (Volta), "8.6", "9.0" (Hopper): decides which clock setters work
    persistence: bool | None = None  # Enabled/Disabled; None when N/A
    power_limit: float | None = None  # power.limit (requested), W
    power_default: float | None = None
    power_min: float | None = None
    power_max: float | None = None
    power_enforced: float | None = None
    app_clock_sm: int | None = None  # clocks.applications.graphics
    app_clock_mem: int | None = None  # clocks.applications.memory
    default_app_clock_sm: int | None = None
    default_app_clock_mem: int | None = None
    clock_sm: int | None = None  # current clocks.sm
    clock_mem: int | None = None  # current clocks.mem
    max_clock_sm: int | None = None
    max_clock_mem: int | None = None
    pcie_gen_current: int | None = None
    pcie_gen_max: int | None = None
    pcie_width_current: int | None = None
    pcie_width_max: int | None = None
    # Health (verify): None where the GPU or driver does not report it.
    clock_events_active: int | None = None  # clocks_event_reasons.active bitmask (nvml.h; facts/health.py)
    ecc_enabled: bool | None = None  # ECC mode now; None: the GPU has no ECC memory ("[N/A]", GeForce)
    ecc_uncorrected: int | None = None  # uncorrectable ECC errors since the driver loaded
    retired_pages_pending: bool | None = None  # pre-Ampere: a page waits to be retired at the next driver load
    remap_pending: bool | None = None  # Ampere+: a row remap waits for a GPU reset
    remap_failure: bool | None = None  # Ampere+: a row could not be remapped (the GPU is out of spare rows)
    # Modes. ECC and MIG mode take effect at the next reboot or GPU reset: pending differs from current until then.
    ecc_pending: bool | None = None
    compute_mode: str | None = None  # "default", "exclusive_process", "prohibited" (nvidia-smi's word, lower case)
    mig_mode: bool | None = None  # None: the GPU has no MIG ("[N/A]")
    mig_pending: bool | None = None
    # NVSwitch fabric (HGX boards): "Not Supported", "Not Started", "In Progress", "Completed"; its status
    # ("Success" or NVML's error) once Completed. None: N/A (no fabric) or a driver without the fields.
    fabric_state: str | None = None
    fabric_status: str | None = None
    # The recovery the driver asks for (drivers 565+): "none", "reset", "reboot", "drain p2p", "drain and reset"
    # (nvidia-smi's word, lower case; capabilities/health/recovery.py). None: N/A or a driver without the field.
    recovery_action: str | None = None
    # Supported application-clock pairs; empty when the GPU reports none
    # (GeForce prints "N/A"): such a GPU cannot take application clocks.
    supported_clocks: list[ClockPair] = field(default_factory=list)
    # Locked clocks cannot be read back from nvidia-smi: what provision set since
    # boot, from its record in /run (gone at reboot, like the locks themselves).
    # {"sm": "MIN,MAX" | "default", "mem": ..., "mem_deferred": "MHz" | "default"}
    locked: dict[str, str] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"GPU{self.index}"


@dataclass
class LostGpu:
    """A GPU nvidia-smi names but cannot read (fallen off the bus, needs a reset). It is not among the
    GPUs the tasks tune, and the boot file keeps its line (capabilities/gpu/boot.py) for after the repair."""

    bus_id: str | None  # as nvidia-smi printed it ("0000:41:00.0" in its error lines); None if unreadable
    message: str  # nvidia-smi's words: its error line, or the "[GPU is lost]" of the GPU's cells
    uuid: str | None = None
    index: int | None = None

    def __str__(self) -> str:
        names = [f"GPU{self.index}" if self.index is not None else "", self.bus_id or "", self.uuid or ""]
        return f"{' '.join(n for n in names if n) or 'a GPU'}: {self.message}"


@dataclass(frozen=True)
class RecordedGpu:
    """One GPU of a host's last good run, as recorded on the host (capabilities/gpu/layout.py)."""

    index: int
    uuid: str
    bus_id: str
    name: str


@dataclass
class NvidiaFacts:
    """The NVIDIA stack on a host, as one state among several."""

    # "ok" (at least one GPU read; any others are in `lost`), "missing" (no nvidia-smi),
    # "no-devices" ("No devices were found"), "mismatch" (NVML library and loaded module differ: a driver
    # upgraded without a reboot), "error" (nvidia-smi ran but no GPU could be read: driver not loaded,
    # every GPU lost, etc.)
    state: str = "missing"
    message: str = ""  # nvidia-smi's own words when state is not ok
    exit_code: int | None = None  # of nvidia-smi --query-gpu (None: not run); 15: a GPU fell off the bus, ...
    driver_version: str | None = None
    gpus: list[GpuFacts] = field(default_factory=list)
    lost: list[LostGpu] = field(default_factory=list)  # GPUs nvidia-smi names but cannot read
    # What the parser could not use (a value, a line, a field this driver does not know), so it is shown.
    notes: list[str] = field(default_factory=list)
    persistenced_path: str | None = None  # where nvidia-persistenced is installed
    persistenced_running: bool = False
    # Where the supported clocks came from (capabilities/gpu/clock_cache.py): "cache", "nvidia-smi" or "none".
    supported_clocks_source: str = "none"
