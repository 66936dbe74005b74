"""The gpu block of the inventory: persistence, power limit, application or locked clocks, per model, index or UUID."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, Union

from pydantic import Field, field_validator, model_validator

from provision.capabilities.gpu import mig_settings
from provision.capabilities.gpu.mig_settings import MigSetting
from provision.core.settings import Block, PositiveInt, or_words, refuse, setting

MAX_WATTS = 1500  # above any single GPU made; catches kW and mW typos
Watts = Annotated[Union[int, float], Field(gt=0, le=MAX_WATTS)]  # int kept: files and reports show 200, not 200.0

CLOCKS_HINT = "nvidia-smi -q -d SUPPORTED_CLOCKS lists the valid mem,sm pairs"


class ClockSettings(Block):
    """Application clocks (nvidia-smi -ac MEM,SM); GeForce boards take none: use locked_clocks there."""

    mem: PositiveInt = setting(..., "MHz, an integer > 0", CLOCKS_HINT, examples=[1215])
    sm: PositiveInt = setting(..., "MHz, an integer > 0", CLOCKS_HINT, examples=[1410])
    nearest: bool = setting(False, "true or false: use the nearest supported pair instead of refusing")


ClockRange = tuple[PositiveInt, PositiveInt]


RANGE_ALLOWED = "[MIN, MAX] in MHz (integers > 0, MIN <= MAX), or one integer for [v, v]"


class LockedClocks(Block):
    """Locked clock ranges (nvidia-smi -lgc / -lmc): what GeForce boards accept instead of application clocks."""

    sm: ClockRange | None = setting(None, RANGE_ALLOWED, examples=[[1410, 1980]])
    mem: ClockRange | None = setting(None, RANGE_ALLOWED, examples=[[9501, 9501]])

    @field_validator("sm", "mem", mode="before")
    @classmethod
    def _as_range(cls, value: Any) -> Any:
        """One MHz value means [v, v]; a YAML list becomes a (min, max) pair."""
        if isinstance(value, int) and not isinstance(value, bool):
            return (value, value)
        return tuple(value) if isinstance(value, list) else value

    @field_validator("sm", "mem")
    @classmethod
    def _min_le_max(cls, value: tuple[int, int] | None) -> tuple[int, int] | None:
        if value is not None and value[0] > value[1]:
            raise refuse(f"MIN {value[0]} is above MAX {value[1]}; allowed: {RANGE_ALLOWED}", "write [MIN, MAX]")
        return value

    @model_validator(mode="after")
    def _something_locked(self) -> LockedClocks:
        if self.sm is None and self.mem is None:
            raise refuse("locked_clocks sets neither sm nor mem",
                         'give sm and/or mem, or write locked_clocks: "default"')
        return self


# The compute modes a GPU can be set to, in nvidia-smi -c's words (lower case).
COMPUTE_MODES = ("default", "exclusive_process", "prohibited")
ComputeMode = Literal["default", "exclusive_process", "prohibited"]


# Module-level aliases: linters read strings inside annotations as type names. mypy reads what they validate
# to (it cannot run or_words); pydantic reads the validators.
if TYPE_CHECKING:
    PowerLimit = Union[int, float, Literal["default"]]
    Clocks = Union[ClockSettings, Literal["default"]]
    ClockLocks = Union[LockedClocks, Literal["default"]]
else:
    PowerLimit = or_words(Watts, "default", number="a number of watts")
    Clocks = or_words(ClockSettings, "default")
    ClockLocks = or_words(LockedClocks, "default")


class GpuTuning(Block):
    """What can be set per GPU: the gpu block itself and each of its overrides."""

    persistence: bool | None = setting(None, "true or false")
    power_limit: PowerLimit | None = setting(
        None, f'watts, > 0 and <= {MAX_WATTS}, or "default"', "nvidia-smi -q -d POWER shows each GPU's min and max",
        examples=[300])
    clocks: Clocks | None = setting(
        None, '{mem: MHz, sm: MHz, nearest: bool} or "default"', examples=[{"mem": 1215, "sm": 1410}])
    locked_clocks: ClockLocks | None = setting(
        None, '{sm: [MIN, MAX], mem: [MIN, MAX]} or "default"', examples=[{"sm": [1410, 1980]}])
    mig: MigSetting | None = setting(
        None, mig_settings.ALLOWED, f"MIG (nvidia-smi -mig, nvidia-smi mig -cgi ... -C): {mig_settings.NAMES_HINT}, "
        "each GPU's layout checked against what that GPU lists before any host is touched. MIG mode waits for a GPU "
        "reset or reboot where the GPU is in use (the run says pending; provision apply --reboot takes it); the "
        "layout is made once the mode is on, never under running processes. Instances are lost at every reboot, "
        "and on Hopper and later (H100, H200, B200) MIG mode too: the boot unit turns the mode on and makes the "
        "layout again before slurmd, DCGM and the container runtime start. A GPU in MIG mode takes compute mode "
        "default only; under Slurm each MIG device is a gres typed by its profile (--gres=gpu:3g.71gb:1), and a "
        "torchrun launcher runs one process per node on it (NCCL does not span slices)",
        examples=[["3g.71gb", "3g.71gb"]])
    # ECC mode (nvidia-smi -e): the driver stores it and takes it at the next reboot or GPU reset; until then it is
    # pending (a state, not a failure). A GPU without ECC memory (GeForce: "[N/A]") refuses it.
    ecc: bool | None = setting(
        None, "true or false", "ECC mode (nvidia-smi -e). The driver takes it at the next reboot or GPU reset: until "
        "then the run says the reboot is pending (provision apply --reboot takes it); then it stays, with no boot "
        "line. A GPU without ECC memory (its ECC mode reads N/A: GeForce) refuses it. nvidia-smi -q -d ECC shows "
        "the mode, current and pending", examples=[True])
    # Compute mode (nvidia-smi -c): lost at every reboot, so the boot unit sets it again. Exclusive_Thread is
    # deprecated (nvidia-smi --help): not offered.
    compute_mode: ComputeMode | None = setting(
        None, ", ".join(COMPUTE_MODES), "Compute mode (nvidia-smi -c). exclusive_process: one process per GPU (a GPU "
        "is never shared by two jobs); prohibited: no process at all. Lost at every reboot: the boot unit sets it "
        "again. A MIG-enabled GPU takes only default", examples=["exclusive_process"])


TUNING_KEYS = tuple(GpuTuning.model_fields)


SELECTORS = ("model", "index", "uuid")  # least specific first


class GpuOverride(GpuTuning):
    """Settings for some GPUs of a host, chosen by exactly one selector."""

    index: int | None = setting(None, "a GPU index as nvidia-smi shows it, >= 0", ge=0, examples=[0])
    uuid: str | None = setting(None, 'a GPU UUID, e.g. "GPU-4f3a..." (nvidia-smi -L)', pattern=r"^GPU-[0-9a-fA-F-]+$",
                               examples=["GPU-4f3a1e2d-93b4-4b7e-9a51-0c8d2e6f7a10"])
    model: str | None = setting(None, 'part of the GPU name, any case, e.g. "V100"', min_length=1, examples=["A100"])

    @model_validator(mode="after")
    def _one_selector(self) -> GpuOverride:
        given = [s for s in SELECTORS if getattr(self, s) is not None]
        if len(given) != 1:
            found = f"got {', '.join(given)}" if given else "got none"
            raise refuse(f"an override needs exactly one selector: model, index or uuid ({found})",
                         "write one override entry per selector")
        return self

    @property
    def specificity(self) -> int:
        """model 0 < index 1 < uuid 2: a more specific override is applied later, so it wins."""
        return next(i for i, s in enumerate(SELECTORS) if getattr(self, s) is not None)

    def matches(self, index: int | None, uuid: str, name: str) -> bool:
        if self.uuid is not None:
            return self.uuid.lower() == uuid.lower()
        if self.index is not None:
            return self.index == index
        return self.model is not None and self.model.lower() in name.lower()  # the one selector left


class GpuSettings(GpuTuning):
    telling_fields: ClassVar[frozenset[str]] = frozenset({"persistence", "clocks", "overrides"})

    overrides: list[GpuOverride] = setting([], "a list of {index|uuid|model: ..., plus settings}",
                                           examples=[[{"model": "A100", "power_limit": 250}]])
    # What the host must have: verify fails with fewer or more (a card gone after maintenance).
    count: int | None = setting(None, "the number of GPUs the host has, an integer 1..64", ge=1, le=64, examples=[8])
    # verify: a GPU this close to its slowdown temperature will throttle (fans, airflow, a dusty heatsink).
    thermal_margin: int = setting(5, "degrees C, 0..50", "verify fails a GPU closer than this to its slowdown "
                                  "temperature", ge=0, le=50)

    def for_gpu(self, index: int | None, uuid: str, name: str) -> GpuSettings:
        """The settings for one GPU, with `overrides` empty. index None: no `index:` override applies.

        Matching overrides are applied over the block from least to most
        specific (model, then index, then uuid; list order within a kind), so
        the most specific wins. Each override replaces whole settings: its
        clocks replace the block's clocks, they are not merged.
        """
        resolved: dict[str, Any] = {}
        matching = [o for o in self.overrides if o.matches(index, uuid, name)]
        for override in sorted(matching, key=lambda o: o.specificity):  # stable: list order kept
            resolved.update({k: getattr(override, k) for k in TUNING_KEYS if getattr(override, k) is not None})
        return self.model_copy(update={**resolved, "overrides": []})
