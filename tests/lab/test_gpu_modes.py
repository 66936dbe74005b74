"""ECC mode and compute mode on the basement lab's V100 box (conftest.py), end to end: apply sets ECC off, which is
pending until the reboot (exit 16, verify's one finding with the command), `apply --reboot` brings it; the compute
mode a reboot resets is set again by the boot unit, and where the unit is disabled verify files the reset under the
unit's finding. The test leaves the lab converged to its own inventory.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from builders.stacklab import findings, on, verdicts
from provision.core.results import EXIT_OK, EXIT_REBOOT_PENDING

pytestmark = pytest.mark.lab

V100 = "lab-v100-1"
UNIT = "provision-gpu-tuning.service"


def v100_with(lab, tmp_path: Path, **modes) -> Path:
    """The lab's inventory with the V100 box's modes set."""
    tree = yaml.safe_load(lab.inventory.read_text())
    tree["all"]["children"]["gpu_nodes"]["children"]["v100"]["vars"]["provision_gpu"].update(modes)
    path = tmp_path / f"v100-{'-'.join(map(str, modes.values()))}.yaml"
    path.write_text(yaml.safe_dump(tree, sort_keys=False))
    return path


def modes(lab) -> list[str]:
    return on(lab, V100, "nvidia-smi --query-gpu=ecc.mode.current,ecc.mode.pending,compute_mode "
                         "--format=csv,noheader").splitlines()


def test_ecc_waits_for_the_reboot_and_the_boot_unit_sets_the_compute_mode_again(basement, tmp_path):
    wanted = v100_with(basement, tmp_path, ecc=False, compute_mode="exclusive_process")
    try:
        code, result = basement.apply("--limit", V100, inventory=wanted)
        assert code == EXIT_REBOOT_PENDING, result
        [host] = result["hosts"]
        assert host["reboot_pending"] == [f"GPU{i} ECC mode Enabled, Disabled at the next reboot or GPU reset"
                                          for i in range(4)]
        assert modes(basement) == ["Enabled, Disabled, Exclusive_Process"] * 4
        code, verdict = verdicts(basement, wanted)
        [pending] = findings(verdict[V100], "every_gpus_ecc_mode_is_in_effect")
        assert pending["next_step"] == f"provision apply {wanted} --limit {V100} --reboot"
        assert [f["check"] for f in verdict[V100]["findings"]] == ["every_gpus_ecc_mode_is_in_effect"]
        code, again = basement.apply("--limit", V100, inventory=wanted)  # pending, not set twice
        assert code == EXIT_REBOOT_PENDING and {t["name"]: t["status"] for t in again["hosts"][0]["tasks"]}[
            "gpu-ecc"] == "ok", again

        code, result = basement.apply("--limit", V100, "--reboot", inventory=wanted)
        assert code == EXIT_OK, result
        assert modes(basement) == ["Disabled, Disabled, Exclusive_Process"] * 4  # the unit set it at that boot
        code, verdict = verdicts(basement, wanted)
        assert verdict[V100]["findings"] == [], verdict[V100]

        on(basement, V100, f"systemctl disable {UNIT}")
        basement.lab("reboot", V100)
        assert modes(basement) == ["Disabled, Disabled, Default"] * 4
        code, verdict = verdicts(basement, wanted)
        causes = {f["check"]: f for f in verdict[V100]["findings"]}  # the compute mode under the unit's finding
        assert "as_intended[gpu-compute-mode]" not in causes, causes
        assert "as_intended[gpu-compute-mode]" in [c["check"] for c in
                                                   causes["as_intended[gpu-boot-unit]"]["consequences"]], causes
    finally:
        code, result = basement.apply("--limit", V100, "--reboot",
                                      inventory=v100_with(basement, tmp_path, ecc=True, compute_mode="default"))
        assert code == EXIT_OK, result
        code, result = basement.apply("--limit", V100)  # its own inventory: no mode in the boot file
        assert code == EXIT_OK, result
    assert modes(basement) == ["Enabled, Enabled, Default"] * 4
