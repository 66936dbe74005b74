"""provision verify's NVLink checks on this machine with the simulated 4x V100 SXM2 (6 NVLinks a GPU): a healthy
board passes, a link down or links counting errors fail their own check alone, naming the GPU, its bus id and
the link, and a cleared fault passes again."""

from __future__ import annotations

import json

import pytest
from simnode import needs_root

pytestmark = needs_root()

V100_FIX = {"persistence": True, "power_limit": 200, "clocks": {"mem": 877, "sm": 1005}}
NVLINK_CHECKS = {"nvlink_links_are_up_at_speed", "nvlink_has_no_errors"}


def verify(node, inventory) -> dict:
    result = node.provision("verify", inventory, "--playbook", node.playbook(), "--json")
    [host] = json.loads(result.stdout)["hosts"]
    assert result.exit_code == (0 if host["status"] == "pass" else 1), result.output
    return host


@pytest.mark.parametrize("fault, check, found", [
    (["nvlink-down", "--link", "2"], "nvlink_links_are_up_at_speed", "GPU1 00000000:11:00.0 link 2 inactive"),
    (["nvlink-errors"], "nvlink_has_no_errors",
     "GPU1 00000000:11:00.0 link 0: Replay Errors 5, Recovery Errors 1, CRC Errors 5"),
])
def test_a_link_fault_fails_its_check_alone_and_passes_once_cleared(v100_node, fault, check, found):
    inventory = v100_node.inventory(V100_FIX)
    assert v100_node.apply(inventory).exit_code == 0
    healthy = verify(v100_node, inventory)
    assert healthy["status"] == "pass" and NVLINK_CHECKS <= set(healthy["passed"])

    v100_node.gpusim("fault", "1", *fault)
    faulty = verify(v100_node, inventory)
    assert [(f["check"], f["found"]) for f in faulty["failures"]] == [(check, found)]
    assert [(f["check"], f["about"]) for f in faulty["findings"]] == [(check, ["0000:11:00"])]  # GPU1's slot
    assert NVLINK_CHECKS - {check} <= set(faulty["passed"])

    v100_node.gpusim("fault", "1", "clear")
    assert verify(v100_node, inventory)["status"] == "pass"


def test_gpus_without_nvlink_skip_the_checks_as_not_applicable(tmp_path, monkeypatch):
    from simnode import SimNode

    node = SimNode(tmp_path, monkeypatch, [("rtx-4090", 2)], daemon=False)
    inventory = node.inventory({"persistence": True})
    assert node.apply(inventory).exit_code == 0
    host = verify(node, inventory)
    assert host["status"] == "pass"
    assert {f"{name}: not applicable: no NVLink on these GPUs" for name in NVLINK_CHECKS} <= set(host["skipped"])
