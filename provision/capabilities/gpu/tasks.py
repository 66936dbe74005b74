"""GPU tuning tasks: persistence mode and power limit, per GPU.

GPUs are addressed by UUID in commands (enumeration order may change across
reboots) and by index in reports (what people read in nvidia-smi). Which
settings a GPU gets is bound to its identity too (resolve_gpus): when the
GPUs differ from the last good run's record, an `index:` override keeps
meaning the GPU that had that index then, and is never moved onto another.
Every GPU present gets all that the inventory intends for it (the block's
values, and the overrides that name that card), whatever happened to the
others: a held override never takes a setting away from another card.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Iterator, TypeVar

from provision.capabilities.driver import packages as driver
from provision.capabilities.gpu import setter_words, tuning
from provision.capabilities.gpu import layout
from provision.capabilities.gpu.model import GpuFacts, RecordedGpu
from provision.capabilities.gpu.settings import GpuOverride, GpuSettings
from provision.core.settings import yaml_words
from provision.core.plan import FAILED, BlockTask, Change, FileWrite, Item, OK, Plan
from provision.capabilities.system.files import plan_file

if TYPE_CHECKING:  # types only
    from provision.capabilities.host import HostFacts
    from provision.inventory.model import Host

Target = TypeVar("Target")  # what a wanted value resolves to on one GPU (tuning.py: watts, clocks, locks)

# What every GPU task plans from (Task.plans_from): the GPUs nvidia-smi lists, and what a driver not ready waits for.
GPUS = frozenset({"nvidia.gpus", "driver", "packages", "system"})

SETTING_WORDS = {"persistence": "persistence mode", "power_limit": "power limit", "clocks": "application clocks",
                 "locked_clocks": "locked clocks", "ecc": "ECC mode", "compute_mode": "compute mode",
                 "mig": "MIG"}


@dataclass
class HeldOverride:
    """An `index:` override left alone: the GPUs changed since the last good run, and the GPU it meant is
    not here (or the record had none at that index). It is reported; the GPU now at that index is not its
    card, and gets the block's values (and the overrides that name it) like any other."""

    override: GpuOverride
    meant: RecordedGpu | None  # the record's GPU at that index
    now: GpuFacts | None  # the GPU with that index now: the override would have moved onto this one
    change: layout.LayoutChange

    def message(self) -> str:
        fields = self.override.model_dump(exclude_none=True, exclude_defaults=True)
        written = yaml_words({"index": fields.pop("index"), **fields})  # as the inventory has it: selector first
        meant = (f"GPU{self.meant.index} of the last good run, {self.meant.uuid} at {self.meant.bus_id}, which is "
                 "not here" if self.meant else f"no GPU{self.override.index} of the last good run")
        moved = f"; not moved onto {self.now.uuid} at {self.now.bus_id}, GPU{self.now.index} now" if self.now else ""
        return (f"left alone: the override {written} meant {meant}{moved}. The GPUs changed ({self.change.summary()}): "
                "repair and run again, or select by `uuid:`, or accept the new layout with --accept-gpu-changes "
                "(index overrides then follow the new numbering)")


@dataclass
class Resolution:
    """Every GPU's settings on a host, and the overrides held back."""

    per_gpu: list[tuple[GpuFacts, GpuSettings]]
    held: list[HeldOverride]


def resolve_gpus(host: Host, facts: HostFacts) -> Resolution:
    """Each GPU's settings, bound to its UUID: the block's values plus the overrides that name that card. With
    an unaccepted layout change, an `index:` override names the GPU that had that index in the record,
    wherever it is now (a GPU the record lacks is named by no `index:` override); when that GPU is missing,
    the override is held (reported, applied to no card). The GPU now at that index keeps the block's values
    and its own overrides: a missing card never leaves another with less than its intended caps."""
    gpu_settings, gpus = host.settings.gpu or GpuSettings(), facts.nvidia.gpus  # no block: nothing for any GPU
    change = None if layout.ACCEPT_GPU_CHANGES.set_for(host) else layout.compare(facts.gpu_layout, facts.nvidia)
    if not change:
        return Resolution([(g, gpu_settings.for_gpu(g.index, g.uuid, g.name)) for g in gpus], [])
    record = facts.gpu_layout or []  # a change is against a record
    recorded = {r.uuid.lower(): r for r in record}
    by_index = {r.index: r for r in record}
    held = []
    for override in gpu_settings.overrides:
        if override.index is None:
            continue
        meant = by_index.get(override.index)
        if meant is None or meant.uuid.lower() not in {g.uuid.lower() for g in gpus}:
            now = next((g for g in gpus if g.index == override.index), None)
            held.append(HeldOverride(override, meant, now, change))
    per_gpu = []
    for gpu in gpus:
        was = recorded.get(gpu.uuid.lower())
        per_gpu.append((gpu, gpu_settings.for_gpu(was.index if was else None, gpu.uuid, gpu.name)))
    return Resolution(per_gpu, held)


class GpuTask(BlockTask[GpuSettings]):
    """A task of the gpu block."""

    settings_blocks = frozenset({"gpu"})


class GpuSettingTask(GpuTask):
    """A task of one provision_gpu setting, GPU by GPU: skipped, naming the setting, where the host has no gpu
    block, or one that sets it for no GPU (wanted_per_gpu)."""

    setting: ClassVar[str]  # a GpuSettings field: "power_limit"

    def not_set(self, block: str) -> str:
        return f"provision_gpu.{self.setting} not set"


def wanted_per_gpu(host: Host, facts: HostFacts, gpu_settings: GpuSettings, setting: str,
                   plan: Plan) -> Iterator[tuple[GpuFacts, Any]]:  # Any: the type of the GpuSettings field
    """Yield (gpu, wanted value) for every GPU whose resolved settings set `setting`.

    Sets plan.skipped when nothing asks for it, plan.failed when the host
    cannot be tuned (no driver, no GPU visible); a held override that sets it
    is a refused (failed) item.
    """
    if not _asks_for(gpu_settings, setting):
        plan.skipped = f"provision_gpu.{setting} not set"
        return
    if facts.nvidia.state != "ok":
        cannot_use_gpus(plan, host, facts, f"provision_gpu.{setting} is set but ")
        return
    resolution = resolve_gpus(host, facts)
    for held in resolution.held:
        if getattr(held.override, setting) is not None:
            plan.refused.append(Item(f"GPU{held.override.index}", FAILED, SETTING_WORDS[setting],
                                     message=held.message(), cause="every_gpu_of_the_last_good_run_is_here"))
    for gpu, settings in resolution.per_gpu:
        want = getattr(settings, setting)
        if want is not None:
            yield gpu, want


def targets_per_gpu(host: Host, facts: HostFacts, gpu_settings: GpuSettings, setting: str, plan: Plan,
                    resolve: Callable[[GpuFacts, Any], Target]) -> Iterator[tuple[GpuFacts, Target]]:
    """Like wanted_per_gpu, each wanted value resolved against its GPU by resolve(gpu, want) (tuning.py);
    a value the GPU refuses becomes a plan problem (an input error: the run stops before any change)."""
    for gpu, want in wanted_per_gpu(host, facts, gpu_settings, setting, plan):
        try:
            yield gpu, resolve(gpu, want)
        except tuning.Refused as exc:
            plan.problems.append(str(exc))


def smi(gpu: GpuFacts, *args: str) -> list[str]:
    """An nvidia-smi setter for one GPU, addressed by UUID (indexes may change across reboots)."""
    return ["nvidia-smi", "-i", gpu.uuid, *args]


def one_call_for_every_gpu(changes: list[Change], facts: HostFacts) -> list[Change]:
    """Setters that give every GPU of the host the same value as ONE nvidia-smi call without -i, which applies a
    setter to every GPU (its help gives -i "a specific GPU": a list of GPUs is not relied on for setters). Each
    GPU keeps its change, its item and its own check on the re-read; an nvidia-smi start is the costly part of a
    setter (NVML's initialisation, on every GPU). Anything else (a GPU lost, one left out, a value of its own,
    a setter with more to it) stays one call per GPU."""
    gpus = facts.nvidia.gpus
    if len(changes) < 2 or facts.nvidia.lost or len(changes) != len(gpus):
        return changes
    if any(len(c.commands) != 1 or c.commands[0][:2] != ["nvidia-smi", "-i"] for c in changes):
        return changes
    if {c.commands[0][2] for c in changes} != {g.uuid for g in gpus} or len({
            tuple(c.commands[0][3:]) for c in changes}) != 1:
        return changes
    first = changes[0]
    first.commands = [["nvidia-smi", *first.commands[0][3:]]]
    for change in changes[1:]:
        change.commands, change.runs_with = [], first
    return changes


def _asks_for(gpu_settings: GpuSettings, setting: str) -> bool:
    if getattr(gpu_settings, setting) is not None:
        return True
    return any(getattr(o, setting, None) is not None for o in gpu_settings.overrides)


def cannot_use_gpus(plan: Plan, host: Host, facts: HostFacts, said: str) -> None:
    """Why the GPUs cannot be used now, in words that say what to do. The driver the inventory pins, not
    installed or not loaded yet, is a state, not a failure: the task waits (plan.skipped), the host says its
    reboot is pending, and verify's driver checks report it (one cause). Else plan.failed: nvidia-smi's state."""
    waiting = driver.what_the_gpus_wait_for(host.settings.driver, facts)
    if waiting:
        plan.skipped = f"{said}the GPUs wait for {waiting}"
        return
    state, message = facts.nvidia.state, facts.nvidia.message
    plan.failed_check = "nvidia_smi_reads_the_gpus"  # verify's finding: as_intended files this one under it
    plan.failed = said + {
        "missing": "nvidia-smi is not installed: install the NVIDIA driver first",
        "no-devices": "nvidia-smi found no GPU (fallen off the bus? see dmesg for Xid 79)",
    }.get(state, f"nvidia-smi failed: {message}")


def find_gpu(facts: HostFacts, uuid: str) -> GpuFacts | None:
    return next((g for g in facts.nvidia.gpus if g.uuid == uuid), None)


def read_back(facts: HostFacts, uuid: str, wrong: Callable[[GpuFacts], str | None]) -> str | None:
    """A setter's read-back (Change.verify): what is wrong with the GPU of this UUID on the facts read again
    (wrong(gpu)), or that it is gone."""
    gpu = find_gpu(facts, uuid)
    return f"GPU {uuid} disappeared" if gpu is None else wrong(gpu)


def unless_persistent(facts: HostFacts, gpu: GpuFacts) -> str:
    """Why a setting read back unchanged, when the likely cause is an unloaded driver."""
    if gpu.persistence is False and not facts.nvidia.persistenced_running:
        return ("; persistence mode is off, so the driver unloaded when nvidia-smi exited and forgot it: "
                "turn persistence on first (provision_gpu.persistence: true, or `provision persistence on`)")
    return ""


def on_off(value: bool | None) -> str:
    return {True: "Enabled", False: "Disabled", None: "N/A"}[value]


PACKAGED_UNITS = ("/lib/systemd/system/nvidia-persistenced.service", "/usr/lib/systemd/system/nvidia-persistenced.service")
DAEMON_DROPIN = "/etc/systemd/system/nvidia-persistenced.service.d/provision.conf"
DROPIN_TEXT = """\
# Managed by provision: the packaged unit starts the daemon with --no-persistence-mode,
# which keeps persistence off; the inventory says provision_gpu.persistence: true.
[Service]
ExecStart=
ExecStart={exec_start}
"""


class Persistence(GpuSettingTask):
    """Persistence mode: the driver stays loaded, so the other settings are not lost between jobs.

    Where nvidia-persistenced is installed it is the mechanism (NVIDIA calls
    `nvidia-smi -pm` legacy and the 580 driver logs it as deprecated); `-pm`
    is the fallback, and also turns persistence off. Ubuntu's packaged unit
    is static and runs the daemon with --no-persistence-mode: a drop-in
    removes that flag (the boot unit's Wants= starts the daemon at boot).
    """

    name = "gpu-persistence"
    tags = frozenset({"gpu", "persistence"})
    setting = "persistence"
    plans_from = GPUS | {"nvidia.persistence", "nvidia.persistenced"}
    alters = frozenset({"nvidia.persistence", "nvidia.persistenced"})

    def file_paths(self, host: Host) -> list[str]:
        return [*PACKAGED_UNITS, DAEMON_DROPIN] if host.settings.gpu is not None else []

    def plan_with(self, host: Host, facts: HostFacts, gpu_settings: GpuSettings) -> Plan:
        plan = Plan()
        to_change: list[tuple[GpuFacts, bool]] = []
        wanted = list(wanted_per_gpu(host, facts, gpu_settings, self.setting, plan))
        for gpu, want in wanted:
            if gpu.persistence == want:
                plan.unchanged.append(Item(gpu.label, OK, "persistence mode", after=on_off(want)))
            else:
                to_change.append((gpu, want))
        turning_on = [g for g, w in to_change if w]
        wants_on = any(w for _, w in wanted)
        dropin = _daemon_dropin(facts) if wants_on else None
        daemon = facts.nvidia.persistenced_path
        running = facts.nvidia.persistenced_running
        restarted = dropin is not None and facts.system.systemd_running  # the drop-in's restart (re)starts it
        if dropin:
            if restarted:  # else the start or -pm below turns the GPUs on, and checks it
                dropin.verify = lambda f, uuids=[g.uuid for g in turning_on]: _check_persistence(f, uuids, True)
            plan.changes.append(dropin)
        # Installed, the daemon is how persistence is kept: a stopped one is started even where the GPUs still
        # say Enabled (an earlier -pm 1): the next driver load would lose them without it. One already running
        # with --no-persistence-mode and no systemd to restart it keeps running: -pm 1 (through it) turns them on.
        if daemon and wants_on and (restarted or not running):
            if not restarted:
                plan.changes.append(Change(
                    target="host", what="nvidia-persistenced", before="stopped", after="running",
                    commands=[["systemctl", "start", "nvidia-persistenced"] if facts.system.systemd_running
                              else [daemon]],
                    verify=lambda f, uuids=[g.uuid for g in turning_on]: (
                        _check_persistence(f, uuids, True)
                        or (None if f.nvidia.persistenced_running else "nvidia-persistenced is not running")),
                ))
            to_change = [(g, w) for g, w in to_change if not w]
        plan.changes += one_call_for_every_gpu([Change(
            target=gpu.label, what="persistence mode",
            before=on_off(gpu.persistence), after=on_off(want),
            commands=[smi(gpu, "-pm", "1" if want else "0")], explain=setter_words.explain,
            verify=lambda f, uuid=gpu.uuid, want=want: _check_persistence(f, [uuid], want),
        ) for gpu, want in to_change], facts)
        return plan


def _daemon_dropin(facts: HostFacts) -> Change | None:
    """The drop-in change when the packaged unit turns persistence off and no up-to-date drop-in fixes it."""
    for path in PACKAGED_UNITS:
        unit = facts.files.get(path)
        text = (unit.text if unit else None) or ""
        exec_start = next((line.partition("=")[2].strip() for line in text.splitlines()
                           if line.startswith("ExecStart=") and "--no-persistence-mode" in line), None)
        if exec_start:
            fixed = " ".join(w for w in exec_start.split() if w != "--no-persistence-mode")
            change, _ = plan_file(FileWrite(DAEMON_DROPIN, DROPIN_TEXT.format(exec_start=fixed)),
                                  facts.files.get(DAEMON_DROPIN))
            if change and facts.system.systemd_running:
                change.after_write += [["systemctl", "daemon-reload"], ["systemctl", "restart", "nvidia-persistenced"]]
            return change
    return None


def _check_persistence(facts: HostFacts, uuids: list[str], want: bool) -> str | None:
    def wrong(gpu: GpuFacts) -> str | None:
        return None if gpu.persistence == want else f"{gpu.label} persistence mode still {on_off(gpu.persistence)}"
    return next((said for uuid in uuids if (said := read_back(facts, uuid, wrong))), None)


def watts(value: float | None) -> str:
    return "N/A" if value is None else f"{value:.2f} W"


class PowerLimit(GpuSettingTask):
    """Software power limit per GPU, within the GPU's own min..max; `default` restores the default."""

    name = "gpu-power-limit"
    tags = frozenset({"gpu", "power"})
    setting = "power_limit"
    plans_from = GPUS | {"nvidia.power_limit"}
    alters = frozenset({"nvidia.power_limit"})

    def plan_with(self, host: Host, facts: HostFacts, gpu_settings: GpuSettings) -> Plan:
        plan = Plan()
        for gpu, target in targets_per_gpu(host, facts, gpu_settings, self.setting, plan, tuning.power_target):
            if gpu.power_limit is not None and abs(gpu.power_limit - target) < 0.5:
                plan.unchanged.append(Item(gpu.label, OK, "power limit", after=watts(target)))
                continue
            plan.changes.append(Change(
                target=gpu.label, what="power limit",
                before=watts(gpu.power_limit), after=watts(target),
                commands=[smi(gpu, "-pl", f"{target:g}")], explain=setter_words.explain,
                verify=lambda f, uuid=gpu.uuid, target=target: _check_power(f, uuid, target),
            ))
        plan.changes = one_call_for_every_gpu(plan.changes, facts)
        return plan


def _check_power(facts: HostFacts, uuid: str, target: float) -> str | None:
    def wrong(gpu: GpuFacts) -> str | None:
        if gpu.power_limit is not None and abs(gpu.power_limit - target) < 0.5:
            return None
        return f"{gpu.label} power limit reads {watts(gpu.power_limit)}, not {watts(target)}{unless_persistent(facts, gpu)}"
    return read_back(facts, uuid, wrong)
