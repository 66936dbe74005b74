"""The capabilities provision ships, in one place: each one's fact sections, tasks and verify checks.
A new capability is a folder under capabilities/ plus its lines here (and its field on HostFacts)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from provision.capabilities.bmc import facts as bmc_facts
from provision.capabilities.driver import facts as driver_facts
from provision.capabilities.gpu import facts as gpu_facts
from provision.capabilities.health import facts as health_facts
from provision.capabilities.host import HostFacts
from provision.capabilities.nccl import facts as nccl_facts
from provision.capabilities.slurm import facts as slurm_facts
from provision.capabilities.system import facts as system_facts
from provision.capabilities.topology import facts as topology_facts
from provision.capabilities.bmc.tasks import ACCEPT_BMC_EVENTS, BmcEventRecord
from provision.capabilities.capability import RunFlag
from provision.capabilities.driver.packages import reboot_pending
from provision.capabilities.driver.tasks import DriverRepository, NouveauBlacklist, NvidiaDriver
from provision.capabilities.gpu.boot import BootConf
from provision.capabilities.gpu.clock_cache import upkeep
from provision.capabilities.gpu.clocks import ApplicationClocks, LockedClocks
from provision.capabilities.gpu.layout import ACCEPT_GPU_CHANGES
from provision.capabilities.gpu.layout_task import GpuLayout
from provision.capabilities.gpu.tasks import Persistence, PowerLimit
from provision.capabilities.launcher.tasks import TorchrunLauncher
from provision.capabilities.nccl.tasks import NcclFiles
from provision.capabilities.slurm.tasks import MungeKey, SlurmConfig, SlurmDaemons, SlurmPackages
from provision.capabilities.system.files import TemplateFile
from provision.capabilities.system.services import ServiceEnabled
from provision.core.facts import FactRegistry
from provision.core.plan import Task
from provision.core.run import Extensions

# The facts batch: the core's sections, then these, in this order.
FACTS = FactRegistry(HostFacts, [gpu_facts.READER, nccl_facts.READER, system_facts.READER, driver_facts.READER,
                                 health_facts.READER, slurm_facts.READER, topology_facts.READER,
                                 bmc_facts.READER])
# What the capabilities add to every run: the batch, the supported-clocks cache, the driver's pending reboot.
EXTENSIONS = Extensions(FACTS, upkeep=upkeep, reboot_pending=reboot_pending)

# The tasks a playbook may name (`task: NAME`), by name.
TASK_TYPES: dict[str, type[Task]] = {cls.name: cls for cls in (
    NouveauBlacklist, DriverRepository, NvidiaDriver, GpuLayout, Persistence, PowerLimit, ApplicationClocks,
    LockedClocks, BootConf, TemplateFile, ServiceEnabled, NcclFiles, TorchrunLauncher, SlurmPackages, MungeKey,
    SlurmConfig, SlurmDaemons, BmcEventRecord)}

# The options a run takes for the capabilities' tasks (the CLI builds them; a host carries those set in Host.flags).
RUN_FLAGS: tuple[RunFlag, ...] = (ACCEPT_GPU_CHANGES, ACCEPT_BMC_EVENTS)

# verify runs the checks in this order (its report lists them so): one module per capability, a few have two.
CHECKS = (
    "provision.capabilities.driver.checks",
    "provision.capabilities.gpu.checks",
    "provision.capabilities.gpu.checks_nvlink",
    "provision.capabilities.health.checks",
    "provision.capabilities.health.checks_kernel",
    "provision.capabilities.bmc.checks",
    "provision.capabilities.nccl.checks",
    "provision.capabilities.nccl.checks_rdma",
    "provision.capabilities.slurm.checks",
    "provision.capabilities.topology.checks",
    "provision.capabilities.active.checks",
)


def check_files() -> list[Path]:
    """The check modules' files, for verify's pytest session (found, not imported: pytest imports them)."""
    files = []
    for name in CHECKS:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            raise LookupError(f"{name}: a check module the registry lists is not installed")
        files.append(Path(spec.origin))
    return files
