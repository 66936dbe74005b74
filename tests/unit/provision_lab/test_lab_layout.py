"""The lab's shape: one home for its paths and versions (layout.py), no import cycle among its modules, each
importable on its own; and the programs that run inside a node on their own (the simulator, nodeinit.py),
which keep copies of a few of layout's values, agree with it."""

from __future__ import annotations

import ast
import graphlib
import subprocess
import sys
from pathlib import Path

import pytest

from provision_lab import gpusim, layout, nodeinit

LAB = Path(layout.__file__).parent
REPO = LAB.parent


def lab_modules() -> list[str]:
    """provision_lab's modules, the simulator's among them (provision_lab.gpusim.X)."""
    names = []
    for path in sorted(LAB.rglob("*.py")):
        parts = path.relative_to(REPO).with_suffix("").parts
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def imports_of(module: str) -> set[str]:
    """The provision_lab modules that module imports, anywhere in it (a late import inside a function too)."""
    path = REPO / Path(*module.split("."))
    path = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package
            for _ in range(node.level - 1):
                base = base.rpartition(".")[0]
            base = f"{base}.{node.module}" if node.level and node.module else base if node.level else node.module
            found.add(base)
            found |= {f"{base}.{alias.name}" for alias in node.names}  # from package import module
    known = set(lab_modules())
    return {name for name in found if name in known and name != module}


def test_lab_modules_import_one_another_without_a_cycle():
    graph = {module: imports_of(module) for module in lab_modules()}
    assert graph["provision_lab.layout"] == set()  # everything imports it: it imports nothing of the lab
    try:
        list(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as exc:
        pytest.fail(f"import cycle in provision_lab: {' -> '.join(exc.args[1])}")


def test_the_simulator_and_nodeinit_import_nothing_of_the_lab():
    """Both run inside a node with the node's own python3: the standard library, and the simulator's own
    package (relative imports), nothing else."""
    sim = {m for m in lab_modules() if m.startswith("provision_lab.gpusim")}
    for module in sorted(sim):
        assert imports_of(module) <= sim, module
    assert imports_of("provision_lab.nodeinit") == set()


@pytest.mark.parametrize("module", [m for m in lab_modules() if not m.endswith(".__main__")])  # that one runs
def test_each_lab_module_imports_on_its_own(module):
    done = subprocess.run([sys.executable, "-c", f"import {module}"], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_the_simulator_copies_agree_with_the_layout():
    assert gpusim.DEFAULT_DRIVER == layout.DRIVER_VERSION
    assert gpusim.ENV_DEFAULTS["NVIDIA_SIM_LIBRARY"] == layout.NODE_NVML_LIBRARY
    assert gpusim.ENV_DEFAULTS["NVIDIA_SIM_CONFIG"] == layout.NODE_SIM_CONFIG
    for version in layout.DRIVERS.values():  # nvidia-smi reports a CUDA version for every packaged driver
        assert version.split(".")[0] in gpusim.CUDA_FOR_DRIVER


def test_nodeinit_copies_agree_with_the_layout():
    assert nodeinit.GPUSIM == layout.NODE_SIM
    assert nodeinit.GPU_CONFIG == layout.NODE_SIM_CONFIG
    assert nodeinit.GPU_STATE == gpusim.ENV_DEFAULTS["NVIDIA_SIM_STATE"]
    assert nodeinit.DRIVER_LOADED == gpusim.ENV_DEFAULTS["NVIDIA_SIM_PROC_DRIVER"] + "/version"
    assert nodeinit.REBOOT == layout.NODE_REBOOT
    assert nodeinit.SYSTEMD_MARK.startswith(layout.NODE_LAB_DIR + "/")


def test_the_driver_packages_are_named_after_their_branch():
    assert layout.DRIVERS == {"nvidia-driver-580": "580.159.04", "nvidia-driver-570": "570.195.03"}
    assert layout.DRIVERS[layout.driver_package(layout.DRIVER_VERSION)] == layout.DRIVER_VERSION
