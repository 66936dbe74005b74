"""provision verify --active on this machine with simulated GPUs (--local's path: no SSH): the basement's 4x V100
with 900 W of power supply for its GPUs (the simulator's psu_watts), the load the simulator's stand-in
(provision_active.load_command: `gpusim load`, load_model.py). Pinned clocks hold; the power limit alone lets the boost
transients brown the supply out, and verify names the GPU it lost as the cause of the passive checks' failures,
with the draws that passed the budget the inventory gives the GPUs (provision_active.power_budget_watts)."""

from __future__ import annotations

import json
import sys

import yaml
from simnode import GPUSIM, needs_root

pytestmark = needs_root()

V100_FIX = {"persistence": True, "power_limit": 200, "clocks": {"mem": 877, "sm": 1005}}


def weak_supply(node, watts: int = 900) -> None:
    config = json.loads((node.root / "sim-config.json").read_text())
    (node.root / "sim-config.json").write_text(json.dumps({**config, "psu_watts": watts}))


def inventory(node, gpu: dict) -> str:
    data = {"all": {"hosts": {"node1": {"ansible_connection": "local", "provision_gpu": gpu,
                                        "provision_active": {"load_command": [sys.executable, str(GPUSIM), "load"],
                                                   "power_budget_watts": 900}}}}}
    path = node.root / "active.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def verify_active(node, path: str):
    ran = node.provision("verify", path, "--playbook", node.playbook(), "--active", "--duration", "5", "--json")
    return ran.exit_code, json.loads(ran.output[ran.output.index("{"):])["hosts"][0]


def test_pinned_clocks_hold_under_load_and_the_power_limit_alone_loses_a_gpu(v100_node):
    weak_supply(v100_node)
    fixed = inventory(v100_node, V100_FIX)
    assert v100_node.apply(fixed).exit_code == 0
    code, host = verify_active(v100_node, fixed)
    assert code == 0 and host["failures"] == [], host["failures"]
    assert "gpus_hold_up_under_load" in host["passed"]

    assert v100_node.smi("-rac").returncode == 0  # the clocks unpinned: the 200 W cap alone is left
    code, host = verify_active(v100_node, inventory(v100_node, {"persistence": True, "power_limit": 200}))
    assert code == 1
    lost, *rest = host["findings"]  # rest: the boot file still has the clocks (the inventory changed, no apply)
    assert [f["check"] for f in rest] == ["as_intended[gpu-boot-conf]"]
    assert lost["check"] == "gpus_hold_up_under_load" and lost["severity"] == "critical"
    assert "lost under load" in lost["found"] and "200 W cap" in lost["found"]
    assert "past the 900 W provision_active.power_budget_watts gives them" in lost["found"]
    assert "no_gpu_is_lost" in {c["check"] for c in lost["consequences"]}
    assert any("power p99 270 W" in n for n in host["notes"])  # the others' transients: said, not failed
    assert "Xid" in (v100_node.root / "kern.log").read_text()


# dcgmi diag as the load (provision_active.dcgm_diag): a stand-in dcgmi that loads the simulated GPUs (gpusim load) and
# reports DCGM 4.x's JSON with GPU2's memory test failed, as dcgmi/Diag.cpp writes it.
FAKE_DCGMI = """\
import json, subprocess, sys
if sys.argv[1:] != ["diag", "-r", "2", "-j"]:
    sys.exit("usage: dcgmi diag -r 2 -j")
subprocess.run([sys.executable, {gpusim!r}, "load", "--seconds", "3"], stdout=subprocess.DEVNULL)
results = [{{"entity_group": "GPU", "entity_group_id": 1, "entity_id": i, "status": "Pass"}} for i in range(4)]
results[2] = {{**results[2], "status": "Fail", "warnings": [{{"warning": "A double-bit ECC error was detected on GPU 2.",
              "error_id": 3, "error_category": 3, "error_severity": 6}}]}}
print(json.dumps({{"DCGM Diagnostic": {{"test_categories": [{{"category": "Hardware", "tests": [
    {{"name": "memory", "results": results, "test_summary": {{"status": "Fail"}}}}]}}]}},
    "metadata": {{"version": "4.2.3"}}}}, indent=4))
sys.exit(226)
"""


def test_dcgmi_diag_as_the_load_files_its_failed_test_under_the_gpu_and_is_not_applicable_without_dcgmi(
        v100_node, tmp_path, monkeypatch):
    import os
    import shutil

    import pytest

    if shutil.which("dcgmi"):
        pytest.skip("a real dcgmi is on PATH: the stand-in would not be the one run")
    data = {"all": {"hosts": {"node1": {"ansible_connection": "local", "provision_gpu": V100_FIX, "provision_active": {"dcgm_diag": 2}}}}}
    path = v100_node.root / "dcgm.yaml"
    path.write_text(yaml.safe_dump(data))
    assert v100_node.apply(str(path)).exit_code == 0
    code, host = verify_active(v100_node, str(path))  # no dcgmi here: nothing loaded, so not tested (never a pass)
    assert code == 64 and host["failures"] == [], host["failures"]
    assert host["status"] == "not tested" and "dcgmi is not installed on the node" in host["not_tested"][0]
    [skipped] = [s for s in host["skipped"] if s.startswith("gpus_hold_up_under_load")]
    assert "not applicable: dcgmi is not installed on the node" in skipped, skipped

    fake = tmp_path / "dcgm-bin"
    fake.mkdir()
    (fake / "dcgmi").write_text(f"#!{sys.executable}\n" + FAKE_DCGMI.format(gpusim=str(GPUSIM)))
    (fake / "dcgmi").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}:{os.environ['PATH']}")
    code, host = verify_active(v100_node, str(path))
    assert code == 1
    [finding] = host["findings"]
    assert finding["check"] == "gpus_hold_up_under_load" and finding["severity"] == "critical"
    assert finding["found"].startswith("GPU2 (") and "memory failed: A double-bit ECC error" in finding["found"]
    assert "nvidia-smi -r -i 2" in finding["next_step"]
