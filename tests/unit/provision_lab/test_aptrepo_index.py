"""The lab's apt repository, the parts that need no root: its index (Packages, Release), the simulated
driver packages dpkg-deb builds, and the simulator's set-driver shortcut (tests install a driver with it)."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from provision_lab import aptrepo, simzip
from provision_lab.layout import NODE_NVML_LIBRARY, NODE_SIM_ZIPAPP, SIM_PACKAGE
from provision_lab.simzip import sim_wrapper

CONTROL = """\
Package: tiny
Version: 1.0-1
Architecture: all
Maintainer: someone <someone@example.org>
Description: a tiny package
 whose description goes on
 .
 over paragraphs.
"""

needs_dpkg_deb = pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="dpkg-deb (Debian's dpkg) is not here")


def parse_index(text: str) -> list[dict[str, str]]:
    """Packages stanzas as apt reads them: blank-line separated; continuation lines belong to the field above."""
    stanzas = []
    for block in text.strip("\n").split("\n\n"):
        fields: dict[str, str] = {}
        key = ""  # a continuation line before any field would belong to "" (never in a valid index)
        for line in block.splitlines():
            if line[:1].isspace():
                fields[key] += "\n" + line
            else:
                key, _, value = line.partition(": ")
                fields[key] = value
        stanzas.append(fields)
    return stanzas


def test_stanza_is_the_control_then_where_and_what_the_file_is():
    data = b"not really a deb"
    stanza = aptrepo.index_stanza(CONTROL, "./tiny_1.0-1_all.deb", data)
    assert stanza.startswith(CONTROL)  # the control fields untouched, multi-line description included
    (fields,) = parse_index(stanza)
    assert fields["Filename"] == "./tiny_1.0-1_all.deb"
    assert fields["Size"] == str(len(data))
    assert fields["MD5sum"] == hashlib.md5(data).hexdigest()
    assert fields["SHA256"] == hashlib.sha256(data).hexdigest()
    assert fields["Description"].splitlines()[-1] == " over paragraphs."
    assert "\n\n" not in stanza  # a blank line would end the stanza early


def test_release_lists_each_index_file_with_size_and_sums():
    files = {"Packages.gz": b"zz", "Packages": b"abc"}
    text = aptrepo.release_text(files, date=0)
    assert "Date: Thu, 01 Jan 1970 00:00:00 GMT\n" in text
    sha = text.split("SHA256:\n")[1].splitlines()
    assert sha == [f" {hashlib.sha256(b'abc').hexdigest()} 3 Packages",
                   f" {hashlib.sha256(b'zz').hexdigest()} 2 Packages.gz"]
    md5 = text.split("MD5Sum:\n")[1].split("SHA256:")[0].splitlines()
    assert md5[0] == f" {hashlib.md5(b'abc').hexdigest()} 3 Packages"


@needs_dpkg_deb
def test_driver_packages_and_their_index(tmp_path):
    for name, driver in aptrepo.DRIVERS.items():
        aptrepo.build_driver_package(tmp_path, name, driver)
    aptrepo.write_index(tmp_path)

    packages = (tmp_path / "Packages").read_text()
    assert gzip.decompress((tmp_path / "Packages.gz").read_bytes()).decode() == packages
    assert f" {hashlib.sha256(packages.encode()).hexdigest()} {len(packages)} Packages\n" in \
        (tmp_path / "Release").read_text()
    stanzas = {s["Package"]: s for s in parse_index(packages)}
    assert set(stanzas) == {"nvidia-driver-570", "nvidia-driver-580"}
    for name, driver in aptrepo.DRIVERS.items():
        fields = stanzas[name]
        assert fields["Version"] == f"{driver}-1provision1"
        assert (fields["Provides"], fields["Conflicts"], fields["Replaces"]) == ("nvidia-driver",) * 3
        assert "python3" in fields["Depends"]
        deb = tmp_path / fields["Filename"]
        assert fields["Size"] == str(deb.stat().st_size)
        assert fields["SHA256"] == hashlib.sha256(deb.read_bytes()).hexdigest()


@needs_dpkg_deb
def test_driver_package_holds_the_simulator_its_wrappers_its_library_version_and_the_static_unit(tmp_path):
    deb = aptrepo.build_driver_package(tmp_path, "nvidia-driver-570", "570.195.03")
    tree, control = tmp_path / "tree", tmp_path / "control"
    subprocess.run(["dpkg-deb", "--extract", str(deb), str(tree)], check=True)
    subprocess.run(["dpkg-deb", "--control", str(deb), str(control)], check=True)
    assert (tree / NODE_SIM_ZIPAPP.lstrip("/")).read_bytes() == simzip.build()  # the simulator, as one zipapp
    for program in ("/usr/bin/nvidia-smi", "/usr/bin/nvidia-persistenced"):
        path = tree / program.lstrip("/")
        assert path.read_text() == sim_wrapper(program) and os.access(path, os.X_OK)
    unit = (tree / "lib/systemd/system/nvidia-persistenced.service").read_text()
    assert "ExecStart=/usr/bin/nvidia-persistenced --user nvidia-persistenced --no-persistence-mode --verbose" in unit
    assert "[Install]" not in unit  # static, as Ubuntu ships it
    assert (tree / NODE_NVML_LIBRARY.lstrip("/")).read_text() == "570.195.03\n"  # loaded at the next boot
    postinst = (control / "postinst").read_text()
    assert "useradd" in postinst and "gpusim" not in postinst  # nothing loads the new driver before a reboot
    listing = subprocess.run(["dpkg-deb", "--contents", str(deb)], capture_output=True, text=True, check=True).stdout
    assert all(" root/root " in line for line in listing.splitlines())


def test_persistenced_accepts_the_units_options(tmp_path):
    argv = aptrepo.PERSISTENCED_UNIT.split("ExecStart=/usr/bin/nvidia-persistenced ")[1].splitlines()[0].split()
    proc = subprocess.run([sys.executable, str(SIM_PACKAGE), "nvidia-persistenced", *argv, "--help"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr  # parsed every option (an unknown one exits 1)


def sim(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "NVIDIA_SIM_CONFIG": str(tmp_path / "config.json"),
           "NVIDIA_SIM_STATE": str(tmp_path / "state.json"), "NVIDIA_SIM_KMSG": str(tmp_path / "kern.log"),
           "NVIDIA_SIM_RUNDIR": str(tmp_path / "run"), "NVIDIA_SIM_UID": "0"}
    return subprocess.run([sys.executable, str(SIM_PACKAGE), *args], capture_output=True, text=True, env=env)


def test_set_driver_changes_what_nvidia_smi_reports_and_keeps_the_gpus(tmp_path):
    gpus = [{"model": "rtx-3090", "count": 2}]
    (tmp_path / "config.json").write_text(json.dumps({"driver_version": "580.159.04", "gpus": gpus}))
    assert sim(tmp_path, "nvidia-smi", "-L").returncode == 0
    assert sim(tmp_path, "set-driver", "570.195.03").returncode == 0
    assert json.loads((tmp_path / "config.json").read_text()) == {"driver_version": "570.195.03", "gpus": gpus}
    query = sim(tmp_path, "nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader")
    assert query.stdout.splitlines() == ["570.195.03"] * 2
    assert "CUDA Version: 12.8" in sim(tmp_path, "nvidia-smi").stdout


def test_set_driver_without_a_config_does_nothing_and_refuses_a_bad_version(tmp_path):
    assert sim(tmp_path, "set-driver", "570.195.03").returncode == 0
    assert not (tmp_path / "config.json").exists()  # no GPUs here: no driver to report
    bad = sim(tmp_path, "set-driver", "latest")
    assert bad.returncode != 0 and "usage" in bad.stderr
