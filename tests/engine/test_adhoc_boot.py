"""An ad-hoc setter that fails installs nothing that would run at boot (issue 42): `provision persistence on` on
a host without a driver exited 1 yet wrote and enabled the boot script and unit, while the file they read was
never written. This machine with simulated GPUs (simnode.py), the command run as users run it; the gpu
playbook's boot tasks write under tmp_path (its unit is enabled nowhere: tests/unit/capabilities/gpu/test_boot_caps_adhoc.py plans
that one)."""

from __future__ import annotations

import json
import os
import textwrap

import pytest
from simnode import needs_root

import provision.commands.adhoc as adhoc_command
from provision.core.results import EXIT_WOULD_CHANGE

pytestmark = needs_root()


@pytest.fixture
def boot_files(v100_node, monkeypatch):
    """The gpu playbook's setters and boot tasks, the boot files under tmp_path; their paths."""
    root = v100_node.root
    paths = {"conf": root / "etc" / "gpu-tuning.conf", "script": root / "sbin" / "provision-gpu-tuning",
             "unit": root / "systemd" / "provision-gpu-tuning.service"}
    playbook = root / "gpu-boot.yaml"
    playbook.write_text(textwrap.dedent(f"""\
        tasks:
          - task: gpu-persistence
          - task: gpu-power-limit
          - task: gpu-boot-conf
            dest: {paths['conf']}
          - task: template
            name: gpu-boot-script
            tags: [gpu, boot]
            src: provision-gpu-tuning.sh
            dest: {paths['script']}
            mode: "0755"
            when: gpu
          - task: template
            name: gpu-boot-unit-file
            tags: [gpu, boot]
            src: gpu-tuning.service.j2
            dest: {paths['unit']}
            when: gpu
        """))
    monkeypatch.setattr(adhoc_command, "playbook_path", lambda name: playbook)
    return paths


def boot_tasks(output: str) -> dict[str, dict]:
    [host] = json.loads(output)["hosts"]
    return {t["name"]: t for t in host["tasks"] if t["name"].startswith("gpu-boot")}


def test_without_a_driver_the_setting_fails_and_nothing_is_installed_for_the_boot(v100_node, boot_files,
                                                                                    monkeypatch):
    monkeypatch.setenv("PATH", os.environ["PATH"].replace(f"{v100_node.bin}:", ""))
    result = v100_node.provision("persistence", "on", "--json")
    assert result.exit_code == 1, result.output
    assert not any(path.exists() for path in boot_files.values()), result.output
    tasks = boot_tasks(result.stdout)
    assert set(tasks) == {"gpu-boot-conf", "gpu-boot-script", "gpu-boot-unit-file"}
    for task in tasks.values():
        assert task["status"] == "skipped", task
        assert task["message"].startswith("not installed for the next boot: gpu-persistence failed on this host ("), task
        assert "nvidia-smi is not installed" in task["message"], task


def test_a_setter_nvidia_smi_refuses_installs_nothing_for_the_boot(v100_node, boot_files, monkeypatch):
    """An nvidia-smi earlier on PATH refuses every power limit, as on a board whose limit is not changeable."""
    shim = v100_node.root / "shim" / "nvidia-smi"
    shim.parent.mkdir()
    shim.write_text(f'#!/bin/sh\ncase " $* " in *" -pl "*) echo "Changing power management limit is not supported '
                    f'in current scope for GPU"; exit 3;; esac\nexec {v100_node.bin}/nvidia-smi "$@"\n')
    shim.chmod(0o755)
    monkeypatch.setenv("PATH", f"{shim.parent}:{os.environ['PATH']}")
    result = v100_node.provision("power", "--watts", "200", "--json")
    assert result.exit_code == 1, result.output
    assert not any(path.exists() for path in boot_files.values()), result.output
    for task in boot_tasks(result.stdout).values():
        assert task["status"] == "skipped", task
        assert task["message"].startswith("not installed for the next boot: gpu-power-limit did not take effect (GPU0 "
                                          "power limit 300.00 W, not 200.00 W; "), task
    assert v100_node.query("power.limit") == ["300.00"] * 4


def test_a_setter_that_succeeds_installs_the_boot_file_script_and_unit(v100_node, boot_files):
    first = v100_node.provision("persistence", "on", "--json")  # without it the driver forgets the limit at once
    assert first.exit_code == 0, first.output
    assert {t["status"] for t in boot_tasks(first.stdout).values()} == {"changed"}
    result = v100_node.provision("power", "--watts", "200", "--json")
    assert result.exit_code == 0, result.output
    assert all(path.exists() for path in boot_files.values())
    assert boot_files["conf"].read_text().count("power_limit=200") == 4 + 1  # each card, and another V100
    assert boot_tasks(result.stdout)["gpu-boot-conf"]["status"] == "changed"
    check = v100_node.provision("power", "--watts", "250", "--check", "--json")  # --check: what would be installed
    assert check.exit_code == EXIT_WOULD_CHANGE, check.output
    assert boot_tasks(check.stdout)["gpu-boot-conf"]["status"] == "changed"
