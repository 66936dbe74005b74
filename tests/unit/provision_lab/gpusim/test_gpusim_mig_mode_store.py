"""Where a simulated GPU keeps its MIG mode, as NVIDIA's MIG user guide says per architecture
(../shared/reference/node-lifecycle-reference.md 5.1, 5.4): Ampere in the InfoROM (kept across reboots, a change
pending while anything holds the GPU, as a reset is needed), Hopper and later in the loaded driver (lost at a
reboot, in effect without a reset). The table has no Ampere MIG model, so one stands in: an H100 with the InfoROM's
mode. The Hopper side through nvidia-smi itself: test_gpusim_modes.py."""

from __future__ import annotations

import pytest

from provision_lab.gpusim import modes
from provision_lab.gpusim.models import MODELS

DAEMON = {"pid": 1}  # nvidia-persistenced's record: it holds a handle on every GPU


@pytest.fixture
def ampere(monkeypatch: pytest.MonkeyPatch) -> str:
    model = MODELS["h100-80gb-hbm3"]._replace(key="ampere-mig", architecture="Ampere", mig_in_inforom=True)
    monkeypatch.setitem(MODELS, model.key, model)
    return model.key


def record(model: str, **modes_: bool) -> dict:
    return {"model": model, **modes_}


def test_the_persistence_daemon_keeps_an_amperes_mig_change_pending_but_not_a_hoppers(ampere: str) -> None:
    assert modes.mig_held(record(ampere), DAEMON)
    assert not modes.mig_held(record("h100-80gb-hbm3"), DAEMON)
    assert not modes.mig_held(record(ampere), None)


@pytest.mark.parametrize(("model", "after"), [("ampere", True), ("h100-80gb-hbm3", False), ("h200", False)])
def test_mig_mode_after_a_reboot(ampere: str, model: str, after: bool) -> None:
    gpu = record(ampere if model == "ampere" else model, mig_on=True, mig_pending=True)
    modes.apply_pending(gpu)
    modes.driver_unloaded(gpu)
    assert (modes.mig_on(gpu), modes.mig_pending(gpu)) == (after, after)


def test_an_amperes_pending_enable_comes_in_at_the_reboot(ampere: str) -> None:
    gpu = record(ampere, mig_on=False, mig_pending=True)
    modes.apply_pending(gpu)
    modes.driver_unloaded(gpu)
    assert modes.mig_on(gpu) is True


def test_a_gpu_without_mig_keeps_no_mig_mode() -> None:
    gpu = record("v100-sxm2-16gb")
    modes.driver_unloaded(gpu)
    assert modes.mig_on(gpu) is None
