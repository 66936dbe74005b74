"""provision verify end to end on the basement lab: a converged lab passes; each fault a drill injects fails
its own check on its own node and nothing else; after the repair (and the reboot an Xid calls for) it passes;
a reboot without the boot unit fails the settings the unit would have restored.

On the `basement` lab (conftest.py), after test_tuning.py; each test leaves it converged and fault-free.
"""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.lab

V100, BLADE, RISERS = "lab-v100-1", "lab-rtx3090-2", "lab-rtx4090-1"


def verify(lab) -> tuple[int, dict[str, dict]]:
    """`provision verify --json` on the lab: (exit code, host -> verdict)."""
    proc = lab.provision("verify", str(lab.inventory), "--ssh-config", str(lab.ssh_config), "--json")
    assert proc.stdout.strip(), proc.stderr
    return proc.returncode, {v["host"]: v for v in json.loads(proc.stdout)["hosts"]}


def failed(verdicts: dict[str, dict]) -> dict[str, set[str]]:
    """host -> the checks that failed there, for the hosts with any."""
    return {host: {f["check"] for f in v["failures"]} for host, v in verdicts.items() if v["failures"]}


def found(verdicts: dict[str, dict], host: str, check: str) -> str:
    return next(f["found"] for f in verdicts[host]["failures"] if f["check"] == check)


def causes(verdicts: dict[str, dict]) -> dict[str, list[str]]:
    """host -> the checks of its findings (one per cause; the failures that follow from one are inside it)."""
    return {host: [f["check"] for f in v["findings"]] for host, v in verdicts.items() if v["findings"]}


def test_a_converged_lab_passes_every_check(basement):
    assert basement.apply()[0] == 0
    code, verdicts = verify(basement)
    assert code == 0 and failed(verdicts) == {}, [v["failures"] for v in verdicts.values()]
    assert {v["status"] for v in verdicts.values()} == {"pass"} and len(verdicts) == 6
    blade = verdicts["lab-rtx3090-1"]
    assert "nccl_interfaces_are_up_at_speed" in blade["passed"] and "no_xid_errors_since_boot" in blade["passed"]


NCCL_FILES = {"as_intended[nccl-files]"}  # apply will not write NCCL's files over a port it cannot use


@pytest.mark.parametrize("node, fault, check, consequences, words", [
    (RISERS, ["pcie-degraded", "--gpu", "5"], "pcie_links_run_at_full_width_and_speed", set(), "GPU5 "),
    (BLADE, ["nic-down", "--nic", "ens803f1"], "nccl_interfaces_are_up_at_speed", NCCL_FILES, "ens803f1 "),
    (BLADE, ["nic-slow", "--nic", "ens803f0"], "nccl_interfaces_are_up_at_speed", NCCL_FILES, "ens803f0 1000 Mb/s"),
    (RISERS, ["gpu-power-brake", "--gpu", "2"], "clocks_are_not_held_down_by_heat_or_power", set(), "HW Power Brake"),
    (RISERS, ["gpu-thermal", "--gpu", "2"], "gpus_have_thermal_headroom", {"clocks_are_not_held_down_by_heat_or_power"},
     "GPU2 "),
    (V100, ["gpu-nvlink-down", "--gpu", "1", "--link", "2"], "nvlink_links_are_up_at_speed", set(), "GPU1 "),
    (V100, ["gpu-nvlink-errors", "--gpu", "3"], "nvlink_has_no_errors", set(), "link 0: Replay Errors 5"),
    # the card the driver cannot bring up: the count, the layout and the tasks that miss it follow from it
    (RISERS, ["gpu-init-failed", "--gpu", "6"], "no_gpu_failed_to_initialize",
     {"every_gpu_of_the_last_good_run_is_here", "..."}, "RmInitAdapter failed!"),
], ids=["pcie-degraded", "nic-down", "nic-slow", "power-brake", "thermal", "nvlink-down", "nvlink-errors",
        "init-failed"])
def test_a_fault_fails_its_check_on_its_node_and_nothing_else_until_cleared(basement, node, fault, check,
                                                                           consequences, words):
    basement.lab("fault", node, *fault)
    try:
        code, verdicts = verify(basement)
        assert code == 1 and causes(verdicts) == {node: [check]}, failed(verdicts)  # one fault, one finding
        [finding] = verdicts[node]["findings"]
        under = {c["check"] for c in finding["consequences"]}  # the files NCCL would read, a slowed clock, ...
        assert under == consequences or "..." in consequences and consequences - {"..."} <= under, under
        assert words in found(verdicts, node, check)
    finally:
        basement.lab("fault", node, "clear")
    code, verdicts = verify(basement)
    assert code == 0, failed(verdicts)


def test_an_unreachable_node_is_said_apart_from_the_checks(basement):
    basement.lab("fault", BLADE, "sshd-down")
    try:
        code, verdicts = verify(basement)
        assert code == 4 and verdicts[BLADE]["status"] == "unreachable" and failed(verdicts) == {}
    finally:
        basement.lab("fault", BLADE, "clear")
    assert verify(basement)[0] == 0


def test_a_gpu_off_the_bus_fails_until_repaired_and_rebooted(basement):
    basement.lab("fault", V100, "gpu-off-bus", "--gpu", "2")
    try:
        code, verdicts = verify(basement)
        assert code == 1 and set(failed(verdicts)) == {V100}
        assert {"nvidia_smi_reads_the_gpus", "no_gpu_is_lost", "no_xid_errors_since_boot",
                "every_gpu_of_the_last_good_run_is_here"} <= failed(verdicts)[V100]
        assert "GPU2 0000:21:00 Xid 79 (hardware: " in found(verdicts, V100, "no_xid_errors_since_boot")
        assert causes(verdicts) == {V100: ["no_gpu_is_lost"]}  # the rest are its consequences
        [lost] = verdicts[V100]["findings"]
        assert {c["check"] for c in lost["consequences"]} == failed(verdicts)[V100] - {"no_gpu_is_lost"}
        assert "reboot" in lost["next_step"] and "provision apply" not in lost["next_step"]
    finally:
        basement.lab("fault", V100, "clear")
    code, verdicts = verify(basement)  # the card answers again, but its Xid is in this boot's log
    assert code == 1 and failed(verdicts) == {V100: {"no_xid_errors_since_boot"}}
    basement.lab("reboot", V100)  # the boot unit puts the settings back
    code, verdicts = verify(basement)
    assert code == 0, failed(verdicts)


def test_an_uncorrectable_ecc_error_fails_until_the_reboot_that_retires_the_page(basement):
    basement.lab("fault", V100, "gpu-ecc", "--gpu", "1")
    code, verdicts = verify(basement)
    assert code == 1 and failed(verdicts) == {V100: {"gpu_memory_has_no_uncorrectable_errors",
                                                     "no_xid_errors_since_boot"}}
    assert causes(verdicts) == {V100: ["gpu_memory_has_no_uncorrectable_errors"]}  # the Xid 48 is its evidence
    assert "GPU1 00000000:11:00.0: 1 uncorrectable ECC error(s)" in found(verdicts, V100,
                                                                         "gpu_memory_has_no_uncorrectable_errors")
    basement.lab("reboot", V100)
    code, verdicts = verify(basement)
    assert code == 0, failed(verdicts)


def test_a_reboot_without_the_boot_unit_fails_the_settings_it_would_have_restored(basement):
    assert basement.ssh(RISERS, "systemctl disable provision-gpu-tuning.service").returncode == 0
    basement.lab("reboot", RISERS)
    code, verdicts = verify(basement)
    assert code == 1 and set(failed(verdicts)) == {RISERS}
    assert {"as_intended[gpu-boot-unit]", "as_intended[gpu-power-limit]",
            "as_intended[gpu-locked-clocks]"} <= failed(verdicts)[RISERS]
    assert basement.apply()[0] == 0
    assert verify(basement)[0] == 0
