"""The GPU simulator as nodes get it: the gpusim package in one zipapp file (layout.NODE_SIM_ZIPAPP), and the
wrappers (nvidia-smi, nvidia-persistenced, dmesg, the simulator's own commands) that put that file on sys.path
and import the package from it (zipimport).

Built in memory and deterministically: the package's .py files and their bytecode, sorted, each with a fixed
timestamp and mode, stored uncompressed. The same sources give the same bytes, so the lab's apt repository,
whose key hashes them (aptrepo.repo_key), changes only when the simulator does. zipimport writes no bytecode
cache, so without the .pyc files a node's python3 would compile the package at every nvidia-smi call (50 ms
more each: the benchmarks would measure the simulator). The bytecode is unchecked-hash (PEP 552: no
timestamp), compiled with a fixed hash seed (marshal writes sets in hash order); a node whose python3 is
another version ignores it and compiles the source, as before.
"""

from __future__ import annotations

import functools
import io
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from provision_lab import gpusim
from provision_lab.layout import NODE_SIM_ZIPAPP, SIM_PACKAGE

# `python gpusim.pyz ARGS`, as `python -m provision_lab.gpusim ARGS` (the package's own __main__ runs only
# from a checkout).
MAIN = "import sys\nimport gpusim\nsys.exit(gpusim.main(sys.argv))\n"
TIMESTAMP = (1980, 1, 1, 0, 0, 0)  # the earliest a zip file can record
NODE_PYTHON = "/usr/bin/python3"  # Debian's, on every node


def build(package: Path = SIM_PACKAGE) -> bytes:
    """The zipapp's bytes: __main__.py, then gpusim/*.py (the package is flat: no subpackage, no data file)."""
    members = [("__main__.py", MAIN.encode())]
    members += [(f"gpusim/{path.name}", path.read_bytes()) for path in sorted(package.glob("*.py"))]
    members += _bytecode(package)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        for name, data in sorted(members):
            info = zipfile.ZipInfo(name, TIMESTAMP)
            info.create_system = 3  # Unix: the mode below is what it says
            info.external_attr = 0o100644 << 16  # a regular file, rw-r--r--
            archive.writestr(info, data)
    return buffer.getvalue()


# Run in a fresh interpreter with PYTHONHASHSEED=0: each module to gpusim/NAME.pyc, unchecked-hash.
COMPILE = """import py_compile, sys
from pathlib import Path
package, out = Path(sys.argv[1]), Path(sys.argv[2])
for path in sorted(package.glob("*.py")):
    py_compile.compile(str(path), cfile=str(out / (path.stem + ".pyc")), dfile="gpusim/" + path.name, doraise=True,
                       invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
"""


def _bytecode(package: Path) -> list[tuple[str, bytes]]:
    with tempfile.TemporaryDirectory() as out:
        subprocess.run([sys.executable, "-c", COMPILE, str(package), out], check=True,
                       env={**os.environ, "PYTHONHASHSEED": "0"})
        return [(f"gpusim/{path.name}", path.read_bytes()) for path in sorted(Path(out).glob("*.pyc"))]


@functools.cache
def zipapp() -> bytes:
    """This checkout's simulator as one file (built once per process)."""
    return build()


def sim_wrapper(program_in_node: str, zipapp_path: str = NODE_SIM_ZIPAPP, python: str = NODE_PYTHON) -> str:
    """The executable that runs the node's simulator (the zipapp at zipapp_path) as program_in_node (nvidia-smi,
    ...): what `gpusim install` writes, with the node's python3 and the zipapp as the place to import from."""
    return gpusim.WRAPPER.format(python=python, name=Path(program_in_node).name, path=zipapp_path)
