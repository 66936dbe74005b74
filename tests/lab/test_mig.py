"""MIG end to end on a PCIe H100 node (tests/lab/mig.yaml): one apply turns MIG mode on (at once: nothing holds the
GPU) and makes the layout, placements pinned; a second changes nothing; a reboot loses the instances and the boot
unit makes them again; instances gone as after a crash (the gpu-mig-instances-gone fault) are one finding of
verify, with the apply that makes them again."""

from __future__ import annotations

from pathlib import Path

import pytest
from builders.stacklab import findings, on, verdicts

pytestmark = pytest.mark.lab

SPEC = Path(__file__).parent / "mig.yaml"
NODE = "lab-mig-1"
LAYOUT_CHECK = "mig_layout_is_as_the_inventory_says"


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


def test_one_apply_turns_mig_on_and_makes_the_layout(mig_lab):
    code, result = mig_lab.apply()
    assert code == 0, failed_tasks(result)
    assert gpu_instances(mig_lab) == ["3g.40gb 4:4", "4g.40gb 0:4"]
    code, again = mig_lab.apply()
    assert code == 0 and again["hosts"][0]["counts"]["changed"] == 0, again
    code, verdict = verdicts(mig_lab)
    assert code == 0, verdict[NODE]["findings"]


def test_a_reboot_loses_the_instances_and_the_boot_unit_makes_them_again(mig_lab):
    mig_lab.lab("reboot", NODE)
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
    code, result = mig_lab.apply()
    assert code == 0, failed_tasks(result)
    assert gpu_instances(mig_lab) == ["3g.40gb 4:4", "4g.40gb 0:4"]
