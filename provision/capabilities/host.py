"""What a host is, as one value: the core's facts (system, files, units, packages) and each capability's.

Plain values parsed from real command output: a value printed as "[N/A]" or
"[Not Supported]" is None, never a number made up. Units are fixed: watts as
float, clocks in MHz as int, PCIe generation and width as int. A capability
adds its facts here with one field (its dataclass lives in its own folder), and
its settings block to HostSettings: typed fields rather than ones folded from
the declarations (registry.py), because mypy checks `host.settings.gpu.x` and
`facts.nvidia.y` only against declared fields. A new setting of a capability is
a field of its own block, and touches nothing here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from provision.capabilities.bmc.facts import BmcFacts
from provision.capabilities.containers.facts import ContainersFacts
from provision.capabilities.dcgm.facts import DcgmFacts
from provision.capabilities.driver.facts import DriverFacts
from provision.capabilities.fabric.facts import FabricFacts
from provision.capabilities.gpu.mig_model import MigFacts
from provision.capabilities.gpu.model import NvidiaFacts, RecordedGpu
from provision.capabilities.gpu.nvlink import NvlinkFacts
from provision.capabilities.health.facts import KernelLogFacts, PcieFacts
from provision.capabilities.health.thermal import Thermal
from provision.capabilities.nccl.facts import Interface, RdmaPort
from provision.capabilities.slurm.facts import SlurmNodeState
from provision.capabilities.slurm.pyxis_facts import SlurmdPlugins
from provision.capabilities.system.cpu import CpuFacts
from provision.capabilities.system.daemons import DaemonProcess
from provision.capabilities.topology.topo import TopologyFacts
from provision.core.facts import FileFacts, SystemFacts
from provision.capabilities.active.settings import ActiveSettings
from provision.capabilities.driver.settings import DriverSettings
from provision.capabilities.gpu.settings import GpuSettings
from provision.capabilities.launcher.settings import LauncherSettings
from provision.capabilities.nccl.settings import NcclSettings
from provision.capabilities.slurm.settings import SlurmSettings
from provision.core.errors import Problem
from provision.core.settings import Block, setting, validation_problems, variable
from provision.core.verify_settings import VerifySettings
from pydantic import ValidationError


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
    slurmd_plugins: SlurmdPlugins | None = None  # verify only: the SPANK plugins the running slurmd loaded
    # The GPUs of the last good run (capabilities/gpu/layout.py); None when the host has no record yet.
    gpu_layout: list[RecordedGpu] | None = None
    # The network, as NCCL sees it: None when not read.
    interfaces: list[Interface] | None = None
    rdma: list[RdmaPort] = field(default_factory=list)
    # Health, read only when asked (verify): None when not read.
    kernel_log: KernelLogFacts | None = None
    pcie: PcieFacts | None = None
    bmc: BmcFacts | None = None  # the BMC's event log, power supplies and fans (ipmitool)
    thermal: dict[str, Thermal] | None = None  # bus id -> headroom to slowdown and shutdown (nvidia-smi -q)
    nvlink: NvlinkFacts | None = None  # nvidia-smi nvlink -s and -e
    mig: MigFacts | None = None  # nvidia-smi mig's profiles, placements and instances (gpu/mig_facts.py); None: not read
    topology: TopologyFacts | None = None  # read by facts and verify
    cpu: CpuFacts | None = None  # CPUs, memory, cgroup layout, GPUs' local CPUs (slurm.conf); None: not read
    fabric: FabricFacts | None = None  # NVSwitches, the fabric manager's packages and unit; None: not read
    containers: ContainersFacts = field(default_factory=ContainersFacts)  # the container toolkit, CDI, engines
    dcgm: DcgmFacts = field(default_factory=DcgmFacts)  # DCGM's packages, the host engine's version


class HostSettings(Block):
    """Everything an inventory says a host should be. A block left out is None."""

    gpu: GpuSettings | None = setting(None, "a mapping (see the gpu block)")
    driver: DriverSettings | None = setting(None, "a mapping (see the driver block)")
    nccl: NcclSettings | None = setting(None, "a mapping (see the nccl block)")
    launcher: LauncherSettings | None = setting(None, "a mapping (see the launcher block)")
    slurm: SlurmSettings | None = setting(None, "a mapping (see the slurm block)")
    active: ActiveSettings | None = setting(None, "a mapping (see the active block)")
    verify: VerifySettings | None = setting(None, "a mapping (see the verify block)")
    custom: dict[Any, Any] = setting({}, "any mapping (not validated)", examples=[{"site": "lab-a"}])


BLOCKS = tuple(HostSettings.model_fields)
VARIABLES = {variable(block): block for block in BLOCKS}  # provision_gpu -> gpu: the inventory's names
VARIABLE_OF = {block: variable for variable, block in VARIABLES.items()}  # gpu -> provision_gpu


def parse_host_settings(raw: dict[str, Any], file: str, where: str,
                        partial: bool = False) -> tuple[HostSettings | None, list[Problem]]:
    """Validate the typed blocks and `custom` of one host, group or merged host.

    raw holds only those keys (connection and ansible_* variables are the
    inventory's business). With partial=True (the blocks one group or host
    writes, which the merge may still complete) a required key that is missing
    from a mapping is not a problem; the settings may then be None without
    problems. Returns (settings or None, problems).
    """
    try:
        return HostSettings.model_validate(raw), []
    except ValidationError as exc:
        return None, validation_problems(exc, HostSettings, file, where, partial)
