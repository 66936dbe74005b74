"""The simulator as a node gets it (simzip.py): one zipapp of the gpusim package, built deterministically, which
the node's wrappers import. A node is imitated in a temporary directory: the zipapp where the node has it, the
wrappers the lab writes (pointing there instead of /usr/lib/provision-lab), run as nvidia-smi and as gpusim."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from io import BytesIO

import pytest

from provision_lab import aptrepo, simzip
from provision_lab.layout import DMESG, NODE_SIM, NODE_SIM_ZIPAPP, NVIDIA_SMI, SIM_PACKAGE

REPO = SIM_PACKAGE.parents[1]


def test_the_zipapp_holds_the_package_sources_their_bytecode_and_a_main_nothing_else():
    with zipfile.ZipFile(BytesIO(simzip.build())) as archive:
        names = archive.namelist()
        assert names == sorted(names)
        sources = [f"gpusim/{p.name}" for p in sorted(SIM_PACKAGE.glob("*.py"))]
        assert names == sorted(["__main__.py", *sources, *(f"{s}c" for s in sources)])
        assert "gpusim/__init__.py" in names and not [n for n in names if "pycache" in n]
        for info in archive.infolist():
            assert info.date_time == simzip.TIMESTAMP and info.compress_type == zipfile.ZIP_STORED
            if info.filename.endswith(".py") and info.filename.startswith("gpusim/"):
                assert archive.read(info) == (SIM_PACKAGE / info.filename.split("/")[1]).read_bytes()
            elif info.filename.endswith(".pyc"):  # PEP 552 flags: hash-based (1), source not checked (no 2)
                assert int.from_bytes(archive.read(info)[4:8], "little") == 1


def test_the_same_sources_give_the_same_bytes(tmp_path):
    copy = tmp_path / "gpusim"
    shutil.copytree(SIM_PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    for k, path in enumerate(sorted(copy.iterdir())):  # other timestamps, another order on disk
        os.utime(path, (1_000_000 + k, 2_000_000_000 - k))
    (copy / "__pycache__").mkdir()
    (copy / "__pycache__" / "stale.cpython-311.pyc").write_bytes(b"not a source")
    assert simzip.build(copy) == simzip.build() == simzip.zipapp()
    (copy / "__init__.py").write_text((copy / "__init__.py").read_text() + "# changed\n")
    assert simzip.build(copy) != simzip.build()


def test_the_apt_repository_key_follows_the_zipapp(monkeypatch):
    key = aptrepo.repo_key()
    assert aptrepo.repo_key() == key
    monkeypatch.setattr(simzip, "zipapp", lambda: simzip.build() + b"another simulator")
    assert aptrepo.repo_key() != key


def test_the_node_wrappers_import_the_zipapp_from_its_place_in_the_node():
    wrapper = simzip.sim_wrapper(NVIDIA_SMI)
    assert wrapper.startswith("#!/usr/bin/python3 -S\n# nvidia-smi: ")
    assert f"sys.path.insert(0, {NODE_SIM_ZIPAPP!r})\nimport gpusim\nsys.exit(gpusim.main(sys.argv))\n" in wrapper


@pytest.fixture
def node(tmp_path):
    """A node's simulator files under tmp_path: the zipapp, its wrappers (this Python for the node's python3), a
    config of two GPUs; and the environment that points the simulator there."""
    zipapp = tmp_path / NODE_SIM_ZIPAPP.lstrip("/")
    zipapp.parent.mkdir(parents=True)
    zipapp.write_bytes(simzip.zipapp())
    for program in (NVIDIA_SMI, NODE_SIM, DMESG):
        path = tmp_path / program.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(simzip.sim_wrapper(program, str(zipapp), sys.executable))
        path.chmod(0o755)
    (tmp_path / "config.json").write_text(json.dumps({"gpus": [{"model": "h100-80gb-hbm3", "count": 1},
                                                               {"model": "rtx-3090", "count": 1}]}))
    env = {**os.environ, "NVIDIA_SIM_CONFIG": str(tmp_path / "config.json"),
           "NVIDIA_SIM_STATE": str(tmp_path / "state.json"), "NVIDIA_SIM_KMSG": str(tmp_path / "kern.log"),
           "NVIDIA_SIM_RUNDIR": str(tmp_path / "run"), "NVIDIA_SIM_LIBRARY": str(tmp_path / "none"),
           "NVIDIA_SIM_UID": "0", "PYTHONDONTWRITEBYTECODE": "1"}
    return tmp_path, env


def run(argv: list[str], env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, cwd=REPO)


def test_a_node_nvidia_smi_answers_as_the_package_does(node):
    root, env = node
    nvidia_smi = str(root / NVIDIA_SMI.lstrip("/"))
    for args in (["--query-gpu=name", "--format=csv"], ["-L"], ["--query-gpu=index,pci.bus_id,power.limit",
                                                                 "--format=csv,noheader"]):
        on_node = run([nvidia_smi, *args], env)
        from_checkout = run([sys.executable, "-m", "provision_lab.gpusim", "nvidia-smi", *args], env)
        assert (on_node.returncode, on_node.stdout, on_node.stderr) == \
            (from_checkout.returncode, from_checkout.stdout, from_checkout.stderr)
        assert on_node.returncode == 0 and on_node.stdout
    assert run([nvidia_smi, "--query-gpu=name", "--format=csv"], env).stdout == \
        "name\nNVIDIA H100 80GB HBM3\nNVIDIA GeForce RTX 3090\n"


def test_the_node_simulator_commands_run_from_the_zipapp(node):
    root, env = node
    gpusim = str(root / NODE_SIM.lstrip("/"))
    assert run([gpusim, "fault", "1", "off-bus"], env).returncode == 0
    lost = run([str(root / NVIDIA_SMI.lstrip("/")), "-L"], env)
    assert lost.returncode == 15 and lost.stdout.startswith("Unable to determine the device handle for GPU")
    assert "GPU has fallen off the bus" in run([str(root / DMESG.lstrip("/"))], env).stdout
    assert run([gpusim, "reboot"], env).returncode == 0
    assert run([str(root / NVIDIA_SMI.lstrip("/")), "-L"], env).returncode == 0
    where = run([sys.executable, "-S", "-c", "import sys; sys.path.insert(0, sys.argv[1]); import gpusim.cli; "
                 "print(gpusim.__file__)", str(root / NODE_SIM_ZIPAPP.lstrip("/"))], env)
    # From the bytecode the zipapp carries (zipimport caches none: compiling at each call cost 50 ms)
    assert where.stdout.strip() == str(root / NODE_SIM_ZIPAPP.lstrip("/") / "gpusim" / "__init__.pyc")


def test_the_zipapp_runs_as_a_program_and_installs_wrappers_around_itself(node, tmp_path):
    root, env = node
    zipapp = root / NODE_SIM_ZIPAPP.lstrip("/")
    assert run([sys.executable, str(zipapp), "nvidia-smi", "-L"], env).stdout.count("GPU ") == 2
    assert run([sys.executable, str(zipapp), "install", str(tmp_path / "bin")], env).returncode == 0
    assert repr(str(zipapp)) in (tmp_path / "bin" / "nvidia-smi").read_text()
    assert run([str(tmp_path / "bin" / "nvidia-smi"), "-L"], env).stdout.count("GPU ") == 2


# Each costs every nvidia-smi call 5-12 ms of the lab machine's CPU (measured, Python 3.11): the benchmarks time the
# tools' nvidia-smi calls, so the simulator's own start must cost about what a real nvidia-smi does, not twice that.
SLOW_IMPORTS = ("dataclasses", "inspect", "typing", "tempfile", "socket", "shutil")


def test_a_node_nvidia_smi_call_imports_none_of_the_slow_standard_modules(node):
    root, env = node
    zipapp = str(root / NODE_SIM_ZIPAPP.lstrip("/"))
    # As the wrapper does (python3 -S, the zipapp first on sys.path), then a query, a setter, topo -m and nvlink -s
    program = ("import sys; sys.path.insert(0, sys.argv[1]); import gpusim\n"
               "for argv in (['--query-gpu=index,uuid,temperature.gpu,power.draw', '--format=csv'], ['-pl', '250'],"
               " ['topo', '-m'], ['nvlink', '-s']):\n"
               "    gpusim.main(['nvidia-smi', *argv])\n"
               "print(' '.join(sorted(sys.modules)), file=sys.stderr)")
    done = run([sys.executable, "-S", "-c", program, zipapp], env)
    assert done.returncode == 0, done.stderr
    assert "Power limit for GPU 00000000:01:00.0 was set to 250.00 W from 700.00 W." in done.stdout
    loaded = set(done.stderr.split())
    assert {"gpusim.smi", "gpusim.topo", "gpusim.setters"} <= loaded
    assert not loaded & set(SLOW_IMPORTS)
