"""MIG end to end on a PCIe H100 node (tests/lab/mig.yaml): under a process MIG mode stays pending (the run's reboot
pending, one finding of verify) until apply --reboot takes it and makes the layout, placements pinned; a second
apply changes nothing; a reboot loses the instances and the boot unit makes them again; instances gone as after a
crash (the gpu-mig-instances-gone fault) are one finding of verify, with the apply that makes them again; a new
layout is refused while a process uses the GPU (named), and made once it is gone."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from builders.stacklab import findings, on, verdicts

from provision.capabilities.gpu.boot import UNIT

pytestmark = pytest.mark.lab

SPEC = Path(__file__).parent / "mig.yaml"
NODE = "lab-mig-1"
LAYOUT_CHECK = "mig_layout_is_as_the_inventory_says"
MODE_QUERY = "nvidia-smi --query-gpu=mig.mode.current --format=csv,noheader"
REBOOT_PENDING = 16  # provision's exit bit: a host waits for a reboot (docs/reference/exit-codes.md)


@pytest.fixture(scope="module")
def mig_lab(lab_alone):
    with lab_alone("mig", lambda cluster: cluster.lab("up", "--like", str(SPEC))) as cluster:
        yield cluster


def failed_tasks(result: dict) -> list:
    """What failed in an apply's JSON, for the assertion's message."""
    return [(t["name"], t.get("message"), [i.get("message") for i in t["items"] if i["status"] == "failed"])
            for h in result.get("hosts", []) for t in h["tasks"] if t["status"] == "failed"] or result


def gpu_instances(lab) -> list[str]:
    """The node's GPU instances as "profile start:size", from nvidia-smi mig -lgi."""
    rows = [line.split() for line in on(lab, NODE, "nvidia-smi mig -lgi").splitlines() if " MIG " in line]
    return sorted(f"{row[3]} {row[6]}" for row in rows)


def test_mig_mode_pending_under_a_process_is_a_state_that_apply_reboot_takes(mig_lab):
    """A process holds the GPU: the driver keeps the mode pending; the run says the reboot is pending (exit bit 16),
    the layout waits, verify says so once; apply --reboot takes the mode and makes the layout."""
    mig_lab.lab("fault", NODE, "gpu-process", "--gpu", "0")
    code, result = mig_lab.apply()
    assert code == REBOOT_PENDING, failed_tasks(result)
    (host,) = result["hosts"]
    assert any("MIG mode Enabled is pending" in reason for reason in host["reboot_pending"]), host
    assert gpu_instances(mig_lab) == []
    code, verdict = verdicts(mig_lab)
    assert [f["check"] for f in verdict[NODE]["findings"]] == ["no_gpus_mig_mode_is_pending"], verdict[NODE]
    code, result = mig_lab.apply("--reboot")
    assert code == 0, failed_tasks(result)
    assert gpu_instances(mig_lab) == ["3g.40gb 4:4", "4g.40gb 0:4"]


def test_then_apply_changes_nothing_and_verify_passes(mig_lab):
    code, again = mig_lab.apply()
    assert code == 0 and again["hosts"][0]["counts"]["changed"] == 0, again
    code, verdict = verdicts(mig_lab)
    assert code == 0, verdict[NODE]["findings"]


def test_a_reboot_loses_the_instances_and_the_boot_unit_makes_them_again(mig_lab):
    mig_lab.lab("reboot", NODE)  # MIG mode too (a Hopper's): the unit turns it on first
    assert on(mig_lab, NODE, MODE_QUERY).split() == ["Enabled"]
    assert gpu_instances(mig_lab) == ["3g.40gb 4:4", "4g.40gb 0:4"]
    code, verdict = verdicts(mig_lab)
    assert code == 0, verdict[NODE]["findings"]


def test_without_the_boot_unit_a_reboot_leaves_mig_mode_off_one_finding_apply_brings_it_back(mig_lab):
    """The H100 keeps MIG mode only while the driver is loaded (Hopper and later: no InfoROM bit, NVIDIA's MIG
    user guide): a reboot without provision-gpu-tuning.service leaves it Disabled with no instances."""
    on(mig_lab, NODE, f"systemctl disable {UNIT}")
    mig_lab.lab("reboot", NODE)
    assert on(mig_lab, NODE, MODE_QUERY).split() == ["Disabled"] and gpu_instances(mig_lab) == []
    code, verdict = verdicts(mig_lab)
    causes = {f["check"]: f for f in verdict[NODE]["findings"]}  # the mode under the unit's finding, not beside it
    assert code != 0 and "as_intended[gpu-mig-mode]" not in causes and not findings(verdict[NODE], LAYOUT_CHECK)
    unit = causes["as_intended[gpu-boot-unit]"]
    assert [c["check"] for c in unit["consequences"]] == ["as_intended[gpu-mig-mode]"], unit
    assert unit["next_step"].startswith("provision apply "), unit
    code, result = mig_lab.apply()
    assert code == 0, failed_tasks(result)
    assert on(mig_lab, NODE, MODE_QUERY).split() == ["Enabled"]
    assert gpu_instances(mig_lab) == ["3g.40gb 4:4", "4g.40gb 0:4"]
    code, verdict = verdicts(mig_lab)
    assert code == 0, verdict[NODE]["findings"]


def test_instances_gone_after_a_crash_are_one_finding_and_apply_makes_them(mig_lab):
    mig_lab.lab("fault", NODE, "gpu-mig-instances-gone")
    code, verdict = verdicts(mig_lab)
    assert code != 0
    (gone,) = findings(verdict[NODE], LAYOUT_CHECK)
    assert "has no GPU instance (gone, as after a reboot or a crash)" in gone["found"], gone
    assert not findings(verdict[NODE], "as_intended[gpu-mig")  # one cause, one finding
    code, check = mig_lab.apply("--check")
    assert check["hosts"][0]["counts"]["changed"] == 1 and gpu_instances(mig_lab) == []  # --check touches nothing
    code, result = mig_lab.apply()
    assert code == 0, failed_tasks(result)
    assert gpu_instances(mig_lab) == ["3g.40gb 4:4", "4g.40gb 0:4"]


def test_a_new_layout_is_refused_under_a_process_then_made(mig_lab, tmp_path):
    tree = yaml.safe_load(mig_lab.inventory.read_text())
    tree["all"]["children"]["gpu"]["vars"]["provision_gpu"]["mig"] = ["7g.80gb"]
    whole = tmp_path / "whole.yaml"
    whole.write_text(yaml.safe_dump(tree))
    mig_lab.lab("fault", NODE, "gpu-process", "--gpu", "0")
    code, result = mig_lab.apply(inventory=whole)
    refused = failed_tasks(result)
    assert code != 0 and refused[0][0] == "gpu-mig-layout" and "processes use GPU0" in refused[0][2][0], refused
    assert gpu_instances(mig_lab) == ["3g.40gb 4:4", "4g.40gb 0:4"]  # left as it was
    mig_lab.lab("fault", NODE, "clear")
    code, result = mig_lab.apply(inventory=whole)
    assert code == 0, failed_tasks(result)
    assert gpu_instances(mig_lab) == ["7g.80gb 0:8"]
