"""GPU clock tasks: application clocks (-ac/-rac) and locked clocks (-lgc/-lmc/-lmcd and their resets).

Which GPUs take which setter is decided in tuning.py, at plan time: asking a
GeForce card for application clocks is an input error before any host is
touched, not a warning from nvidia-smi afterwards. Setters run with -eow so
that a warning nvidia-smi would "move on" from fails the change instead.

nvidia-smi cannot read locked clocks back, so provision records what it set
in /run/provision/gpu-clocks/<UUID> (tmpfs: gone at reboot, like the locks),
and plans against that record. The boot script writes the same record.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from provision.core import remote
from provision.capabilities.gpu import setter_words, tuning
from provision.capabilities.gpu.facts import clock_records_dir
from provision.capabilities.gpu.model import ClockPair, GpuFacts
from provision.capabilities.gpu.settings import GpuSettings
from provision.core.plan import Change, Item, OK, Plan
from provision.capabilities.gpu.tasks import (GPUS, GpuSettingTask, one_call_for_every_gpu, read_back, smi,
                                              targets_per_gpu, unless_persistent)

if TYPE_CHECKING:  # types only
    from provision.capabilities.host import HostFacts
    from provision.inventory.model import Host

LOCK_KEYS = ("sm", "mem", "mem_deferred")


class ApplicationClocks(GpuSettingTask):
    """provision_gpu.clocks: {mem, sm[, nearest]} -> nvidia-smi -ac MEM,SM; "default" -> -rac."""

    name = "gpu-clocks"
    tags = frozenset({"gpu", "clocks"})
    setting = "clocks"
    plans_from = GPUS | {"nvidia.app_clocks"}
    alters = frozenset({"nvidia.app_clocks"})

    def plan_with(self, host: Host, facts: HostFacts, gpu_settings: GpuSettings) -> Plan:
        plan = Plan()
        for gpu, (target, note) in targets_per_gpu(host, facts, gpu_settings, self.setting, plan,
                                                   tuning.app_clocks_target):
            if target is None:
                plan.unchanged.append(Item(gpu.label, OK, "application clocks", after=f"default ({note})"))
                continue
            now = ClockPair(gpu.app_clock_mem, gpu.app_clock_sm) if gpu.app_clock_mem and gpu.app_clock_sm else None
            reset = note == tuning.RESET_NOTE
            after = f"{target} ({'-rac' if reset else '-ac'}{', ' + note if note else ''})"
            if now == target:
                plan.unchanged.append(Item(gpu.label, OK, "application clocks", after=after))
                continue
            plan.changes.append(Change(
                target=gpu.label, what="application clocks", before=str(now) if now else "N/A", after=after,
                commands=[smi(gpu, "-eow", "-rac") if reset else smi(gpu, "-eow", "-ac", str(target))],
                explain=setter_words.explain,
                verify=lambda f, uuid=gpu.uuid, target=target: _check_app_clocks(f, uuid, target),
            ))
        plan.changes = one_call_for_every_gpu(plan.changes, facts)
        return plan


def _check_app_clocks(facts: HostFacts, uuid: str, target: ClockPair) -> str | None:
    def wrong(gpu: GpuFacts) -> str | None:
        now = f"{gpu.app_clock_mem},{gpu.app_clock_sm}"
        return None if now == str(target) else (f"{gpu.label} application clocks read {now}, not {target}"
                                                 f"{unless_persistent(facts, gpu)}")
    return read_back(facts, uuid, wrong)


class LockedClocks(GpuSettingTask):
    """provision_gpu.locked_clocks: {sm: [MIN, MAX], mem: [MIN, MAX]} -> -lgc / -lmc (Hopper: -lmcd); "default" resets."""

    name = "gpu-locked-clocks"
    tags = frozenset({"gpu", "clocks"})
    setting = "locked_clocks"
    plans_from = GPUS | {"nvidia.locked_clocks"}  # and the record of them it keeps
    alters = frozenset({"nvidia.locked_clocks"})

    def plan_with(self, host: Host, facts: HostFacts, gpu_settings: GpuSettings) -> Plan:
        plan = Plan()
        for gpu, locks in targets_per_gpu(host, facts, gpu_settings, self.setting, plan, tuning.locked_targets):
            differ = [lock for lock in locks if tuning.current_lock(gpu, lock.key) != lock.value]
            for lock in locks:
                if lock not in differ:
                    plan.unchanged.append(Item(gpu.label, OK, lock.words(), after=lock.value))
            if not differ:
                continue
            record = dict(gpu.locked, **{lock.key: lock.value for lock in locks})
            line = record_line(gpu.uuid, record)
            for lock in differ:
                plan.changes.append(Change(
                    target=gpu.label, what=lock.words(),
                    before=tuning.current_lock(gpu, lock.key), after=lock.value,
                    commands=[smi(gpu, "-eow", *lock.argv)], explain=setter_words.explain,
                ))
            # The record goes with the last change, after every setter of this GPU succeeded.
            plan.changes[-1].commands.append(remote.write_record_argv(clock_records_dir(), gpu.uuid, line))
            plan.changes[-1].verify = lambda f, uuid=gpu.uuid, record=record: _check_record(f, uuid, record)
        return plan


def record_line(uuid: str, record: dict[str, str]) -> str:
    """The record's one line: "UUID sm=MIN,MAX mem=default" (capabilities/gpu/smi.py parse_clock_records reads it)."""
    return " ".join([uuid, *(f"{key}={record[key]}" for key in LOCK_KEYS if key in record)])


def _check_record(facts: HostFacts, uuid: str, record: dict[str, str]) -> str | None:
    def wrong(gpu: GpuFacts) -> str | None:
        differs = {k: gpu.locked.get(k) for k, v in record.items() if gpu.locked.get(k) != v}
        return f"{gpu.label} clock record in {clock_records_dir()} reads {differs}" if differs else None
    return read_back(facts, uuid, wrong)
