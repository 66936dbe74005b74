"""A GPU's modes: ECC and MIG (each current, and pending until the GPU resets), compute mode (volatile), and what
brings pending modes into effect: a GPU reset (`nvidia-smi -r`) or a reboot. MIG mode follows the architecture
(models.Model.mig_in_inforom): Ampere keeps it in the InfoROM across reboots, Hopper and later keep it only while
the driver is loaded, so a reboot disables it. Real texts and figures: gpu_models.md, "Modes".

The record keys are newer than the state file format, so each is read with .get and the model's default:
ecc_on / ecc_pending (bool; None where the GPU has no ECC), mig_on / mig_pending (bool; None without MIG),
compute_mode (None: Default; volatile, see state.VOLATILE), gis (the MIG instances, mig.py)."""

from __future__ import annotations

from .apps import running
from .models import MODELS
from .state import reset_volatile

# -c's values as nvidia-smi's help lists them, and the words --query-gpu and -q print for each. EXCLUSIVE_THREAD (1)
# is deprecated and not simulated.
COMPUTE_MODES = {"0": "DEFAULT", "2": "PROHIBITED", "3": "EXCLUSIVE_PROCESS"}
COMPUTE_WORDS = {"DEFAULT": "Default", "PROHIBITED": "Prohibited", "EXCLUSIVE_PROCESS": "Exclusive_Process"}


def default_ecc(record: dict) -> bool | None:
    mode = MODELS[record["model"]].ecc_mode
    return None if mode is None else mode == "Enabled"


def ecc_on(record: dict) -> bool | None:
    return record.get("ecc_on", default_ecc(record))


def ecc_pending(record: dict) -> bool | None:
    return record.get("ecc_pending", ecc_on(record))


def mig_on(record: dict) -> bool | None:
    return record.get("mig_on", False if MODELS[record["model"]].mig else None)


def mig_pending(record: dict) -> bool | None:
    return record.get("mig_pending", mig_on(record))


def compute_mode(record: dict) -> str:
    """DEFAULT, PROHIBITED or EXCLUSIVE_PROCESS."""
    return record.get("compute_mode") or "DEFAULT"


def mode_word(flag: bool | None) -> str | None:
    """Enabled / Disabled, None (N/A) where the GPU has no such mode."""
    return None if flag is None else ("Enabled" if flag else "Disabled")


def held(record: dict, daemon: dict | None) -> bool:
    """Something holds the GPU open, so the driver cannot reset it: a process on it, or the persistence daemon
    (which keeps a handle on every GPU: NVIDIA/gpu-operator#118)."""
    return bool(running(record)) or daemon is not None


def mig_held(record: dict, daemon: dict | None) -> bool:
    """Whether a MIG mode change stays pending. Where it needs a reset (the InfoROM's mode, Ampere) whatever holds
    the GPU keeps it pending; since Hopper "enabling MIG mode no longer requires a GPU reset" (NVIDIA's MIG user
    guide), so the persistence daemon's handle does not, while a process on the GPU (its context) still does."""
    if MODELS[record["model"]].mig_in_inforom:
        return held(record, daemon)
    return bool(running(record))


def driver_unloaded(record: dict) -> None:
    """The driver unloads (a reboot): MIG mode that only the driver kept (Hopper and later: "an unload and reload
    of the driver kernel modules will disable MIG mode") is Disabled, a pending change with it; the InfoROM's
    stays (apply_pending brings a pending one in)."""
    model = MODELS[record["model"]]
    if model.mig and not model.mig_in_inforom:
        record.update(mig_on=False, mig_pending=False)


def apply_pending(record: dict) -> None:
    """A GPU reset: pending ECC and MIG modes take effect; MIG instances are gone (a reset destroys them)."""
    record["ecc_on"] = ecc_pending(record)
    record["mig_on"] = mig_pending(record)
    record["gis"] = []


def reset_gpu(record: dict) -> None:
    """What a reset does to a GPU: pending modes in effect, MIG instances gone, settings back to their defaults,
    volatile ECC and NVLink error counts back to 0, a row marked for remapping remapped."""
    apply_pending(record)
    reset_volatile(record)
    record.update(ecc_volatile=0, remap_pending=False, nvlink_errors={})
