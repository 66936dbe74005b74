"""The lab's container toolkit and DCGM packages (provision_lab/stack_containers.py): their dependencies, and the
stand-ins' output read by provision's own parsers (what a node's facts will hold)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from provision.capabilities.containers.facts import parse_spec
from provision.capabilities.dcgm.facts import parse_dcgm
from provision_lab import stack_containers
from provision_lab.debs import LAB_DEBS


def test_the_toolkit_is_four_packages_of_one_release_and_dcgm_carries_its_epoch():
    served = {d.name: d for d in LAB_DEBS() if d.version.startswith("1.17.8")}
    assert served["nvidia-container-toolkit"].depends == ("nvidia-container-toolkit-base (= 1.17.8-1provision1), "
                                                          "libnvidia-container-tools (= 1.17.8-1provision1)")
    assert set(served) == {"nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container-tools",
                           "libnvidia-container1"}
    dcgm = {(d.name, d.version) for d in LAB_DEBS() if d.name.startswith("datacenter-gpu-manager")}
    assert ("datacenter-gpu-manager-4-cuda13", "1:4.2.3-1provision1") in dcgm
    assert ("datacenter-gpu-manager", "1:3.3.6") in dcgm


def ctk(tmp_path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    script = tmp_path / "nvidia-ctk"
    script.write_text(stack_containers.CTK_SCRIPT)
    return subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True,
                          env={"PATH": os.environ["PATH"], **env})


def test_nvidia_ctk_writes_a_spec_that_names_the_driver(tmp_path):
    out = tmp_path / "cdi" / "nvidia.yaml"
    made = ctk(tmp_path, "cdi", "generate", f"--output={out}", env={stack_containers.STALE_DRIVER_ENV: "570.195.03"})
    assert made.returncode == 0, made.stderr
    assert parse_spec(str(out), out.read_text()).drivers == ["570.195.03"]


@pytest.mark.skipif(os.path.exists("/proc/driver/nvidia/version"), reason="an NVIDIA driver is loaded here")
def test_nvidia_ctk_without_a_driver_fails_as_the_real_one(tmp_path):
    made = ctk(tmp_path, "cdi", "generate", f"--output={tmp_path / 'nvidia.yaml'}", env={})
    assert made.returncode == 1 and "failed to initialize NVML: Driver Not Loaded" in made.stderr


@pytest.mark.skipif(os.path.exists(stack_containers.HOSTENGINE_STATE), reason="a lab host engine's file is here")
def test_dcgmi_without_its_host_engine_prints_its_own_build_info_only(tmp_path):
    script = tmp_path / "dcgmi"
    script.write_text(stack_containers.DCGMI.replace("@VERSION@", "4.2.3"))
    said = subprocess.run(["sh", str(script), "-v"], capture_output=True, text=True, check=True).stdout
    found = parse_dcgm("".join(f"dcgmi {line}\n" for line in said.splitlines()))
    assert (found.dcgmi, found.hostengine, found.said) == ("4.2.3", None, "")
    own = subprocess.run(["sh", str(script), "--version"], capture_output=True, text=True, check=True).stdout
    assert own == "\ndcgmi  version: 4.2.3\n\n"  # TCLAP's version line, as NVIDIA/DCGM#314 shows it
