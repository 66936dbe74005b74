"""verify on the modes: an ECC mode pending is one finding with the reboot that takes it; a compute mode a reboot
reset where the boot unit is not enabled is filed under the unit's finding, one cause."""

from __future__ import annotations

from builders.checks import checked_node, verdict
from builders.facts import facts
from builders.gpus import gpus

from provision.capabilities.gpu import checks
from provision.capabilities.gpu.boot import UNIT
from provision.capabilities.gpu.modes import BOOT_UNIT_CHECK, ComputeMode, EccMode
from provision.verify.as_intended import check_as_intended


def h100s(**values):
    return gpus(2, "H100", **{"ecc_enabled": True, "ecc_pending": True, "compute_mode": "default", **values})


def test_an_ecc_mode_pending_is_one_finding_with_the_reboot_that_takes_it():
    node = checked_node(facts(gpus=h100s(ecc_pending=False)), provision_gpu={"ecc": False})
    failed = verdict(checks.check_every_gpus_ecc_mode_is_in_effect, node)
    assert failed.found == ("reboot pending: GPU0 ECC mode Enabled, Disabled at the next reboot or GPU reset; "
                            "GPU1 ECC mode Enabled, Disabled at the next reboot or GPU reset")
    assert failed.fix == "provision apply basement.yaml --limit rig --reboot"
    assert failed.findings[0].remedy == "reset"  # a GPU reset takes a pending mode too (provision recover)
    assert verdict(check_as_intended, node, EccMode()) is None  # set: nothing for apply to change


def test_an_ecc_mode_in_effect_or_unknown_passes():
    assert verdict(checks.check_every_gpus_ecc_mode_is_in_effect,
                   checked_node(facts(gpus=h100s()), provision_gpu={"ecc": True})) is None
    no_ecc = gpus(1, "RTX 3090")  # "[N/A]": no ECC memory, nothing pending
    assert verdict(checks.check_every_gpus_ecc_mode_is_in_effect,
                   checked_node(facts(gpus=no_ecc), provision_gpu={"persistence": True})) is None
    assert verdict(checks.check_every_gpus_ecc_mode_is_in_effect, checked_node(facts(gpus=h100s()))) == \
        "skip: the inventory sets no gpu block for this host"


def test_a_drifted_ecc_mode_is_as_intendeds_finding():
    node = checked_node(facts(gpus=h100s()), provision_gpu={"ecc": False})
    [finding] = verdict(check_as_intended, node, EccMode()).findings
    assert (finding.expected, finding.found) == ("GPU0 ECC mode Enabled, Disabled at the next reboot or GPU reset, "
                                                 "GPU1 ECC mode Enabled, Disabled at the next reboot or GPU reset",
                                                 "GPU0 ECC mode Enabled; GPU1 ECC mode Enabled")


def test_a_compute_mode_reset_by_a_reboot_without_the_unit_is_filed_under_the_units_finding():
    node = checked_node(facts(gpus=h100s(), units={UNIT: "disabled"}),
                        provision_gpu={"compute_mode": "exclusive_process"})
    [finding] = verdict(check_as_intended, node, ComputeMode()).findings
    assert finding.because == (BOOT_UNIT_CHECK,)
    assert finding.found == "GPU0 compute mode default; GPU1 compute mode default"
    assert finding.fix == f"provision apply basement.yaml --limit rig (after a reboot: is {UNIT} enabled?)"


def test_with_the_unit_enabled_a_compute_mode_drift_is_a_cause_of_its_own():
    node = checked_node(facts(gpus=h100s(), units={UNIT: "enabled"}),
                        provision_gpu={"compute_mode": "exclusive_process"})
    [finding] = verdict(check_as_intended, node, ComputeMode()).findings
    assert finding.because == ()
    assert verdict(check_as_intended, checked_node(facts(gpus=h100s(compute_mode="exclusive_process")),
                                                   provision_gpu={"compute_mode": "exclusive_process"}),
                   ComputeMode()) is None
