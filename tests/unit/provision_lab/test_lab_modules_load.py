"""What a lab node loads at boot (provision_lab/nodeinit.py load_modules): the modules modules-load.d names, read as
systemd-modules-load reads them, and a lab spec's provision_custom.lab.modules_load (spec.py), which a node keeps in
its /etc/modules (Debian's, linked from /etc/modules-load.d/modules.conf)."""

from __future__ import annotations

from pathlib import Path

import pytest

from provision_lab import nodeinit, spec
from provision_lab.system import LabError


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_every_conf_in_file_name_order_an_earlier_directory_hiding_a_later_one_s_file(tmp_path: Path):
    etc, lib = tmp_path / "etc", tmp_path / "lib"
    write(tmp_path / "modules", "# /etc/modules: kernel modules to load at boot time.\n\nnvidia-peermem\n")
    etc.mkdir()
    (etc / "modules.conf").symlink_to(tmp_path / "modules")  # Debian's link
    write(etc / "provision-nvidia-peermem.conf", "# Managed by provision\nnvidia-peermem\n")
    write(lib / "a-first.conf", "; a comment\n  ib_umad  \n")
    write(lib / "provision-nvidia-peermem.conf", "hidden_by_etc\n")
    write(lib / "not-a-conf.txt", "ignored\n")
    assert nodeinit.modules_to_load((str(etc), str(lib))) == ["ib_umad", "nvidia-peermem"]
    assert nodeinit.modules_to_load((str(tmp_path / "none"),)) == []


def test_a_spec_names_the_modules_its_node_loads_at_boot_and_refuses_what_is_no_module_name(tmp_path: Path):
    inventory = tmp_path / "lab.yaml"
    lab = {"gpus": [{"model": "v100-sxm2-16gb", "count": 1}], "modules_load": ["nvidia-peermem"]}
    inventory.write_text(f"all: {{hosts: {{n-1: {{provision_custom: {{lab: {lab}}}}}}}}}\n")
    (node,) = spec.like_spec(inventory).nodes
    assert node.modules_load == ["nvidia-peermem"]
    inventory.write_text(inventory.read_text().replace("'nvidia-peermem'", "'rm -rf /'"))
    with pytest.raises(LabError, match="modules_load must be a list of kernel module names"):
        spec.like_spec(inventory)
