"""verify --active on the V100 box with a weak power supply (issue 27, lab test a): a lab of its own, one node of
4x V100 whose supplies give the GPUs 900 W (provision_custom.lab.psu_watts), the load the GPU simulator's stand-in
(provision_active.load_command: `gpusim load`; load_model.py: boost transients 1.35x the averaged draw, pinned clocks
ripple 2%). With the inventory's fix (persistence, 200 W, application clocks 877,1005) the node passes under
load; with the clocks left out, the transients of four GPUs at their 200 W cap pass 900 W, one GPU falls off
the bus, and verify names it, its peak power and the fix, with the passive checks' failures under it.

Its own lab (conftest's lab_alone: the e2e lab's directory with -active), made and taken down here; no torch
layer, so it is up in seconds.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.lab

NODE = "lab-v100-1"
CHECK = "gpus_hold_up_under_load"
FIXED = {"persistence": True, "power_limit": 200, "clocks": {"mem": 877, "sm": 1005}}
INVENTORY = {"all": {"hosts": {"v100-1": {
    "provision_gpu": FIXED,
    "provision_active": {"load_command": ["/usr/lib/provision-lab/gpusim", "load"], "power_budget_watts": 900},
    "provision_custom": {"lab": {"torch": False, "gpus": [{"model": "v100-sxm2-16gb", "count": 4}], "psu_watts": 900}}}}}}


@pytest.fixture(scope="module")
def active_lab(lab_alone, tmp_path_factory):
    spec = tmp_path_factory.mktemp("active") / "v100.yaml"
    spec.write_text(yaml.safe_dump(INVENTORY))
    with lab_alone("active", lambda cluster: cluster.lab("up", "--like", str(spec))) as cluster:
        yield cluster


def on_node(cluster, command: str) -> str:
    done = cluster.ssh(NODE, command)
    assert done.returncode == 0, f"{command}: {done.stdout}{done.stderr}"
    return done.stdout


def inventory(cluster, gpu: dict) -> Path:
    """The lab's own inventory (its hosts at their lab addresses, through its ssh_config) with this gpu block."""
    tree = yaml.safe_load(cluster.inventory.read_text())
    tree["all"]["hosts"][NODE]["provision_gpu"] = gpu
    path = cluster.dir / "active.yaml"
    path.write_text(yaml.safe_dump(tree))
    return path


def apply(cluster, path: Path) -> None:
    done = cluster.provision("apply", str(path))
    assert done.returncode == 0, done.stdout + done.stderr


def verify_active(cluster, path: Path) -> tuple[int, dict]:
    proc = cluster.provision("verify", str(path), "--active", "--duration", "6", "--json")
    assert proc.stdout.strip(), proc.stderr
    return proc.returncode, json.loads(proc.stdout)["hosts"][0]


def test_the_basement_fix_holds_under_load_and_without_the_clocks_a_gpu_falls_off(active_lab):
    fixed = inventory(active_lab, FIXED)
    apply(active_lab, fixed)
    code, verdict = verify_active(active_lab, fixed)
    assert code == 0 and verdict["failures"] == [], verdict["failures"]
    assert CHECK in verdict["passed"]

    # Someone drops the clocks from the inventory and resets them on the node: the power limit alone is left
    unpinned = inventory(active_lab, {"persistence": True, "power_limit": 200})
    apply(active_lab, unpinned)
    on_node(active_lab, "nvidia-smi -rac")
    code, verdict = verify_active(active_lab, unpinned)
    assert code == 1
    lost = [f for f in verdict["findings"] if f["check"] == CHECK and f["severity"] == "critical"]
    assert len(lost) == 1, verdict["findings"]
    [finding] = lost
    assert "lost under load" in finding["found"] and "peak" in finding["found"] and "200 W cap" in finding["found"]
    assert "past the 900 W provision_active.power_budget_watts gives them" in finding["found"]
    assert "pin the clocks" in finding["next_step"]
    under = {c["check"] for c in finding["consequences"]}
    assert "no_gpu_is_lost" in under, finding  # the passive checks' view of the same GPU, under this finding
    assert not [f for f in verdict["findings"] if f["check"] == "no_gpu_is_lost"]
    assert "Xid" in on_node(active_lab, "dmesg") and "79" in on_node(active_lab, "dmesg")


def test_a_bad_riser_logs_only_under_load_and_is_named_by_its_bus(active_lab):
    active_lab.lab("reboot", NODE)  # the GPU the last test lost is back, its kernel log new
    fixed = inventory(active_lab, FIXED)
    apply(active_lab, fixed)
    active_lab.lab("fault", NODE, "gpu-bad-riser", "--gpu", "1")
    try:
        at_rest = active_lab.provision("verify", str(fixed), "--json")
        assert at_rest.returncode == 0, at_rest.stdout  # nothing to see at rest
        code, verdict = verify_active(active_lab, fixed)
        assert code == 1
        [finding] = verdict["findings"]
        assert finding["check"] == "no_pcie_errors_on_the_gpu_links_since_boot", verdict["findings"]
        assert "0000:11:00" in finding["found"] and "RxErr" in finding["found"]
        [during] = finding["consequences"]
        assert during["check"] == CHECK and during["about"] == ["0000:11:00"]
        assert "during the load: aer corrected" in during["found"]
    finally:
        active_lab.lab("fault", NODE, "clear")
