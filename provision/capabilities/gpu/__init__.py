"""The GPUs: persistence, power limits, clocks, ECC and compute mode, the boot file that sets them again, the record
of the layout."""

from provision.capabilities.capability import BootUnit, Capability
from provision.capabilities.gpu import clock_cache, facts, layout, mig_tasks, modes, shown
from provision.capabilities.gpu.boot import UNIT, BootConf
from provision.capabilities.gpu.clocks import ApplicationClocks, LockedClocks
from provision.capabilities.gpu.layout_task import GpuLayout
from provision.capabilities.gpu.mig_tasks import MigLayout, MigMode
from provision.capabilities.gpu.modes import ComputeMode, EccMode
from provision.capabilities.gpu.settings import GpuSettings
from provision.capabilities.gpu.tasks import Persistence, PowerLimit

# Each a column of nvidia.gpus that one task sets: the tasks that set different ones join one batch. The boot file
# sets each again at every boot.
TUNED = frozenset({"nvidia.persistence", "nvidia.persistenced", "nvidia.power_limit", "nvidia.app_clocks",
                   "nvidia.locked_clocks", modes.COMPUTE_MODE})

CAPABILITY = Capability(
    name="gpu", settings=GpuSettings, facts=facts.READER,
    tasks=(GpuLayout, Persistence, EccMode, ComputeMode, MigMode, MigLayout, PowerLimit, ApplicationClocks,
           LockedClocks, BootConf),
    checks=(f"{__name__}.checks", f"{__name__}.checks_mig", f"{__name__}.checks_nvlink"),
    run_flags=(layout.ACCEPT_GPU_CHANGES,),
    # ECC mode persists across reboots by itself: no boot unit sets it; a change waits for the next reboot.
    # MIG mode persists too; its GPU instances do not: the boot file makes them again (mig_boot.py).
    fact_keys=TUNED | {modes.ECC, mig_tasks.MODE_KEY}, boot_units=(BootUnit(UNIT, TUNED | {"mig"}),),
    pending=(modes.reboot_pending, mig_tasks.pending_reasons),
    show=shown.lines, upkeep=clock_cache.upkeep)
