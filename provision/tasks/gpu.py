"""GPU tuning tasks: persistence mode and power limit, per GPU.

GPUs are addressed by UUID in commands (enumeration order may change across
reboots) and by index in reports (what people read in nvidia-smi).
"""

from __future__ import annotations

from typing import Iterator

from provision import tuning
from provision.facts.model import GpuFacts, HostFacts
from provision.tasks.base import Change, Item, OK, Plan, Task


def wanted_per_gpu(host, facts: HostFacts, setting: str, plan: Plan) -> Iterator[tuple[GpuFacts, object]]:
    """Yield (gpu, wanted value) for every GPU whose resolved settings set `setting`.

    Sets plan.skipped when nothing asks for it, plan.failed when the host
    cannot be tuned (no driver, no GPU visible).
    """
    gpu_settings = host.settings.gpu
    if gpu_settings is None or not _asks_for(gpu_settings, setting):
        plan.skipped = f"gpu.{setting} not set"
        return
    nvidia = facts.nvidia
    if nvidia.state != "ok":
        plan.failed = f"gpu.{setting} is set but {why_unusable(nvidia.state, nvidia.message)}"
        return
    for gpu in nvidia.gpus:
        want = getattr(gpu_settings.for_gpu(gpu.index, gpu.uuid, gpu.name), setting)
        if want is not None:
            yield gpu, want


def _asks_for(gpu_settings, setting: str) -> bool:
    if getattr(gpu_settings, setting) is not None:
        return True
    return any(getattr(o, setting, None) is not None for o in gpu_settings.overrides)


def why_unusable(state: str, message: str) -> str:
    return {
        "missing": "nvidia-smi is not installed: install the NVIDIA driver first",
        "no-devices": "nvidia-smi found no GPU (fallen off the bus? see dmesg for Xid 79)",
    }.get(state, f"nvidia-smi failed: {message}")


def find_gpu(facts: HostFacts, uuid: str) -> GpuFacts | None:
    return next((g for g in facts.nvidia.gpus if g.uuid == uuid), None)


def on_off(value: bool | None) -> str:
    return {True: "Enabled", False: "Disabled", None: "N/A"}[value]


class Persistence(Task):
    """Persistence mode: the driver stays loaded, so the other settings are not lost between jobs.

    Where nvidia-persistenced is installed it is the mechanism (NVIDIA calls
    `nvidia-smi -pm` legacy and the 580 driver logs it as deprecated); `-pm`
    is the fallback, and also turns persistence off.
    """

    name = "gpu-persistence"
    tags = frozenset({"gpu", "persistence"})

    def plan(self, host, facts):
        plan = Plan()
        to_change: list[tuple[GpuFacts, bool]] = []
        for gpu, want in wanted_per_gpu(host, facts, "persistence", plan):
            if gpu.persistence == want:
                plan.unchanged.append(Item(gpu.label, OK, "persistence mode", after=on_off(want)))
            else:
                to_change.append((gpu, want))
        daemon = facts.nvidia.persistenced_path
        start_daemon = daemon and not facts.nvidia.persistenced_running and any(w for _, w in to_change)
        if start_daemon:
            turning_on = [g for g, w in to_change if w]
            command = (["systemctl", "enable", "--now", "nvidia-persistenced"]
                       if facts.system.systemd_running else [daemon])
            plan.changes.append(Change(
                target="host", what="nvidia-persistenced",
                before="stopped", after="running",
                commands=[command],
                verify=lambda f, uuids=[g.uuid for g in turning_on]: _check_persistence(f, uuids, True),
            ))
            to_change = [(g, w) for g, w in to_change if not w]
        for gpu, want in to_change:
            plan.changes.append(Change(
                target=gpu.label, what="persistence mode",
                before=on_off(gpu.persistence), after=on_off(want),
                commands=[["nvidia-smi", "-i", gpu.uuid, "-pm", "1" if want else "0"]],
                verify=lambda f, uuid=gpu.uuid, want=want: _check_persistence(f, [uuid], want),
            ))
        return plan


def _check_persistence(facts: HostFacts, uuids: list[str], want: bool) -> str | None:
    for uuid in uuids:
        gpu = find_gpu(facts, uuid)
        if gpu is None:
            return f"GPU {uuid} disappeared"
        if gpu.persistence != want:
            return f"{gpu.label} persistence mode still {on_off(gpu.persistence)}"
    return None


def watts(value: float | None) -> str:
    return "N/A" if value is None else f"{value:.2f} W"


class PowerLimit(Task):
    """Software power limit per GPU, within the GPU's own min..max; `default` restores the default."""

    name = "gpu-power-limit"
    tags = frozenset({"gpu", "power"})

    def plan(self, host, facts):
        plan = Plan()
        for gpu, want in wanted_per_gpu(host, facts, "power_limit", plan):
            try:
                target = tuning.power_target(gpu, want)
            except tuning.Refused as exc:
                plan.problems.append(str(exc))
                continue
            if abs(gpu.power_limit - target) < 0.5:
                plan.unchanged.append(Item(gpu.label, OK, "power limit", after=watts(target)))
                continue
            plan.changes.append(Change(
                target=gpu.label, what="power limit",
                before=watts(gpu.power_limit), after=watts(target),
                commands=[["nvidia-smi", "-i", gpu.uuid, "-pl", f"{target:g}"]],
                verify=lambda f, uuid=gpu.uuid, target=target: _check_power(f, uuid, target),
            ))
        return plan


def _check_power(facts: HostFacts, uuid: str, target: float) -> str | None:
    gpu = find_gpu(facts, uuid)
    if gpu is None:
        return f"GPU {uuid} disappeared"
    if gpu.power_limit is None or abs(gpu.power_limit - target) >= 0.5:
        return f"{gpu.label} power limit reads {watts(gpu.power_limit)}, not {watts(target)}"
    return None
