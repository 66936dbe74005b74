"""provision verify on this machine with simulated GPUs: passes when converged, names each difference, and
changes nothing on the node."""

from __future__ import annotations

import json
import os
from pathlib import Path

import yaml
from simnode import needs_root

pytestmark = needs_root()

V100_FIX = {"persistence": True, "power_limit": 200, "clocks": {"mem": 877, "sm": 1005}}
FIELDS = "persistence_mode,power.limit,clocks.applications.memory,clocks.applications.graphics"


def verify(node, inventory, *args):
    return node.provision("verify", inventory, "--playbook", node.playbook(), *args)


def test_a_converged_node_passes_and_a_drifted_one_fails_the_right_check(v100_node, tmp_path):
    inventory = v100_node.inventory(V100_FIX)
    assert v100_node.apply(inventory).exit_code == 0
    passed = verify(v100_node, inventory)
    assert passed.exit_code == 0, passed.output
    assert "node1  PASS " in passed.stdout and "checks passed" in passed.stdout

    assert v100_node.smi("-i", "2", "-pl", "250").returncode == 0  # someone "fixed" GPU2 by hand
    before = (v100_node.query(FIELDS), v100_node.conf.read_text(), sorted(os.listdir(v100_node.conf.parent)))
    failed = verify(v100_node, inventory, "--junitxml", str(tmp_path / "verify.xml"))
    assert failed.exit_code == 1, failed.output
    assert "node1  FAIL  1 of " in failed.stdout
    assert "failed as_intended[gpu-power-limit]: expected GPU2 power limit 200.00 W; found GPU2 power limit " \
           "250.00 W" in failed.stdout
    assert f"what to do: provision apply {inventory} --limit node1" in failed.stdout
    assert 'name="check_as_intended[node1-gpu-power-limit]"' in (tmp_path / "verify.xml").read_text()
    after = (v100_node.query(FIELDS), v100_node.conf.read_text(), sorted(os.listdir(v100_node.conf.parent)))
    assert after == before  # read-only: the GPUs and the files as they were

    data = json.loads(verify(v100_node, inventory, "--json").stdout)
    [host] = data["hosts"]
    assert host["status"] == "fail" and [f["check"] for f in host["failures"]] == ["as_intended[gpu-power-limit]"]


def test_a_gpu_off_the_bus_is_one_finding_with_the_checks_it_fails_under_it(v100_node, tmp_path):
    inventory = v100_node.inventory(V100_FIX)
    assert v100_node.apply(inventory).exit_code == 0
    v100_node.gpusim("fault", "1", "off-bus")
    result = verify(v100_node, inventory, "--json", "--prometheus", str(tmp_path / "provision.prom"))
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert data["schema"] == "provision-verify/1"
    [host] = data["hosts"]
    failures = {f["check"]: f for f in host["failures"]}
    assert {"nvidia_smi_reads_the_gpus", "every_gpu_of_the_last_good_run_is_here", "no_gpu_is_lost",
            "no_xid_errors_since_boot"} <= set(failures)
    assert failures["nvidia_smi_reads_the_gpus"]["found"].startswith("exit 15 (a GPU has fallen off the bus")
    [finding] = host["findings"]  # one cause: every other failure is a consequence of it
    assert finding["check"] == "no_gpu_is_lost" and finding["severity"] == "critical"
    assert finding["found"].startswith("GPU1 GPU-") and "reboot it" in finding["next_step"]
    assert {c["check"] for c in finding["consequences"]} == set(failures) - {"no_gpu_is_lost"}
    assert "as_intended[gpu-boot-conf]" in failures  # the lost card's line, kept for its return: its consequence
    prom = (tmp_path / "provision.prom").read_text()
    assert 'provision_verify_findings{host="node1",severity="critical"} 1.0' in prom

    text = verify(v100_node, inventory).stdout  # as a user reads it: one failed line, the rest named under it
    assert text.count("    failed ") == 1 and "node1  FAIL  1 finding (" in text
    assert "because of it: nvidia_smi_reads_the_gpus, every_gpu_of_the_last_good_run_is_here" in text


def test_a_narrow_pcie_link_fails_its_check(v100_node):
    inventory = v100_node.inventory(V100_FIX)
    assert v100_node.apply(inventory).exit_code == 0
    v100_node.gpusim("fault", "3", "pcie-degraded")
    result = verify(v100_node, inventory)
    assert result.exit_code == 1
    assert "failed pcie_links_run_at_full_width_and_speed: expected every GPU's PCIe link at its maximum width " \
           "(and generation, at work); found GPU3 " in result.stdout and "x8 of x16" in result.stdout


def test_verify_local_checks_this_machine_without_ssh(v100_node):
    """The mode a scheduler runs on every node: `--local` takes the inventory's settings for this machine."""
    inventory = v100_node.inventory(V100_FIX)
    before = verify(v100_node, inventory, "--local")
    assert before.exit_code == 1 and "node1  FAIL  " in before.stdout, before.output
    assert "found GPU0 power limit 300.00 W" in before.stdout
    assert v100_node.query("power.limit") == ["300.00"] * 4  # read, never set

    assert v100_node.apply(inventory).exit_code == 0
    after = verify(v100_node, inventory, "--local", "--json")
    assert after.exit_code == 0, after.output
    [host] = json.loads(after.stdout)["hosts"]
    assert host["status"] == "pass" and {"as_intended[gpu-clocks]", "no_xid_errors_since_boot"} <= set(host["passed"])


def after_fault(node, gpu: str, fault: str, gpu_block: dict = V100_FIX) -> tuple[str, dict, dict]:
    """A converged node, one simulator fault, then verify --json: (the inventory, its host, its one finding)."""
    inventory = node.inventory(gpu_block)
    assert node.apply(inventory).exit_code == 0
    node.gpusim("fault", gpu, fault)
    result = verify(node, inventory, "--json")
    assert result.exit_code == 1
    [host] = json.loads(result.stdout)["hosts"]
    [finding] = host["findings"]
    return inventory, host, finding


def test_an_uncorrectable_ecc_error_and_its_xid_are_one_finding_on_that_gpu(v100_node):
    _, host, finding = after_fault(v100_node, "1", "ecc")
    assert {f["check"] for f in host["failures"]} == {"gpu_memory_has_no_uncorrectable_errors",
                                                      "no_xid_errors_since_boot"}
    assert finding["check"] == "gpu_memory_has_no_uncorrectable_errors"
    assert [c["check"] for c in finding["consequences"]] == ["no_xid_errors_since_boot"]
    assert "Xid 48" in finding["consequences"][0]["found"]


def test_a_gpu_held_at_its_slowdown_temperature_is_one_finding_its_slowed_clocks_under_it(v100_node):
    inventory, _, finding = after_fault(v100_node, "2", "thermal")
    assert finding["check"] == "gpus_have_thermal_headroom" and finding["found"].startswith("GPU2 ")
    assert "past its slowdown temperature" in finding["found"] or "at its slowdown" in finding["found"]
    assert [c["check"] for c in finding["consequences"]] == ["clocks_are_not_held_down_by_heat_or_power"]
    v100_node.gpusim("fault", "2", "clear")
    assert verify(v100_node, inventory).exit_code == 0


def test_a_gpu_the_driver_cannot_bring_up_is_one_finding_and_counts_against_gpu_count(v100_node):
    # the others are numbered again without it
    inventory, _, finding = after_fault(v100_node, "1", "init-failed", V100_FIX | {"count": 4})
    assert finding["check"] == "no_gpu_failed_to_initialize" and "RmInitAdapter failed!" in finding["found"]
    assert {"gpu_count_is_as_the_inventory_says", "every_gpu_of_the_last_good_run_is_here",
            "as_intended[gpu-boot-conf]"} <= {c["check"] for c in finding["consequences"]}
    v100_node.gpusim("reboot")  # still dead: the driver says so again at its next load
    [host] = json.loads(verify(v100_node, inventory, "--json").stdout)["hosts"]
    assert host["findings"][0]["check"] == "no_gpu_failed_to_initialize"


def test_a_check_switched_off_for_the_group_is_skipped_with_the_reason_and_a_typo_is_refused(v100_node):
    """provision_verify.skip (GCM's killswitch): the drift it names is not judged on these hosts, and says so."""
    inventory = v100_node.inventory(V100_FIX)
    assert v100_node.apply(inventory).exit_code == 0
    assert v100_node.smi("-i", "2", "-pl", "250").returncode == 0  # a drift the group has switched the check off for
    data = yaml.safe_load(Path(inventory).read_text())
    group = data["all"]["children"]["nodes"]["vars"]
    group["provision_verify"] = {"skip": ["as_intended[gpu-power-limit]"]}
    Path(inventory).write_text(yaml.safe_dump(data, sort_keys=False))
    switched = verify(v100_node, inventory, "--json")
    assert switched.exit_code == 0, switched.output
    [host] = json.loads(switched.stdout)["hosts"]
    assert host["status"] == "pass" and host["failures"] == []
    assert "as_intended[gpu-power-limit]: switched off for this host by provision_verify.skip in the inventory" \
        in host["skipped"]
    assert "as_intended[gpu-power-limit]" not in host["passed"] and "as_intended[gpu-clocks]" in host["passed"]

    group["provision_verify"] = {"skip": ["as_intended[gpu-power-limt]"]}
    Path(inventory).write_text(yaml.safe_dump(data, sort_keys=False))
    typo = verify(v100_node, inventory)
    assert typo.exit_code == 2
    assert "provision_verify.skip: 'as_intended[gpu-power-limt]' is no check of verify (hint: did you mean " \
           "'as_intended[gpu-power-limit]'?)" in typo.output
