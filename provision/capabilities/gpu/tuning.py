"""What each GPU should be: the gpu settings resolved against the GPU itself, checked, in words.

Pure functions of (GpuFacts, the settings for that GPU). The tasks (live GPU),
the boot file (after every reboot) and the ad-hoc commands all use them, so
the three never disagree on what a setting means for a given GPU.

Which setter a GPU takes is decided from what it reports, never from its name:
  application clocks (-ac)   the GPU reports default application clocks and
                             supported pairs (Tesla/datacenter; GeForce reports
                             "N/A" or refuses, even where it lists pairs)
  locked GPU clocks (-lgc)   Volta and newer (compute capability 7.0+)
  locked memory (-lmc)       Ampere and newer (8.0+), but not Hopper (9.x),
                             which locks memory at the next driver load (-lmcd)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from provision.capabilities.gpu.model import ClockPair, GpuFacts

# A provision_gpu setting's value as the inventory gives it: the setting's model, a number, or "default". Its type
# depends on the setting: each function below takes one setting's (the caller picks the function by the key).
Wanted = Any

DEFAULT = "default"
RESET_NOTE = "the default"  # app_clocks_target's note for "default": set with -rac


class Refused(ValueError):
    """A setting this GPU cannot take; the message names the GPU, the key, what is allowed and what to do,
    in inventory words (`provision apply`). The same facts come as data, for the ad-hoc commands to say them
    in their own flags (adhoc.py):

      gpu      the GPU
      key      the setting refused: "clocks", "locked_clocks.sm", "locked_clocks.mem" or "power_limit"
      problem  what is wrong, naming neither the GPU nor the value ("not a supported (memory,graphics) pair")
      allowed  what the GPU takes instead, in words ("nearest: 877,1005 877,997"), or ""
      instead  settings to use in place of the refused one ({"locked_clocks": {"sm": [210, 1005]}}), or None
    """

    def __init__(self, message: str, gpu: GpuFacts | None = None, key: str = "", problem: str = "",
                 allowed: str = "", instead: dict[str, dict[str, Any]] | None = None):
        super().__init__(message)
        self.gpu, self.key, self.problem, self.allowed, self.instead = gpu, key, problem or message, allowed, instead


def gpu_words(gpu: GpuFacts) -> str:
    return f"{gpu.label} ({gpu.name})"


def compute_capability(gpu: GpuFacts) -> tuple[int, int] | None:
    try:
        major, minor = (gpu.compute_cap or "").split(".")
        return int(major), int(minor)
    except ValueError:
        return None  # an older driver without the field: let the GPU itself refuse (-eow)


def default_app_clocks(gpu: GpuFacts) -> ClockPair | None:
    """The pair -rac sets back; None on a GPU without application clocks."""
    mem, sm = gpu.default_app_clock_mem, gpu.default_app_clock_sm
    return ClockPair(mem, sm) if mem is not None and sm is not None else None


def takes_app_clocks(gpu: GpuFacts) -> bool:
    return default_app_clocks(gpu) is not None and bool(gpu.supported_clocks)


def locks_gpu_clocks(gpu: GpuFacts) -> bool:
    cc = compute_capability(gpu)
    return cc is None or cc >= (7, 0)


def memory_lock_option(gpu: GpuFacts) -> str | None:
    """"-lmc", "-lmcd" (Hopper: applied at the next driver load) or None (before Ampere)."""
    cc = compute_capability(gpu)
    if cc is None:
        return "-lmc"
    if cc[0] == 9:
        return "-lmcd"
    return "-lmc" if cc >= (8, 0) else None


# --- application clocks ---------------------------------------------------------------------------

def nearest_pairs(gpu: GpuFacts, mem: int, sm: int, count: int = 4) -> list[ClockPair]:
    """Supported pairs closest to (mem, sm): the memory clock first (few exist), then graphics."""
    return sorted(gpu.supported_clocks, key=lambda p: (abs(p.mem - mem), abs(p.sm - sm), -p.sm))[:count]


def app_clocks_target(gpu: GpuFacts, want: Wanted) -> tuple[ClockPair | None, str]:
    """(the pair to set, a note for the report), for provision_gpu.clocks = {mem, sm, nearest} or "default".
    None for "default" on a GPU without application clocks: there is nothing to reset."""
    default = default_app_clocks(gpu)
    if (default is None or not gpu.supported_clocks) and want == DEFAULT:  # not takes_app_clocks(gpu)
        return None, "this GPU has no application clocks"
    if default is None or not gpu.supported_clocks:
        low = _lowest(gpu, "sm") or gpu.clock_sm or "MIN"
        raise Refused(f"{gpu_words(gpu)}: provision_gpu.clocks (application clocks, nvidia-smi -ac) is not supported by "
                      f"this GPU; use provision_gpu.locked_clocks instead, e.g. locked_clocks: {{sm: [{low}, {want.sm}]}}",
                      gpu, "clocks", "takes no application clocks",
                      instead={"locked_clocks": {"sm": [low, want.sm]}})
    if want == DEFAULT:
        return default, RESET_NOTE
    asked = ClockPair(want.mem, want.sm)
    if asked in gpu.supported_clocks:
        return asked, ""
    near = nearest_pairs(gpu, want.mem, want.sm)
    if want.nearest:
        return near[0], f"nearest supported pair to {asked}"
    raise Refused(f"{gpu_words(gpu)}: provision_gpu.clocks mem {want.mem}, sm {want.sm} is not a supported "
                  f"(memory,graphics) pair; nearest: {' '.join(map(str, near))}. Set nearest: true to use "
                  f"the nearest, or see `provision clocks --list`",
                  gpu, "clocks", "not a supported (memory,graphics) pair", f"nearest: {' '.join(map(str, near))}",
                  instead={"clocks": {"mem": want.mem, "sm": want.sm, "nearest": True}})


# --- locked clocks --------------------------------------------------------------------------------

@dataclass(frozen=True)
class Lock:
    """One locked-clock setting of one GPU: what provision records, and the nvidia-smi arguments."""

    key: str  # "sm", "mem" or "mem_deferred": the record's key
    value: str  # "MIN,MAX", one MHz value (mem_deferred) or "default"

    @property
    def argv(self) -> list[str]:
        option = {"sm": "-lgc", "mem": "-lmc", "mem_deferred": "-lmcd"}[self.key]
        if self.value == DEFAULT:
            return [option.replace("-l", "-r", 1)]  # -rgc, -rmc, -rmcd
        return [option, self.value]

    def words(self) -> str:
        name = {"sm": "locked GPU clocks", "mem": "locked memory clocks",
                "mem_deferred": "deferred memory clock (next driver load)"}[self.key]
        return f"{name} ({self.argv[0]})"


def locked_targets(gpu: GpuFacts, want: Wanted) -> list[Lock]:
    """The locks for provision_gpu.locked_clocks = {sm: [MIN, MAX], mem: [MIN, MAX]} or "default"."""
    if want == DEFAULT:
        locks = [Lock("sm", DEFAULT)] if locks_gpu_clocks(gpu) else []
        option = memory_lock_option(gpu)
        if option:
            locks.append(Lock("mem" if option == "-lmc" else "mem_deferred", DEFAULT))
        return locks
    locks = []
    if want.sm is not None:
        if not locks_gpu_clocks(gpu):
            raise Refused(f"{gpu_words(gpu)}: provision_gpu.locked_clocks.sm (-lgc) needs Volta or newer "
                          f"(compute capability 7.0+), this GPU is {gpu.compute_cap}; use provision_gpu.clocks",
                          gpu, "locked_clocks.sm", f"cannot lock its graphics clock (-lgc needs Volta or newer, "
                          f"compute capability 7.0+; this GPU is {gpu.compute_cap})",
                          instead={"clocks": {"mem": "MEM", "sm": "SM"}})
        _check_range(gpu, "sm", want.sm, _lowest(gpu, "sm"), gpu.max_clock_sm)
        locks.append(Lock("sm", f"{want.sm[0]},{want.sm[1]}"))
    if want.mem is not None:
        locks.append(_memory_lock(gpu, want.mem))
    return locks


def _memory_lock(gpu: GpuFacts, bounds: tuple[int, int]) -> Lock:
    option = memory_lock_option(gpu)
    if option is None:
        raise Refused(f"{gpu_words(gpu)}: provision_gpu.locked_clocks.mem (-lmc) needs Ampere or newer (compute capability "
                      f"8.0+), this GPU is {gpu.compute_cap}; set its memory clock with provision_gpu.clocks "
                      "(application clocks) instead",
                      gpu, "locked_clocks.mem", f"cannot lock its memory clock (-lmc needs Ampere or newer, "
                      f"compute capability 8.0+; this GPU is {gpu.compute_cap})",
                      instead={"clocks": {"mem": "MEM", "sm": "SM"}})
    if option == "-lmcd":
        supported = sorted({p.mem for p in gpu.supported_clocks}, reverse=True)
        if bounds[0] != bounds[1] or (supported and bounds[0] not in supported):
            top = supported[0] if supported else "MHz"
            raise Refused(f"{gpu_words(gpu)}: provision_gpu.locked_clocks.mem {list(bounds)}: Hopper locks memory at the next "
                          f"driver load (-lmcd) to one supported memory clock: write mem: "
                          f"{top} (supported: {', '.join(map(str, supported))})",
                          gpu, "locked_clocks.mem", "Hopper locks memory at the next driver load (-lmcd), to one "
                          "supported memory clock", f"supported: {', '.join(map(str, supported))}",
                          instead={"locked_clocks": {"mem": [top, top]}})
        return Lock("mem_deferred", str(bounds[0]))
    _check_range(gpu, "mem", bounds, _lowest(gpu, "mem"), gpu.max_clock_mem)
    return Lock("mem", f"{bounds[0]},{bounds[1]}")


def _lowest(gpu: GpuFacts, which: str) -> int | None:
    values = [getattr(p, which) for p in gpu.supported_clocks]
    return min(values) if values else None


def _check_range(gpu: GpuFacts, which: str, bounds: tuple[int, int], low: int | None, high: int | None) -> None:
    if (low is not None and bounds[0] < low) or (high is not None and bounds[1] > high):
        span = f"{low if low is not None else 0}..{high if high is not None else '?'} MHz"
        raise Refused(f"{gpu_words(gpu)}: provision_gpu.locked_clocks.{which} {list(bounds)} MHz is outside this GPU's "
                      f"range {span} (clocks.max.{'graphics' if which == 'sm' else 'memory'} is the top)",
                      gpu, f"locked_clocks.{which}", f"outside the range {span}")


def current_lock(gpu: GpuFacts, key: str) -> str:
    """What provision recorded for this lock since boot; "default" when nothing was (a boot resets locks)."""
    return gpu.locked.get(key, DEFAULT)


# --- power ----------------------------------------------------------------------------------------

def power_target(gpu: GpuFacts, want: Wanted) -> float:
    if (gpu.power_limit is None or gpu.power_min is None or gpu.power_max is None
            or (want == DEFAULT and gpu.power_default is None)):
        raise Refused(f"{gpu_words(gpu)}: provision_gpu.power_limit is set but this GPU does not support changing its "
                      "power limit; remove it for this GPU (provision_gpu.overrides)",
                      gpu, "power_limit", "does not support changing its power limit")
    target = gpu.power_default if want == DEFAULT and gpu.power_default is not None else float(want)
    if not gpu.power_min <= target <= gpu.power_max:
        raise Refused(f"{gpu_words(gpu)}: provision_gpu.power_limit {target:g} W is outside this GPU's range "
                      f"{gpu.power_min:g}..{gpu.power_max:g} W (default {gpu.power_default:g} W)",
                      gpu, "power_limit", f"{target:g} W is outside the range {gpu.power_min:g}..{gpu.power_max:g} W "
                      f"(default {gpu.power_default:g} W)")
    return target


# --- modes ----------------------------------------------------------------------------------------

def ecc_target(gpu: GpuFacts, want: Wanted) -> bool:
    """provision_gpu.ecc (true/false) on this GPU; refused where it has no ECC memory (nvidia-smi: "[N/A]")."""
    if gpu.ecc_enabled is None:
        raise Refused(f"{gpu_words(gpu)}: provision_gpu.ecc is set but this GPU has no ECC memory (nvidia-smi reports "
                      "its ECC mode as N/A); remove it for this GPU (provision_gpu.overrides)",
                      gpu, "ecc", "has no ECC memory (its ECC mode reads N/A)")
    return bool(want)


# nvidia-smi -c's words for each mode (nvidia-smi --help: 0/DEFAULT, 2/PROHIBITED, 3/EXCLUSIVE_PROCESS).
COMPUTE_MODE_ARG = {"default": "DEFAULT", "exclusive_process": "EXCLUSIVE_PROCESS", "prohibited": "PROHIBITED"}


def compute_mode_target(gpu: GpuFacts, want: Wanted) -> str:
    """provision_gpu.compute_mode on this GPU. A MIG-enabled GPU takes none but default: nvidia-smi answers
    "Setting compute mode to EXCLUSIVE_PROCESS is not supported on a MIG-enabled device" (NVIDIA/DCGM#82)."""
    mode = str(want)
    if mode != "default" and gpu.mig_mode:
        raise Refused(f"{gpu_words(gpu)}: provision_gpu.compute_mode {mode} is not supported on a MIG-enabled GPU; "
                      "MIG instances isolate its jobs: leave compute_mode out for this GPU (provision_gpu.overrides)",
                      gpu, "compute_mode", "is MIG-enabled: it takes no compute mode but default")
    return mode
