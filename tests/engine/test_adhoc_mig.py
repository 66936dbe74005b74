"""`provision mig` as the GPU tuning how-to shows it (tests/docs/test_readme.py: place "mig"), on this machine with
two simulated H200s (simnode.py): the layout made with its placements pinned and written into the boot file, made
again by the boot script after a reboot lost it; `on` keeps it; `off` destroys it, turns the mode off and takes the
word out of the boot file; a layout the GPUs cannot take is refused before anything changes."""

from __future__ import annotations

import json
import subprocess
import textwrap

import pytest
from docpages import page_showing
from paths import TEMPLATES
from simnode import SimNode, needs_root

import provision.commands.adhoc as adhoc_command
from provision.core.results import EXIT_BAD_INPUT, EXIT_OK

pytestmark = needs_root()

COMMANDS = ("provision mig 3g.71gb,3g.71gb", "provision mig on", "provision mig off")  # docs/how-to/gpu-tuning.md
PINNED = "mig=3g.71gb:0,3g.71gb:4"


@pytest.fixture
def h200_node(tmp_path, monkeypatch):
    """Two H200s; the gpu playbook's MIG setters and its boot file, written under tmp_path."""
    node = SimNode(tmp_path, monkeypatch, [("h200", 2)], daemon=False)
    playbook = tmp_path / "gpu-mig.yaml"
    playbook.write_text(textwrap.dedent(f"""\
        tasks:
          - task: gpu-mig-mode
          - task: gpu-mig-layout
          - task: gpu-boot-conf
            dest: {node.conf}
        """))
    monkeypatch.setattr(adhoc_command, "playbook_path", lambda name: playbook)
    return node


def instances(node: SimNode) -> list[str]:
    """Each GPU instance as "GPU profile start:size", from nvidia-smi mig -lgi."""
    rows = [line.strip("| ").split() for line in node.smi("mig", "-lgi").stdout.splitlines() if " MIG " in line]
    return sorted(f"{row[0]} {row[2]} {row[5]}" for row in rows)


def as_shown(node: SimNode, command: str):
    result = node.provision(*command.split()[1:], "--json")
    assert result.exit_code == EXIT_OK, result.output
    return json.loads(result.stdout)["hosts"][0]


def test_the_pages_commands_make_keep_and_remove_a_layout_across_a_reboot(h200_node):
    page = page_showing(f"    {COMMANDS[0]}")
    assert [page.index(f"    {c} ") for c in COMMANDS] == sorted(page.index(f"    {c} ") for c in COMMANDS)
    halves = [f"{gpu} 3g.71gb {start}:4" for gpu in (0, 1) for start in (0, 4)]

    as_shown(h200_node, COMMANDS[0])
    assert h200_node.query("mig.mode.current") == ["Enabled"] * 2
    assert instances(h200_node) == halves
    assert h200_node.conf.read_text().count(f" {PINNED}  #") == 2

    h200_node.gpusim("reboot")  # the instances are gone, and a Hopper's MIG mode with the driver
    assert h200_node.query("mig.mode.current") == ["Disabled"] * 2 and instances(h200_node) == []
    boot = subprocess.run(["sh", str(TEMPLATES / "provision-gpu-tuning.sh"), str(h200_node.conf)],
                          capture_output=True, text=True, timeout=60)
    assert boot.returncode == 0, boot.stderr
    assert instances(h200_node) == halves

    kept = as_shown(h200_node, COMMANDS[1])
    assert kept["counts"]["changed"] == 0, kept
    assert instances(h200_node) == halves and h200_node.conf.read_text().count(PINNED) == 2

    as_shown(h200_node, COMMANDS[2])
    assert h200_node.query("mig.mode.current") == ["Disabled"] * 2 and instances(h200_node) == []
    assert "mig=" not in h200_node.conf.read_text()


def test_a_layout_the_gpus_cannot_take_touches_nothing(h200_node):
    result = h200_node.provision("mig", "4g.71gb,4g.71gb", "--gpu", "1")
    assert result.exit_code == EXIT_BAD_INPUT
    assert "provision mig 4g.71gb,4g.71gb: GPU1 (NVIDIA H200): 2 x 4g.71gb, but it takes at most 1" in result.output
    assert h200_node.query("mig.mode.current") == ["Disabled"] * 2 and not h200_node.conf.exists()


def test_the_boot_script_turns_mig_mode_on_again_where_the_driver_lost_it(h200_node):
    """Hopper and later keep no MIG mode across a driver reload (NVIDIA's MIG user guide): the boot line's layout
    turns it on first, then makes the instances."""
    as_shown(h200_node, COMMANDS[0])
    h200_node.gpusim("reboot")  # what a Hopper reboot leaves: the mode off as well
    assert h200_node.query("mig.mode.current") == ["Disabled"] * 2
    boot = subprocess.run(["sh", str(TEMPLATES / "provision-gpu-tuning.sh"), str(h200_node.conf)],
                          capture_output=True, text=True, timeout=60)
    assert boot.returncode == 0, boot.stderr
    assert h200_node.query("mig.mode.current") == ["Enabled"] * 2
    assert instances(h200_node) == [f"{gpu} 3g.71gb {start}:4" for gpu in (0, 1) for start in (0, 4)]
