"""The lab's simulated Debian packages (provision_lab/debs.py): the control file a Deb writes, the .deb dpkg-deb
builds from it, and the stacks' packages the repository serves (LAB_DEBS)."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from provision_lab import aptrepo, stack_fabric
from provision_lab.deb import Deb, build_deb
from provision_lab.debs import LAB_DEBS
from provision_lab.layout import DRIVERS

needs_dpkg_deb = pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="dpkg-deb (Debian's dpkg) is not here")


def test_control_leaves_out_empty_fields_and_folds_the_description():
    deb = Deb("tiny", "1.0-1", depends="python3", provides="thing",
              description="a tiny package\nwhose text goes on\n\nover paragraphs.")
    assert deb.control() == ("Package: tiny\nVersion: 1.0-1\nArchitecture: all\n"
                             "Maintainer: provision lab <root@localhost>\nDepends: python3\nProvides: thing\n"
                             "Section: misc\nPriority: optional\nDescription: a tiny package\n"
                             " whose text goes on\n .\n over paragraphs.\n")
    assert "Conflicts" not in deb.control() and deb.filename == "tiny_1.0-1_all.deb"


@needs_dpkg_deb
def test_build_writes_the_files_with_their_modes_and_the_postinst(tmp_path):
    deb = Deb("tiny", "1.0-1", files={"/usr/bin/tiny": (0o755, "#!/bin/sh\n"), "/etc/tiny.bin": (0o600, b"\x00")},
              postinst="#!/bin/sh\nexit 0\n", description="tiny")
    out = build_deb(deb, tmp_path)
    tree, control = tmp_path / "tree", tmp_path / "control"
    subprocess.run(["dpkg-deb", "--extract", str(out), str(tree)], check=True)
    subprocess.run(["dpkg-deb", "--control", str(out), str(control)], check=True)
    assert (tree / "usr/bin/tiny").read_text() == "#!/bin/sh\n" and os.access(tree / "usr/bin/tiny", os.X_OK)
    assert (tree / "etc/tiny.bin").stat().st_mode & 0o777 == 0o600
    assert (control / "postinst").read_text() == deb.postinst
    assert subprocess.run(["dpkg-deb", "--field", str(out), "Version"], capture_output=True, text=True,
                          check=True).stdout == "1.0-1\n"


def test_fabric_manager_at_each_drivers_exact_version_and_one_that_matches_none():
    served = {(d.name, d.version) for d in LAB_DEBS()}
    for driver in DRIVERS.values():
        branch = driver.split(".")[0]
        assert (f"nvidia-fabricmanager-{branch}", f"{driver}-1provision1") in served
        assert (f"libnvidia-nscq-{branch}", f"{driver}-1provision1") in served
    assert ("nvidia-fabricmanager-580", f"{stack_fabric.MISMATCHED_VERSION}-1provision1") in served
    assert stack_fabric.MISMATCHED_VERSION not in DRIVERS.values()


def test_fabric_manager_package_is_one_branch_at_a_time_and_leaves_its_unit_disabled():
    deb = stack_fabric.fabric_manager("570.195.03")
    assert (deb.provides, deb.conflicts, deb.replaces) == ("nvidia-fabricmanager",) * 3
    assert deb.files[stack_fabric.FABRIC_MANAGER_VERSION_FILE][1] == "570.195.03\n"
    assert "WantedBy=multi-user.target" in deb.files["/lib/systemd/system/nvidia-fabricmanager.service"][1]
    assert deb.postinst == ""  # the FM guide: the administrator enables and starts it (provision does)


def test_repository_serves_the_drivers_and_every_stack_package():
    names = [d.filename for d in aptrepo.all_debs()]
    assert len(names) == len(set(names))
    assert {f"{name}_{v}-1provision1_all.deb" for name, v in DRIVERS.items()} <= set(names)
    assert {d.filename for d in LAB_DEBS()} <= set(names)


def test_a_lab_drivers_fabric_manager_depends_on_that_drivers_exact_version_as_ubuntus_does():
    for driver in DRIVERS.values():
        branch = driver.split(".")[0]
        assert stack_fabric.fabric_manager(driver).depends == f"python3, nvidia-driver-{branch} (= {driver}-1provision1)"
    assert stack_fabric.fabric_manager(stack_fabric.MISMATCHED_VERSION).depends == "python3, nvidia-driver"
