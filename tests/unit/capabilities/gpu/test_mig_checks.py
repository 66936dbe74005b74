"""verify's MIG checks, one finding per cause: a mode pending, instances gone, a layout drifted, an instance
without its compute instance; the layout task's changes filed under the layout's check."""

from __future__ import annotations

import pytest
from builders.checks import checked_node, verdict
from builders.facts import facts
from builders.mig import h200_gpu, h200_mig, mig_facts
from provision.capabilities.gpu import checks_mig
from provision.capabilities.gpu.boot import UNIT
from provision.capabilities.gpu.mig_model import MigFacts
from provision.capabilities.gpu.mig_tasks import LAYOUT_CHECK, MigLayout, MigMode
from provision.capabilities.gpu.modes import BOOT_UNIT_CHECK
from provision.verify.as_intended import check_as_intended

TWO = ["3g.71gb", "3g.71gb"]


def node(gpu=None, mig=None, layout=TWO):
    return checked_node(facts(gpus=[gpu or h200_gpu()], mig=mig_facts(mig or h200_mig(TWO))), provision_gpu={"mig": layout})


def test_the_layout_as_intended_passes():
    assert verdict(checks_mig.check_mig_layout_is_as_the_inventory_says, node()) is None
    assert verdict(checks_mig.check_no_gpus_mig_mode_is_pending, node()) is None


def test_instances_gone():
    failed = verdict(checks_mig.check_mig_layout_is_as_the_inventory_says, node(mig=h200_mig()))
    (finding,) = failed.findings
    assert finding.expected == "GPU0 MIG layout 3g.71gb, 3g.71gb"
    assert finding.found == "GPU0 has no GPU instance (gone, as after a reboot or a crash)"
    assert "provision-gpu-tuning.service makes them" in finding.fix and "--tags mig" in finding.fix


def test_a_layout_drifted():
    failed = verdict(checks_mig.check_mig_layout_is_as_the_inventory_says, node(mig=h200_mig(["7g.141gb"])))
    assert failed.findings[0].found == "GPU0 MIG layout 7g.141gb (changed since provision made it)"
    assert "refuses while processes use the GPU" in failed.findings[0].fix


def test_an_instance_without_its_compute_instance():
    failed = verdict(checks_mig.check_mig_layout_is_as_the_inventory_says, node(mig=h200_mig(TWO, compute=False)))
    assert failed.findings[0].found == "GPU0 GPU instance(s) 1, 2 without their one default compute instance"


def test_a_pending_mode_is_one_finding_and_the_layout_is_not_judged():
    pending = node(gpu=h200_gpu(mode=False, pending=True), mig=h200_mig())
    failed = verdict(checks_mig.check_no_gpus_mig_mode_is_pending, pending)
    assert failed.findings[0].found.startswith("reboot pending: GPU0 MIG mode Enabled is pending (now Disabled)")
    assert failed.findings[0].fix == "provision apply basement.yaml --limit rig --reboot"
    assert failed.findings[0].remedy == "reset"
    assert verdict(checks_mig.check_mig_layout_is_as_the_inventory_says, pending) is None


def test_listings_not_read_are_not_judged():
    unread = checked_node(facts(gpus=[h200_gpu()], mig=MigFacts(notes=["mig-instances: exit 9"])),
                          provision_gpu={"mig": TWO})
    assert verdict(checks_mig.check_mig_layout_is_as_the_inventory_says, unread) == (
        "skip: nvidia-smi mig -lgi was not read on this host (mig-instances: exit 9)")


def test_no_layout_asked_skips():
    assert verdict(checks_mig.check_mig_layout_is_as_the_inventory_says, node(layout="disabled")).startswith("skip:")


def test_the_layout_tasks_drift_is_filed_under_the_layout_check():
    assert LAYOUT_CHECK == checks_mig.check_mig_layout_is_as_the_inventory_says.__name__.removeprefix("check_")
    drifted = node(mig=h200_mig(["7g.141gb"]))
    failed = verdict(check_as_intended, drifted, MigLayout())
    assert all(LAYOUT_CHECK in finding.because for finding in failed.findings)



def rebooted(unit: str, compute_cap: str = "9.0"):
    """A GPU whose MIG mode reads off, nothing pending, no instances: what a reboot leaves on Hopper and later,
    which keep the mode only while the driver is loaded (node-lifecycle-reference.md 5.4)."""
    gpu = h200_gpu(mode=False, pending=False, compute_cap=compute_cap)
    return checked_node(facts(gpus=[gpu], mig=mig_facts(h200_mig()), units={UNIT: unit}), provision_gpu={"mig": TWO})


@pytest.mark.parametrize(("unit", "compute_cap", "because"), [
    ("disabled", "9.0", (BOOT_UNIT_CHECK,)),  # the unit would have turned it on: its finding's consequence
    ("enabled", "9.0", ()),
    ("disabled", "8.0", ()),  # Ampere keeps MIG mode in the InfoROM: off is not the reboot's doing
])
def test_mig_mode_off_after_a_reboot_is_one_finding_with_its_step(unit, compute_cap, because):
    node_ = rebooted(unit, compute_cap)
    assert verdict(checks_mig.check_no_gpus_mig_mode_is_pending, node_) is None
    assert verdict(checks_mig.check_mig_layout_is_as_the_inventory_says, node_) is None  # waits for the mode
    assert verdict(check_as_intended, node_, MigLayout()) is None
    (finding,) = verdict(check_as_intended, node_, MigMode()).findings
    assert (finding.expected, finding.found, finding.because) == ("GPU0 MIG mode Enabled", "GPU0 MIG mode Disabled",
                                                                 because)
    assert finding.fix == f"provision apply basement.yaml --limit rig (after a reboot: is {UNIT} enabled?)"
