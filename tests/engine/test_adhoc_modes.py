"""`provision ecc` and `provision compute-mode` on this machine with simulated GPUs (simnode.py), run as users run
them: ECC mode set is pending until the reboot (the run says so, exit 16, and says so again rather than setting it
twice), the reboot brings it; a compute mode is set now, lost at the reboot and set again by the boot script."""

from __future__ import annotations

import json
import subprocess
import textwrap

import pytest
from paths import TEMPLATES
from simnode import needs_root

import provision.commands.adhoc as adhoc_command
from provision.core.results import EXIT_OK, EXIT_REBOOT_PENDING

pytestmark = needs_root()

PENDING = "ECC mode Enabled, Disabled at the next reboot or GPU reset"


@pytest.fixture
def conf(v100_node, monkeypatch):
    """The gpu playbook's setters of the modes, with persistence (the simulated driver forgets a compute mode
    when it unloads), the boot file under tmp_path; its path."""
    path = v100_node.root / "etc" / "gpu-tuning.conf"
    playbook = v100_node.root / "gpu-modes.yaml"
    playbook.write_text(textwrap.dedent(f"""\
        tasks:
          - task: gpu-persistence
          - task: gpu-ecc
          - task: gpu-compute-mode
          - task: gpu-boot-conf
            dest: {path}
        """))
    monkeypatch.setattr(adhoc_command, "playbook_path", lambda name: playbook)
    return path


def host_of(output: str) -> dict:
    [host] = json.loads(output)["hosts"]
    return host


def test_ecc_off_is_pending_until_the_reboot_and_a_second_run_says_pending_not_would_change(v100_node, conf):
    first = v100_node.provision("ecc", "off", "--json")
    assert first.exit_code == EXIT_REBOOT_PENDING, first.output
    assert host_of(first.stdout)["reboot_pending"] == [f"GPU{i} {PENDING}" for i in range(4)]
    assert v100_node.query("ecc.mode.current,ecc.mode.pending") == ["Enabled, Disabled"] * 4
    again = v100_node.provision("ecc", "off", "--json")
    assert again.exit_code == EXIT_REBOOT_PENDING, again.output
    [ecc] = [t for t in host_of(again.stdout)["tasks"] if t["name"] == "gpu-ecc"]
    assert ecc["status"] == "ok" and {i["after"] for i in ecc["items"]} == {PENDING.removeprefix("ECC mode ")}
    assert "ecc" not in conf.read_text().replace("# ", "")  # the driver keeps it: no boot line
    v100_node.gpusim("reboot")
    assert v100_node.query("ecc.mode.current,ecc.mode.pending") == ["Disabled, Disabled"] * 4
    after = v100_node.provision("ecc", "off", "--json")
    assert after.exit_code == EXIT_OK and host_of(after.stdout)["reboot_pending"] == [], after.output


def test_a_compute_mode_lost_at_the_reboot_is_set_again_by_the_boot_script(v100_node, conf):
    assert v100_node.provision("persistence", "on").exit_code == EXIT_OK
    result = v100_node.provision("compute-mode", "exclusive_process", "--gpu", "0,2", "--json")
    assert result.exit_code == EXIT_OK, result.output
    assert v100_node.query("compute_mode") == ["Exclusive_Process", "Default", "Exclusive_Process", "Default"]
    # the boot file keeps the persistence set before (read back from it): the driver keeps the mode loaded
    assert conf.read_text().count("persistence=on compute_mode=exclusive_process") == 2
    v100_node.gpusim("reboot")
    assert v100_node.query("compute_mode") == ["Default"] * 4
    boot = subprocess.run(["sh", str(TEMPLATES / "provision-gpu-tuning.sh"), str(conf)], capture_output=True,
                          text=True, timeout=60)
    assert boot.returncode == 0, boot.stderr
    assert v100_node.query("compute_mode") == ["Exclusive_Process", "Default", "Exclusive_Process", "Default"]
