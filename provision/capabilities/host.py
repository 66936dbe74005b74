"""The facts data model: plain values parsed from real command output.

A value nvidia-smi prints as "[N/A]" or "[Not Supported]" is None here; the
parsers never invent numbers. Units are fixed: watts as float, clocks in MHz
as int, PCIe generation and width as int.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from provision.capabilities.topology.topo import Topology


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
    ecc_enabled: bool | None = None
    ecc_uncorrected: int | None = None  # uncorrectable ECC errors since the driver loaded
    retired_pages_pending: bool | None = None  # pre-Ampere: a page waits to be retired at the next driver load
    remap_pending: bool | None = None  # Ampere+: a row remap waits for a GPU reset
    remap_failure: bool | None = None  # Ampere+: a row could not be remapped (the GPU is out of spare rows)
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


@dataclass
class FileFacts:
    """A file the tasks manage, as it is on the host now."""

    path: str
    exists: bool = False
    content: bytes | None = None
    mode: str | None = None  # octal, e.g. "644"
    owner: str | None = None
    group: str | None = None
    mtime: float | None = None  # seconds since the epoch

    @property
    def text(self) -> str | None:
        """The content as text; None when the file is absent, or there and unreadable to us."""
        return self.content.decode("utf-8", "replace") if self.exists and self.content is not None else None


@dataclass
class SystemFacts:
    hostname: str = ""
    uid: int | None = None
    os_id: str = ""  # ID from /etc/os-release
    os_version: str = ""  # VERSION_ID
    systemd_running: bool = False  # /run/systemd/system exists
    sudo_nopasswd: bool = False  # "sudo -k -n true" succeeded
    machine_id: str = ""  # /etc/machine-id: the same machine, however it is reached (never reboot the control one)


@dataclass(frozen=True, order=True)
class UnitRef:
    """A systemd unit whose enabled state a task reads: on the host, or in a tree under `root`
    (`systemctl --root`, as when preparing an image; the demo uses one)."""

    name: str
    root: str | None = None

    @property
    def key(self) -> str:
        """Its key in HostFacts.units."""
        return self.name if self.root is None else f"{self.root}:{self.name}"

    def systemctl(self, *args: str) -> list[str]:
        return ["systemctl", *([f"--root={self.root}"] if self.root else []), *args, self.name]


@dataclass
class KernelLogFacts:
    """The kernel's NVIDIA (NVRM) and PCIe AER lines of this boot, as printed (capabilities/health/kernlog.py reads them)."""

    source: str | None = None  # "dmesg", "sudo dmesg", "journalctl -k -b"; None: not readable
    message: str = ""  # why not readable, in the reader's words
    lines: list[str] = field(default_factory=list)


@dataclass
class AerCounters:
    """One /sys/bus/pci/devices/DEVICE/aer_dev_KIND file, read for an NVIDIA GPU (the GPU or its port)."""

    gpu: str  # the GPU's PCI address as /sys names it: "0000:01:00.0"
    device: str  # the device that counted: the GPU itself or the port above it
    kind: str  # "correctable", "nonfatal" or "fatal"
    counts: dict[str, int] = field(default_factory=dict)  # "RxErr" -> 2 (names as the kernel prints them)
    total: int | None = None  # TOTAL_ERR_COR / _NONFATAL / _FATAL: may be below the sum (one message, many errors)


@dataclass
class PcieFacts:
    """Each NVIDIA GPU's place on the PCIe tree and the AER error counters /sys keeps for it and its port."""

    ports: dict[str, str] = field(default_factory=dict)  # GPU "0000:01:00.0" -> the port above it "0000:00:01.0"
    aer: list[AerCounters] = field(default_factory=list)  # none where the kernel exposes no AER counters


@dataclass(frozen=True)
class Interface:
    """A network interface as `ip -j addr` and /sys/class/net show it."""

    name: str
    operstate: str  # "up", "down", "unknown" (lo, some virtual links), "lowerlayerdown", ...
    speed_mbps: int | None  # None: no link, or a kind of interface without a speed
    flags: tuple[str, ...] | None = None  # ip's: "UP", "LOWER_UP", "LOOPBACK", ...; None: `ip -j` not there
    addresses: tuple[str, ...] | None = None  # "10.214.1.11/24", ...; None: not known (no `ip -j`)
    device: str | None = None  # the PCI device behind it (/sys/class/net/NAME/device), None for virtual links

    @property
    def running(self) -> bool:
        """The kernel's IFF_RUNNING, which NCCL requires: administratively up and its link up (or unknown, as
        on lo). Without ip's flags, the operstate alone."""
        link_up = self.operstate in ("up", "unknown")
        return link_up and (self.flags is None or "UP" in self.flags)

    @property
    def addressed(self) -> bool | None:
        """Has an IPv4 or IPv6 address NCCL can use (IPv6 loopback aside); None when unknown."""
        if self.addresses is None:
            return None
        return any(a.split("/")[0] != "::1" for a in self.addresses)


@dataclass(frozen=True)
class RdmaPort:
    """One port of an RDMA device (/sys/class/infiniband/HCA/ports/N): what NCCL_IB_HCA names."""

    hca: str  # "mlx5_0"
    port: int
    state: str  # "ACTIVE", "DOWN", "INIT", ...
    rate_gbps: float | None  # from "100 Gb/sec (4X EDR)"
    link_layer: str = ""  # "InfiniBand" or "Ethernet" (RoCE)


@dataclass
class TopologyFacts:
    """`nvidia-smi topo -m`, parsed (capabilities/topology/topo.py); message says why not where it could not be read."""

    matrix: Topology | None = None
    message: str = ""


@dataclass
class DaemonProcess:
    """One running process of a daemon provision manages (capabilities/system/daemons.py)."""

    pid: int
    user: str
    started: float | None  # seconds since the epoch; None when /proc did not say


@dataclass(frozen=True)
class LogicalCpu:
    """One online logical CPU and where it sits (/sys/devices/system/cpu/cpuN/topology); None: not readable."""

    cpu: int
    package: int | None  # physical_package_id: the socket
    core: int | None  # core_id, unique within its package only


@dataclass
class CpuFacts:
    """What slurm.conf's NodeName line needs, read as slurmd -C reads it (capabilities/system/cpu.py); None: not known."""

    cpus: int | None = None  # online logical CPUs
    sockets: int | None = None
    cores_per_socket: int | None = None
    threads_per_core: int | None = None
    memory_mib: int | None = None  # MemTotal kB // 1024
    cgroup: str | None = None  # "v1" or "v2": the layout of /sys/fs/cgroup
    # Each NVIDIA GPU on the PCI bus, "0000:3b:00.0" -> its local_cpulist "0-19,40-59" (None: not readable)
    gpu_cpulists: dict[str, str | None] = field(default_factory=dict)
    gpu_minors: dict[str, int] = field(default_factory=dict)  # "0000:3b:00.0" -> N of /dev/nvidiaN (driver loaded)
    topology: list[LogicalCpu] = field(default_factory=list)  # the online CPUs, by number


@dataclass
class SlurmNodeState:
    """This node as slurmctld sees it (`scontrol show node`), or why it could not be asked."""

    name: str = ""
    states: tuple[str, ...] = ()  # "IDLE", "DRAIN", "DOWN", "NOT_RESPONDING", ...
    reason: str = ""
    error: str = ""  # scontrol's own words when it could not answer

    @property
    def out_of_service(self) -> bool:
        return bool({"DRAIN", "DRAINED", "DRAINING", "DOWN", "FAIL", "NOT_RESPONDING"} & set(self.states))


@dataclass
class DriverFacts:
    """The NVIDIA driver on the host (capabilities/driver/facts.py): installed packages, the loaded module, what stands in its way."""

    loaded: str | None = None  # the loaded kernel module's version; None: no NVIDIA module loaded
    loaded_open: bool | None = None  # the open kernel modules (None: none loaded)
    loaded_line: str = ""  # /proc/driver/nvidia/version's first line, as printed
    nouveau_loaded: bool = False
    secure_boot: str = "unknown"  # "enabled", "disabled", "no-efi" (booted without UEFI) or "unknown"
    packages: dict[str, str] = field(default_factory=dict)  # installed driver packages -> Debian version
    held: list[str] = field(default_factory=list)  # of those, the ones on hold (apt-mark hold)


@dataclass
class HostFacts:
    system: SystemFacts = field(default_factory=SystemFacts)
    nvidia: NvidiaFacts = field(default_factory=NvidiaFacts)
    files: dict[str, FileFacts] = field(default_factory=dict)
    units: dict[str, str] = field(default_factory=dict)  # UnitRef.key -> "enabled"/"disabled"/...
    packages: dict[str, str | None] = field(default_factory=dict)  # name -> installed version (asked ones only)
    held: list[str] = field(default_factory=list)  # of the asked packages, those on hold (apt-mark hold)
    driver: DriverFacts = field(default_factory=DriverFacts)
    daemons: dict[str, list[DaemonProcess]] = field(default_factory=dict)  # munged, slurmd, ... -> processes
    slurm_node: SlurmNodeState | None = None  # verify only; None where not read or scontrol is not installed
    # The GPUs of the last good run (capabilities/gpu/layout.py); None when the host has no record yet.
    gpu_layout: list[RecordedGpu] | None = None
    # The network, as NCCL sees it: None when not read.
    interfaces: list[Interface] | None = None
    rdma: list[RdmaPort] = field(default_factory=list)
    # Health, read only when asked (verify): None when not read.
    kernel_log: KernelLogFacts | None = None
    pcie: PcieFacts | None = None
    topology: TopologyFacts | None = None  # read by facts and verify
    cpu: CpuFacts | None = None  # CPUs, memory, cgroup layout, GPUs' local CPUs (slurm.conf); None: not read
