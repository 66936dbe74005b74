"""MIG in two tasks, per GPU: its mode (nvidia-smi -mig 0|1), then its layout (GPU instances by profile, each with
its default compute instance).

The mode is the driver's to take at the next GPU reset or reboot where the GPU is in use: until then it is
pending, a state like a driver installed that waits for its reboot (`pending_reasons`, and `apply --reboot`).
Hopper and later keep the mode only while the driver is loaded (NVIDIA's MIG user guide: no InfoROM bit), so a
reboot turns it off and the boot unit turns it on again: where that unit is not enabled, a mode found off is filed
under the unit's finding. The layout is made only once the mode is on; a different layout is destroyed first (compute instances, then
GPU instances), but never under running processes: that GPU is refused with the processes named. Every layout
is checked against the GPU's profiles and placements before anything changes (mig_fit.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from provision.capabilities.gpu import mig_facts
from provision.capabilities.gpu.boot import UNIT
from provision.capabilities.gpu.mig_fit import cgi_argument, fit
from provision.capabilities.gpu.mig_model import MigGpu
from provision.capabilities.gpu.mig_settings import layout_of
from provision.capabilities.gpu.model import GpuFacts
from provision.capabilities.gpu.modes import BOOT_UNIT_CHECK
from provision.capabilities.gpu.settings import GpuSettings
from provision.capabilities.gpu.tasks import GPUS, GpuSettingTask, on_off, read_back, smi, wanted_per_gpu
from provision.capabilities.gpu.tuning import Refused, compute_capability
from provision.core.facts import UnitRef
from provision.core.plan import FAILED, OK, Change, Item, Plan

if TYPE_CHECKING:  # types only
    from provision.capabilities.host import HostFacts
    from provision.inventory.model import Host

MODE_KEY = "nvidia.mig_mode"  # the column of nvidia.gpus the mode task sets (mig.mode.current/pending)
PLANS_FROM = GPUS | {MODE_KEY, "mig"}
PENDING = "pending a GPU reset or reboot (apply --reboot)"
# verify's check of the layout (checks_mig.py): the layout task's changes are filed under it, one finding per cause.
LAYOUT_CHECK = "mig_layout_is_as_the_inventory_says"


def modes(gpu: GpuFacts) -> tuple[bool | None, bool | None]:
    """MIG mode (current, pending) as --query-gpu's mig.mode.current/pending read; None where the GPU has no MIG
    ("[N/A]") or the driver does not know the field."""
    return gpu.mig_mode, gpu.mig_pending


def mig_smi(gpu: GpuFacts, *args: str) -> list[str]:
    """An `nvidia-smi mig` command for one GPU: the subcommand comes first, then its -i (nvidia-smi mig -h)."""
    return ["nvidia-smi", "mig", "-i", gpu.uuid, *args]


def mig_gpu(facts: HostFacts, gpu: GpuFacts) -> MigGpu | None:
    return facts.mig.gpus.get(gpu.index) if facts.mig is not None else None


def layout_words(layout: list[str]) -> str:
    return ", ".join(layout) if layout else "no GPU instances"


class MigTask(GpuSettingTask):
    tags = frozenset({"gpu", "mig"})
    setting = "mig"
    plans_from = PLANS_FROM

    def fact_sections(self, host: Host) -> list[str]:
        """The MIG listings, where the gpu block or an override sets mig (else apply reads none of them)."""
        block = host.settings.gpu
        asks = block is not None and any(o.mig is not None for o in (block, *block.overrides))
        return list(mig_facts.SECTION_NAMES) if asks else []


class MigMode(MigTask):
    """MIG mode per GPU: on for a layout, off for "disabled"; pending until the GPU is reset or the host reboots."""

    name = "gpu-mig-mode"
    alters = frozenset({MODE_KEY, "mig"})

    def plan_with(self, host: Host, facts: HostFacts, gpu_settings: GpuSettings) -> Plan:
        plan = Plan()
        for gpu, want in wanted_per_gpu(host, facts, gpu_settings, self.setting, plan):
            layout = layout_of(want)
            current, pending = modes(gpu)
            if layout is not None:
                try:
                    fit(gpu, mig_gpu(facts, gpu), layout)  # an input error before anything changes, here or elsewhere
                except Refused as exc:
                    plan.problems.append(str(exc))
                    continue
            on = layout is not None
            if pending is None:  # no MIG on this GPU: "disabled" holds; a layout was refused above
                continue
            if pending == on:
                after = on_off(on) if current == on else f"{on_off(on)}, {PENDING}"
                plan.unchanged.append(Item(gpu.label, OK, "MIG mode", after=after))
                continue
            refused = _in_use(gpu, mig_gpu(facts, gpu))
            if refused and not on:
                plan.refused.append(Item(gpu.label, FAILED, "MIG mode", on_off(current), on_off(on), message=refused))
                continue
            plan.changes.append(Change(
                target=gpu.label, what="MIG mode", before=on_off(current), after=on_off(on),
                commands=[*([] if on else _destroy(gpu, mig_gpu(facts, gpu))), smi(gpu, "-mig", "1" if on else "0")],
                cause=_lost_at_boot(facts, gpu, on),
                verify=lambda f, uuid=gpu.uuid, on=on: _check_mode(f, uuid, on)))
        return plan


def _lost_at_boot(facts: HostFacts, gpu: GpuFacts, on: bool) -> str:
    """The boot unit's finding where a Hopper-or-later GPU's MIG mode reads off for want of it (the driver lost it
    at the last load and no enabled unit turned it on again); else '' (the mode task's own finding)."""
    cc = compute_capability(gpu)
    if not on or cc is None or cc < (9, 0):
        return ""  # Ampere keeps MIG mode in the InfoROM: a reboot does not turn it off
    return "" if facts.units.get(UnitRef(UNIT).key) == "enabled" else BOOT_UNIT_CHECK


class MigLayout(MigTask):
    """The GPU instances of each GPU whose MIG mode is on, as the inventory lists their profiles."""

    name = "gpu-mig-layout"
    alters = frozenset({"mig"})

    def plan_with(self, host: Host, facts: HostFacts, gpu_settings: GpuSettings) -> Plan:
        plan = Plan()
        for gpu, want in wanted_per_gpu(host, facts, gpu_settings, self.setting, plan):
            layout = layout_of(want)
            current, pending = modes(gpu)
            if layout is None or pending is None:
                continue  # "disabled", or no MIG here (the mode task refuses a layout there)
            if not current:
                waits = PENDING if pending else "MIG mode off (the gpu-mig-mode task turns it on)"
                plan.unchanged.append(Item(gpu.label, OK, "MIG layout", after=f"{layout_words(layout)}: waits, {waits}"))
                continue
            mig = mig_gpu(facts, gpu)
            try:
                placed = fit(gpu, mig, layout)
            except Refused as exc:
                plan.problems.append(str(exc))
                continue
            have = mig.layout() if mig else []
            if _same(mig, layout):
                plan.unchanged.append(Item(gpu.label, OK, "MIG layout", after=layout_words(layout)))
                continue
            refused = _in_use(gpu, mig)
            if refused:
                plan.refused.append(Item(gpu.label, FAILED, "MIG layout", layout_words(have), layout_words(layout),
                                         message=refused, cause=LAYOUT_CHECK))
                continue
            create = [mig_smi(gpu, "-cgi", cgi_argument(placed), "-C")] if placed else []
            plan.changes.append(Change(
                target=gpu.label, what="MIG layout", before=layout_words(have), after=layout_words(layout),
                commands=[*_destroy(gpu, mig), *create], cause=LAYOUT_CHECK,
                verify=lambda f, uuid=gpu.uuid, layout=layout: _check_layout(f, uuid, layout)))
        return plan


def _same(mig: MigGpu | None, layout: list[str]) -> bool:
    """The GPU has these GPU instances (in any order), each with its one default compute instance."""
    have = mig.layout() if mig else []
    return sorted(have) == sorted(layout) and not (mig and mig.without_default_compute())


def _destroy(gpu: GpuFacts, mig: MigGpu | None) -> list[list[str]]:
    """Compute instances, then GPU instances: the driver refuses to destroy a GPU instance that still has any.
    Only what exists (nvidia-smi fails on nothing to destroy)."""
    if mig is None:
        return []
    return ([mig_smi(gpu, "-dci")] if mig.compute_instances else []) + (
        [mig_smi(gpu, "-dgi")] if mig.gpu_instances else [])


def _in_use(gpu: GpuFacts, mig: MigGpu | None) -> str:
    """Why the GPU's instances must not be destroyed now; '' when nothing runs on it."""
    if mig is None or not mig.processes or not (mig.gpu_instances or mig.compute_instances):
        return ""
    return (f"left alone: processes use {gpu.label} ({'; '.join(mig.processes)}): destroying its MIG instances would "
            "kill them; stop them (drain the node) and run again")


def _check_mode(facts: HostFacts, uuid: str, on: bool) -> str | None:
    def wrong(gpu: GpuFacts) -> str | None:
        pending = modes(gpu)[1]
        return None if pending == on else f"{gpu.label} MIG mode (pending) reads {on_off(pending)}, not {on_off(on)}"
    return read_back(facts, uuid, wrong)


def _check_layout(facts: HostFacts, uuid: str, layout: list[str]) -> str | None:
    def wrong(gpu: GpuFacts) -> str | None:
        mig = mig_gpu(facts, gpu)
        if _same(mig, layout):
            return None
        return f"{gpu.label} MIG layout reads {layout_words(mig.layout() if mig else [])}, not {layout_words(layout)}"
    return read_back(facts, uuid, wrong)


def pending_reasons(host: Host, facts: HostFacts) -> list[str]:
    """Why the host waits for a reboot (Capability.pending): a GPU whose MIG mode waits for a reset."""
    return [f"{gpu.label} MIG mode {on_off(pending)} is pending (now {on_off(current)}): it takes effect at a GPU "
            "reset or reboot" for gpu in facts.nvidia.gpus
            for current, pending in [modes(gpu)] if pending is not None and current is not None and current != pending]
