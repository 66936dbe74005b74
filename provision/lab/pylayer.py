"""The lab's Python layer: torch (the CPU build) for the nodes' own /usr/bin/python3, shared by every node.

A second cached directory beside the image (rootfs.build_cached: built once, renamed when complete),
keyed by the torch version: root/usr/local/lib/python3.11/dist-packages (torch, its dependencies and
numpy, installed by this machine's pip for the node's Python 3.11 and platform, wheels only) and
root/usr/local/bin/torchrun. Node.create mounts it as the upper of two overlay lower layers
(lowerdir=LAYER:IMAGE), so every node sees torch with nothing copied into its own disk, and the
image itself stays as debootstrap made it.

The wheel comes from what pip is configured with (`pip config list`: find-links, an index): never a
CUDA build. The pin names the +cpu local version, and the result is checked (torch's own version, no
nvidia-* packages) before the layer is kept.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from provision.lab import rootfs
from provision.lab.system import LabError, run

TORCH_VERSION = "2.13.0"
TORCH_BUILD = f"{TORCH_VERSION}+cpu"
EXTRAS = ("numpy",)  # what a torch machine has beside it (without it every `import torch` warns)
NODE_PYTHON = "3.11"  # Debian bookworm's python3
NODE_ABI = "cp311"
NODE_PLATFORM = "manylinux_2_28_x86_64"  # bookworm's glibc 2.36
LAYER_REVISION = 2  # bump when the layer's build changes: a new cache key, a fresh layer
SITE = f"usr/local/lib/python{NODE_PYTHON}/dist-packages"  # on Debian's python3 path, for pip-installed packages
TORCHRUN = "usr/local/bin/torchrun"
TORCHRUN_SCRIPT = """\
#!/bin/sh
# provision lab: torch's console script (pip --target makes none a node can run)
exec /usr/bin/python3 -m torch.distributed.run "$@"
"""
OFF_SWITCH = "PROVISION_LAB_TORCH"  # =0: nodes without the layer (spec.py), custom.lab.torch: false per host


def layer_path() -> Path:
    """The layer's directory: root/ (what nodes mount) and layer.txt. It exists only once complete."""
    return rootfs.CACHE / f"python-torch-{TORCH_BUILD.replace('+', '-')}-py{NODE_PYTHON}-r{LAYER_REVISION}"


def ensure_torch_layer(log=print) -> Path:
    """The layer's root, built first if needed (pip from local wheels: about 15 s, ~750 MB). LabError if not."""

    def build(tmp: Path) -> None:
        pip = pip_command()
        site = tmp / "root" / SITE
        log(f"Building the lab's Python layer (torch {TORCH_BUILD} for the nodes' Python {NODE_PYTHON}, "
            f"with {' '.join(pip)}) into {layer_path()} ...")
        try:
            run([*pip, *pip_arguments(site)], timeout=1800)
        except LabError as exc:
            raise LabError(f"{exc}\npip could not install {TORCH_BUILD} for Python {NODE_PYTHON} "
                           f"({NODE_PLATFORM}): the CPU wheel must be where this machine's pip finds it "
                           f"(`pip config list`: find-links or an index). Without it: {OFF_SWITCH}=0, or "
                           "custom.lab.torch: false for a host of a --like inventory.") from None
        check_cpu_build(site)
        shutil.rmtree(site / "bin", ignore_errors=True)  # console scripts with this machine's python in #!
        script = tmp / "root" / TORCHRUN
        script.parent.mkdir(parents=True, exist_ok=True)
        script.write_text(TORCHRUN_SCRIPT)
        run(["chmod", "-R", "u+rwX,go+rX,go-w", str(tmp / "root")])  # whatever umask pip ran under
        script.chmod(0o755)
        installed = "".join(f"{p.name.removesuffix('.dist-info')}\n" for p in sorted(site.glob("*.dist-info")))
        command = " ".join(pip_arguments(Path("/" + SITE)))
        (tmp / "layer.txt").write_text(f"pip {command}; /{TORCHRUN}; revision {LAYER_REVISION}\n{installed}")

    return rootfs.build_cached(layer_path(), build, f"the lab's Python layer (torch {TORCH_BUILD})") / "root"


def pip_arguments(site: Path) -> list[str]:
    """`pip install` of the CPU torch into site, for the node's interpreter rather than this one."""
    compile_flag = [] if sys.version_info[:2] == tuple(map(int, NODE_PYTHON.split("."))) else ["--no-compile"]
    return ["install", "--quiet", "--disable-pip-version-check", "--no-input", "--no-warn-script-location",
            "--target", str(site), "--only-binary=:all:", "--python-version", NODE_PYTHON,
            "--implementation", "cp", "--abi", NODE_ABI, "--platform", NODE_PLATFORM, *compile_flag,
            f"torch=={TORCH_BUILD}", *EXTRAS]


def pip_command() -> list[str]:
    """This machine's pip: the running interpreter's (provision's venv), else the system python3's."""
    for candidate in ([sys.executable, "-m", "pip"], ["python3", "-m", "pip"]):
        try:
            ok = subprocess.run([*candidate, "--version"], capture_output=True, timeout=60,
                                stdin=subprocess.DEVNULL).returncode == 0
        except (OSError, subprocess.SubprocessError):
            ok = False
        if ok:
            return candidate
    raise LabError("no pip on this machine to build the lab's Python layer (torch): "
                   f"`{sys.executable} -m ensurepip` or apt-get install python3-pip; or {OFF_SWITCH}=0", 2)


def check_cpu_build(site: Path) -> str:
    """torch's version as installed in site; LabError unless it is the CPU build, without CUDA packages."""
    infos = sorted(site.glob("torch-*.dist-info"))
    if len(infos) != 1:
        raise LabError(f"pip left {len(infos)} torch installations in {site}: expected one ({TORCH_BUILD})")
    version = next((line.split(":", 1)[1].strip() for line in (infos[0] / "METADATA").read_text().splitlines()
                    if line.startswith("Version:")), "")
    cuda = sorted(p.name for p in site.glob("nvidia*.dist-info"))
    if version != TORCH_BUILD or cuda:
        raise LabError(f"pip installed torch {version or '(no version)'}{' with ' + ', '.join(cuda) if cuda else ''}"
                       f": not the CPU build {TORCH_BUILD}; the lab never uses a CUDA build")
    return version


def wanted() -> bool:
    """Nodes get the layer unless PROVISION_LAB_TORCH says no (0, no, false, off)."""
    return os.environ.get(OFF_SWITCH, "1").strip().lower() not in ("0", "no", "false", "off")
