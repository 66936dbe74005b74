"""provision recover end to end on the recovery lab (tests/lab/recovery.yaml: one node, two simulated H100s), with
the simulator's recovery faults (provision_lab/gpusim/recovery.py): a GPU that asks for a reset is reset alone
and the node recovered without a reboot (the how-to's block, run as written); one that asks for a reboot is
rebooted over SSH; a failing card comes back after the reboot and ends named for replacement, its record under
the state directory."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from builders import stacklab

from provision.core.results import EXIT_OK, EXIT_TASK_FAILED, EXIT_WOULD_CHANGE

pytestmark = pytest.mark.lab

PAGE = Path(__file__).resolve().parents[2] / "docs" / "how-to" / "recover.md"
NODE = "lab-recovery-1"
# The how-to's block (tests/docs/test_readme.py: place "recover"), run as written in this test's lab directory.
SHOWN_DIR = "/var/lib/provision-lab/recovery"
SHOWN_UP = f"provision lab up --like tests/lab/recovery.yaml --dir {SHOWN_DIR}"
SHOWN_APPLY = f"provision apply {SHOWN_DIR}/inventory.yaml"
SHOWN_FAULT = f"provision lab fault {NODE} gpu-reset-required --gpu 1 --dir {SHOWN_DIR}"
SHOWN_PLAN = f"provision recover {SHOWN_DIR}/inventory.yaml --check"
SHOWN_RECOVER = f"provision recover {SHOWN_DIR}/inventory.yaml"


def as_written(command: str, lab) -> subprocess.CompletedProcess:
    return stacklab.as_written(command, lab, SHOWN_DIR, PAGE)


@pytest.fixture(scope="module")
def recovery_lab(lab_alone):
    def up(cluster):
        made = as_written(SHOWN_UP, cluster)
        assert made.returncode == 0, made.stdout + made.stderr
        applied = as_written(SHOWN_APPLY, cluster)
        assert applied.returncode == EXIT_OK, applied.stdout + applied.stderr

    with lab_alone("recover", up) as cluster:
        yield cluster


@pytest.fixture
def node(recovery_lab, tmp_path, monkeypatch):
    """The converged lab, its cards' records in this test's state directory; every fault cleared after."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    yield recovery_lab
    recovery_lab.lab("fault", NODE, "clear")


def recovered(lab) -> tuple[int, dict]:
    """`provision recover --json` on the lab: (exit code, the node's recovery)."""
    proc = lab.provision("recover", str(lab.inventory), "--ssh-config", str(lab.ssh_config), "--json",
                         "--log", str(lab.log))
    assert proc.stdout.strip(), proc.stderr
    [recovery] = json.loads(proc.stdout)["hosts"]
    return proc.returncode, recovery


def actions(lab) -> list[str]:
    return stacklab.on(lab, NODE, "nvidia-smi --query-gpu=gpu_recovery_action --format=csv,noheader").split()


MARKER = "/run/recover-test-booted"  # /run is a tmpfs: a boot empties it (the lab's nodes share the kernel's boot_id)


def mark_this_boot(lab) -> None:
    stacklab.on(lab, NODE, f"touch {MARKER}")


def rebooted(lab) -> bool:
    return lab.ssh(NODE, f"test -e {MARKER}").returncode != 0


def test_a_gpu_that_asks_for_a_reset_is_reset_alone_and_the_node_recovered_without_a_reboot(node, tmp_path):
    mark_this_boot(node)
    faulted = as_written(SHOWN_FAULT, node)
    assert faulted.returncode == 0, faulted.stderr
    planned = as_written(SHOWN_PLAN, node)
    assert planned.returncode == EXIT_WOULD_CHANGE, planned.stdout + planned.stderr
    assert f"{NODE}: planned\n  would reset: " in planned.stdout
    assert actions(node) == ["None", "Reset"]  # --check touched nothing
    done = as_written(SHOWN_RECOVER, node)
    assert done.returncode == EXIT_OK, done.stdout + done.stderr
    assert done.stdout.startswith(f"{NODE}: recovered\n  reset ("), done.stdout
    assert "reset 0000:" in done.stdout  # the one GPU the finding names, not every GPU
    assert actions(node) == ["None", "None"] and not rebooted(node)
    log = tmp_path / "provision" / "runs.jsonl"  # the default run log, under the test's state directory
    steps = [json.loads(line) for line in log.read_text().splitlines() if '"event": "step"' in line]
    assert [(s["host"], s["step"], s["ok"]) for s in steps][-1:] == [(NODE, "reset", True)]


def test_a_gpu_that_asks_for_a_reboot_is_rebooted_and_the_node_recovered(node):
    mark_this_boot(node)
    node.lab("fault", NODE, "gpu-needs-reboot", "--gpu", "0")
    code, recovery = recovered(node)
    assert code == EXIT_OK, recovery
    assert recovery["status"] == "recovered" and [s["action"] for s in recovery["steps"]] == ["reboot"], recovery
    assert recovery["steps"][0]["said"].startswith("rebooted over SSH"), recovery
    assert actions(node) == ["None", "None"] and rebooted(node)


def test_a_card_that_fails_again_after_the_reboot_is_named_for_replacement_and_left(node, tmp_path):
    serial = stacklab.on(node, NODE, "nvidia-smi -i 1 --query-gpu=serial --format=csv,noheader").strip()
    node.lab("fault", NODE, "gpu-failing-card", "--gpu", "1")
    code, recovery = recovered(node)
    assert code == EXIT_TASK_FAILED, recovery
    assert [s["action"] for s in recovery["steps"]] == ["reboot", "service"], recovery
    assert recovery["status"] == "needs service"
    assert f"(serial {serial})" in recovery["message"] and recovery["message"].startswith("replace the card in slot")
    [record] = (tmp_path / "provision" / "cards").iterdir()
    card = json.loads(record.read_text())
    assert (card["serial"], card["host"], card["times"]) == (serial, NODE, 1)
    assert os.path.basename(record) == f"{serial}.json"
