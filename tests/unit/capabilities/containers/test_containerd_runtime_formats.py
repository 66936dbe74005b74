"""containerd configured for the nvidia runtime as `nvidia-ctk runtime configure --runtime=containerd` really writes
it, in each toolkit generation (capabilities/containers/facts.py), and the lab's nvidia-ctk writing the same.

Verbatim texts, from public sources:
- the toolkit before 1.18 writes the runtime into /etc/containerd/config.toml itself ("Wrote updated config to
  /etc/containerd/config.toml", NVIDIA/nvidia-container-toolkit#433); what it writes where no config was there is
  TOOLKIT_1_17 below (its --dry-run, NVIDIA/nvidia-container-toolkit#497, with SystemdCgroup asked for there);
- 1.18.0 writes a drop-in under config.d (NVIDIA/nvidia-container-toolkit#1404: "Wrote updated config to
  /etc/containerd/config.d/99-nvidia.toml"), later ones under conf.d (#1407), and add the drop-in's directory
  as "<dir>/*.toml" to config.toml's `imports` (pkg/config/engine/containerd/config_drop_in.go, importPattern);
- containerd 2's config version 3 names the CRI runtime plugin io.containerd.cri.v1.runtime (#805, #862).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from provision.capabilities.containers.facts import (
    CONTAINERD_CONFIG,
    CONTAINERD_DROP_IN,
    CONTAINERD_DROP_INS,
    runtime_problem,
)
from provision_lab.stack_containers import ctk_script

TOOLKIT_1_17 = """\
version = 2

[plugins]

  [plugins."io.containerd.grpc.v1.cri"]

    [plugins."io.containerd.grpc.v1.cri".containerd]

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes]

        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]
          privileged_without_host_devices = false
          runtime_engine = ""
          runtime_root = ""
          runtime_type = "io.containerd.runc.v2"

          [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]
            BinaryName = "/usr/bin/nvidia-container-runtime"
            SystemdCgroup = true
"""
VERSION_3 = TOOLKIT_1_17.replace("version = 2", "version = 3").replace("io.containerd.grpc.v1.cri",
                                                                       "io.containerd.cri.v1.runtime")
IMPORTS = 'version = 2\nimports = ["/etc/containerd/conf.d/*.toml"]\n'  # what ensureImports adds


def test_the_toolkit_before_1_18_configures_config_toml_itself():
    assert runtime_problem("containerd", {CONTAINERD_CONFIG: TOOLKIT_1_17}) == ""
    assert runtime_problem("containerd", {CONTAINERD_CONFIG: VERSION_3}) == ""
    assert runtime_problem("containerd", {CONTAINERD_CONFIG: 'version = 2\nroot = "/var/lib/containerd"\n'}) == \
        f"{CONTAINERD_CONFIG} names no nvidia runtime"


def test_from_1_18_a_drop_in_that_config_toml_imports_by_its_directory():
    assert runtime_problem("containerd", {CONTAINERD_DROP_IN: TOOLKIT_1_17, CONTAINERD_CONFIG: IMPORTS}) == ""
    assert runtime_problem("containerd", {CONTAINERD_DROP_IN: VERSION_3, CONTAINERD_CONFIG: IMPORTS}) == ""
    # 1.18.0's config.d, imported as that toolkit writes it
    config_d = CONTAINERD_DROP_INS[1]
    assert runtime_problem("containerd", {config_d: TOOLKIT_1_17,
                                          CONTAINERD_CONFIG: IMPORTS.replace("conf.d", "config.d")}) == ""
    assert runtime_problem("containerd", {config_d: TOOLKIT_1_17, CONTAINERD_CONFIG: IMPORTS}) == \
        f"{CONTAINERD_CONFIG} does not import {config_d}"


@pytest.mark.parametrize(("toolkit", "config_version"), [("1.17.8", 2), ("1.17.8", 3), ("1.18.1", 2), ("1.18.1", 3)])
def test_the_lab_nvidia_ctk_writes_what_that_toolkit_writes(tmp_path: Path, toolkit: str, config_version: int):
    """The lab's stand-in, run as the node runs it (paths under tmp_path), on a containerd with a config of its
    own: provision's check then finds the runtime configured, and the engine's other settings are kept."""
    etc = tmp_path / "etc"
    (etc / "containerd").mkdir(parents=True)
    (etc / "containerd/config.toml").write_text(f'version = {config_version}\nroot = "/var/lib/containerd"\n')
    script = tmp_path / "nvidia-ctk"
    script.write_text(ctk_script(toolkit).replace('"/etc/', f'"{etc}/'))
    said = subprocess.run([sys.executable, str(script), "runtime", "configure", "--runtime=containerd"],
                          capture_output=True, text=True, timeout=30)
    assert said.returncode == 0, said.stderr
    texts = {path: (tmp_path / path.lstrip("/")).read_text().replace(str(tmp_path), "")
             for path in (CONTAINERD_CONFIG, *CONTAINERD_DROP_INS) if (tmp_path / path.lstrip("/")).exists()}
    assert runtime_problem("containerd", texts) == ""
    assert 'root = "/var/lib/containerd"' in texts[CONTAINERD_CONFIG]
    written = CONTAINERD_CONFIG if toolkit.startswith("1.17.") else CONTAINERD_DROP_IN
    assert set(texts) == {CONTAINERD_CONFIG, written}
    assert f"Wrote updated config to {tmp_path}{written}" in said.stderr
    plugin = "io.containerd.cri.v1.runtime" if config_version == 3 else "io.containerd.grpc.v1.cri"
    assert f'[plugins."{plugin}".containerd.runtimes.nvidia]' in texts[written]
