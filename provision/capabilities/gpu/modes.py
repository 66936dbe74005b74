"""A GPU's modes: ECC mode and compute mode, per GPU.

ECC mode (`nvidia-smi -e 0|1`) is stored by the driver and taken at the next reboot or GPU reset; until then
nvidia-smi reports it as pending (ecc.mode.pending differs from ecc.mode.current). A GPU whose ECC mode is
pending is a state, not a failure: like a driver installed that loads at the next boot, the run says the host's
reboot is pending (`reboot_pending`, the exit bit for it) and `apply --reboot` brings it into effect. Once
taken, the mode persists across reboots by itself: the boot unit does not set it.

Compute mode (`nvidia-smi -c`) is lost at every reboot: the boot file sets it again (boot.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from provision.capabilities.gpu import setter_words, tuning
from provision.capabilities.gpu.boot import UNIT
from provision.capabilities.gpu.model import GpuFacts
from provision.capabilities.gpu.settings import GpuSettings
from provision.capabilities.gpu.tasks import (GPUS, GpuSettingTask, on_off, one_call_for_every_gpu, read_back, smi,
                                              targets_per_gpu, unless_persistent)
from provision.core.facts import UnitRef
from provision.core.plan import OK, Change, Item, Plan

if TYPE_CHECKING:  # types only
    from provision.capabilities.host import HostFacts
    from provision.inventory.model import Host

ECC = "nvidia.ecc"  # every GPU's ECC mode, current and pending (a fact key: a column of nvidia.gpus)
COMPUTE_MODE = "nvidia.compute_mode"
AT_REBOOT = "the next reboot or GPU reset"
# The shipped playbooks' task that enables the boot unit (playbooks/gpu.yaml, site.yaml): verify's finding for it.
BOOT_UNIT_CHECK = "as_intended[gpu-boot-unit]"


def ecc_waits(gpu: GpuFacts) -> bool:
    """Whether this GPU's ECC mode changes at the next reboot or GPU reset."""
    return gpu.ecc_pending is not None and gpu.ecc_enabled is not None and gpu.ecc_pending != gpu.ecc_enabled


def ecc_words(gpu: GpuFacts) -> str:
    """ "Disabled, Enabled at the next reboot or GPU reset", or "Enabled" where nothing is pending."""
    now = on_off(gpu.ecc_enabled)
    return f"{now}, {on_off(gpu.ecc_pending)} at {AT_REBOOT}" if ecc_waits(gpu) else now


def ecc_pending(facts: HostFacts) -> list[str]:
    """The GPUs whose ECC mode waits for a reboot, in words: [] when none does."""
    if facts.nvidia.state != "ok":
        return []
    return [f"{gpu.label} ECC mode {ecc_words(gpu)}" for gpu in facts.nvidia.gpus if ecc_waits(gpu)]


def reboot_pending(host: Host, facts: HostFacts) -> list[str]:
    """Why this host waits for a reboot after a run (Capability.pending): a GPU's ECC mode pending."""
    return ecc_pending(facts)


class EccMode(GpuSettingTask):
    """ECC mode per GPU (nvidia-smi -e): set now, in effect at the next reboot or GPU reset; pending until then."""

    name = "gpu-ecc"
    tags = frozenset({"gpu", "ecc"})
    setting = "ecc"
    plans_from = GPUS | {ECC}
    alters = frozenset({ECC})

    def plan_with(self, host: Host, facts: HostFacts, gpu_settings: GpuSettings) -> Plan:
        plan = Plan()
        changes = []
        for gpu, want in targets_per_gpu(host, facts, gpu_settings, self.setting, plan, tuning.ecc_target):
            if gpu.ecc_enabled == want and not ecc_waits(gpu):
                plan.unchanged.append(Item(gpu.label, OK, "ECC mode", after=on_off(want)))
            elif gpu.ecc_pending == want:  # set already: the reboot the run reports as pending brings it
                plan.unchanged.append(Item(gpu.label, OK, "ECC mode", after=ecc_words(gpu)))
            else:
                after = on_off(want) if gpu.ecc_enabled == want else f"{on_off(gpu.ecc_enabled)}, {on_off(want)} at {AT_REBOOT}"
                changes.append(Change(
                    target=gpu.label, what="ECC mode", before=ecc_words(gpu), after=after,
                    commands=[smi(gpu, "-e", "1" if want else "0")], explain=setter_words.explain,
                    verify=lambda f, uuid=gpu.uuid, want=want: _check_ecc(f, uuid, want)))
        plan.changes = one_call_for_every_gpu(changes, facts)
        return plan




def _check_ecc(facts: HostFacts, uuid: str, want: bool) -> str | None:
    def wrong(gpu: GpuFacts) -> str | None:
        will_be = gpu.ecc_pending if gpu.ecc_pending is not None else gpu.ecc_enabled
        return None if will_be == want else \
            f"{gpu.label} ECC mode reads {ecc_words(gpu)}, not {on_off(want)} at {AT_REBOOT}"
    return read_back(facts, uuid, wrong)


class ComputeMode(GpuSettingTask):
    """Compute mode per GPU (nvidia-smi -c): lost at every reboot, set again by the boot unit."""

    name = "gpu-compute-mode"
    tags = frozenset({"gpu", "compute-mode"})
    setting = "compute_mode"
    plans_from = GPUS | {COMPUTE_MODE}
    alters = frozenset({COMPUTE_MODE})

    def plan_with(self, host: Host, facts: HostFacts, gpu_settings: GpuSettings) -> Plan:
        plan = Plan()
        changes = []
        # A reboot resets it: where the boot unit is not enabled, that is the cause (verify files it there). Its
        # state is the one the playbook's service task reads (a unit of its own here would be read twice).
        cause = "" if facts.units.get(UnitRef(UNIT).key) == "enabled" else BOOT_UNIT_CHECK
        for gpu, want in targets_per_gpu(host, facts, gpu_settings, self.setting, plan, tuning.compute_mode_target):
            if gpu.compute_mode == want:
                plan.unchanged.append(Item(gpu.label, OK, "compute mode", after=want))
                continue
            changes.append(Change(
                target=gpu.label, what="compute mode", before=gpu.compute_mode or "N/A", after=want,
                commands=[smi(gpu, "-c", tuning.COMPUTE_MODE_ARG[want])], explain=setter_words.explain, cause=cause,
                verify=lambda f, uuid=gpu.uuid, want=want: _check_compute_mode(f, uuid, want)))
        plan.changes = one_call_for_every_gpu(changes, facts)
        return plan


def _check_compute_mode(facts: HostFacts, uuid: str, want: str) -> str | None:
    return read_back(facts, uuid, lambda gpu: None if gpu.compute_mode == want else
                     f"{gpu.label} compute mode reads {gpu.compute_mode or 'N/A'}, not {want}"
                     f"{unless_persistent(facts, gpu)}")
