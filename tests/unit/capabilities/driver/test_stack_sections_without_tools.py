"""The stack's fact sections on a machine that has none of the stack's tools, as the real H200 of
tests/fixtures/real/h200-modes/stack.txt is (a VM whose kernel is not on its disk: /boot empty, no /lib/modules, no
GRUB, dkms, dcgmi, nvidia-ctk or fabric manager): each section says "nothing here" or "not known", and no "not
found" from the shell becomes a fact."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from provision.capabilities.containers.facts import CONTAINERS_SNIPPET, parse_containers
from provision.capabilities.dcgm.facts import DCGM_SNIPPET, parse_dcgm
from provision.capabilities.driver import nextboot
from realdata import REAL_H200_MODES

STACK = REAL_H200_MODES / "stack.txt"
ABSENT = ("dkms", "dcgmi", "nvidia-ctk", "nv-fabricmanager", "dockerd", "containerd")


def test_the_capture_is_a_machine_without_the_tools():
    if not STACK.exists():
        pytest.skip(f"{STACK} not available")
    said = STACK.read_text()
    assert "total 0\n" in said and "cat: /boot/grub/grubenv: No such file or directory" in said
    for tool in ("dkms", "dcgmi", "nvidia-ctk", "nv-fabricmanager"):
        assert f": {tool}: not found" in said


def run(snippet: str, root: Path) -> str:
    """A section's snippet with the machine's paths under ROOT (all empty), as the batch runs it."""
    for path in ("/boot", "/lib/modules", "/etc/default", "/etc/docker", "/etc/containerd", "/etc/cdi", "/var/run/cdi"):
        snippet = snippet.replace(path, f"{root}{path}")
    return subprocess.run(["sh", "-c", snippet], capture_output=True, text=True, timeout=30).stdout


@pytest.mark.skipif(any(shutil.which(tool) for tool in ABSENT), reason="a stack tool is installed here")
def test_each_section_says_nothing_is_there(tmp_path: Path):
    boot = nextboot.parse_nextboot(run(nextboot.NEXTBOOT_SNIPPET, tmp_path).replace(str(tmp_path), ""))
    assert boot.kernels == [] and not boot.grub and boot.dkms == []
    kernel, why = nextboot.next_kernel(boot)
    assert kernel is None and why.startswith("no /boot/vmlinuz-* on this host")
    dcgm = parse_dcgm(run(DCGM_SNIPPET, tmp_path))
    assert (dcgm.dcgmi, dcgm.hostengine, dcgm.said) == (None, None, "")
    containers = parse_containers(run(CONTAINERS_SNIPPET, tmp_path))
    assert (containers.ctk, containers.engines, containers.specs) == (False, [], {})
