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

The provision layer (provision_custom.lab.provision: true on a host; ensure_provision_layer): this checkout's provision,
built into a wheel (`pip wheel --no-deps` of a copy of its sources) and installed with its dependencies the
same way (wheels only, cp311 or pure, manylinux for glibc 2.36 or older), with /usr/local/bin/provision
(`/usr/bin/python3 -m provision`), so a node runs `provision verify --local` (Slurm's HealthCheckProgram).
Keyed by a hash of the sources (provision_key): an edit makes a new layer, and building one removes the
older provision layers no mounted node uses. It goes above the torch layer (lowerdir=PROVISION:TORCH:IMAGE).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import provision
from provision_lab import layout, rootfs
from provision_lab.system import LabError, remove_tree, run

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
OFF_SWITCH = "PROVISION_LAB_TORCH"  # =0: nodes without the layer (spec.py), provision_custom.lab.torch: false per host


def layer_path() -> Path:
    """The layer's directory: root/ (what nodes mount) and layer.txt. It exists only once complete."""
    return layout.CACHE / f"python-torch-{TORCH_BUILD.replace('+', '-')}-py{NODE_PYTHON}-r{LAYER_REVISION}"


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
                           "provision_custom.lab.torch: false for a host of a --like inventory.") from None
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


# --- the provision layer: this checkout for the nodes' python3 ------------------------------------------

PROVISION_PREFIX = "python-provision-"  # every provision layer in the cache: the pruning touches only these
PROVISION_REVISION = 1  # bump when the layer's build changes
# glibc 2.36 and older: pip expands only the legacy manylinux2014 name to older ones, so each is named
NODE_PLATFORMS = (*(f"manylinux_2_{minor}_x86_64" for minor in range(36, 16, -1)), "manylinux2014_x86_64")
# What the wheel is built from: the lab too, as the one install line installs it (`provision demo` runs its simulator)
SOURCES = ("pyproject.toml", "README.md", "provision", "provision_lab", "templates", "playbooks")
UNKEYED = ("README.md",)  # only the wheel's long description: an edit there makes no new layer
NOT_SOURCES = ("__pycache__", ".pytest_cache")  # directories left out of the key and the build's copy
PROVISION_BIN = "usr/local/bin/provision"
PROVISION_SCRIPT = """\
#!/bin/sh
# provision lab: this checkout's provision for the node's python3 (the lab's provision layer, pylayer.py)
exec /usr/bin/python3 -m provision "$@"
"""


def repo_root() -> Path:
    """The checkout provision runs from: the directory holding pyproject.toml beside the provision package."""
    root = Path(provision.__file__).resolve().parents[1]
    if not (root / "pyproject.toml").is_file() or not (root / "provision" / "__main__.py").is_file():
        raise LabError(f"provision runs from {root}, not a checkout (no pyproject.toml there): the lab's "
                       "provision layer is built from one; leave provision_custom.lab.provision out", 2)
    return root


def source_files(repo: Path) -> list[str]:
    """Every file of SOURCES under repo (relative, sorted; symbolic links as links), caches left out."""
    found = []
    for name in SOURCES:
        top = repo / name
        if top.is_file() or top.is_symlink():
            found.append(name)
            continue
        for directory, subdirs, files in os.walk(top):
            subdirs[:] = [d for d in subdirs if d not in NOT_SOURCES and not d.endswith(".egg-info")
                          or (Path(directory) / d).is_symlink()]
            links = [d for d in subdirs if (Path(directory) / d).is_symlink()]  # os.walk does not follow them
            for file in [*files, *links]:
                if not file.endswith((".pyc", ".pyo")):
                    found.append(str((Path(directory) / file).relative_to(repo)))
    return sorted(found)


def provision_key(repo: Path) -> str:
    """A hash of the sources (names, contents, link targets; not the README) and of how the layer is built:
    any edit of the packages, their templates, playbooks or pyproject.toml, a new key."""
    digest = hashlib.sha256(f"rev{PROVISION_REVISION} {NODE_PYTHON} {' '.join(NODE_PLATFORMS)}\0".encode())
    for name in source_files(repo):
        if name in UNKEYED:
            continue
        path = repo / name
        content = f"-> {os.readlink(path)}".encode() if path.is_symlink() else path.read_bytes()
        digest.update(f"{name}\0{len(content)}\0".encode())
        digest.update(content)
    return digest.hexdigest()[:12]


def provision_layer_path(repo: Path | None = None, key: str | None = None) -> Path:
    """The provision layer's directory for the checkout as it is now (root/ and layer.txt, once complete)."""
    key = key or provision_key(repo or repo_root())
    return layout.CACHE / f"{PROVISION_PREFIX}{provision.__version__}-py{NODE_PYTHON}-{key}"


def ensure_provision_layer(log=print) -> Path:
    """The provision layer's root, built first if this checkout has none yet (about 15 s, ~60 MB)."""
    repo = repo_root()
    key = provision_key(repo)
    path = provision_layer_path(repo, key)

    def build(tmp: Path) -> None:
        pip = pip_command()
        site = tmp / "root" / SITE
        log(f"Building the lab's provision layer (this checkout, {repo}, for the nodes' Python {NODE_PYTHON}, "
            f"with {' '.join(pip)}) into {path} ...")
        copy_sources(repo, tmp / "src")
        if provision_key(tmp / "src") != key:
            raise LabError(f"{repo} changed while the provision layer was being built: run it again")
        wheel = build_wheel(pip, tmp / "src", tmp / "wheel")
        try:
            run([*pip, *provision_pip_arguments(site, wheel)], timeout=1800)
        except LabError as exc:
            raise LabError(f"{exc}\npip could not install provision's dependencies for Python {NODE_PYTHON} "
                           f"(wheels only, manylinux x86_64): they must be where this machine's pip finds them "
                           "(`pip config list`: find-links or an index). Without them: leave "
                           "provision_custom.lab.provision out of the --like inventory.") from None
        kinds = check_wheel_tags(site)
        if not any(name.startswith("provision-") for name in kinds):
            raise LabError(f"pip did not install provision itself into {site}")
        shutil.rmtree(site / "bin", ignore_errors=True)  # console scripts with this machine's python in #!
        remove_tree(tmp / "src")
        remove_tree(tmp / "wheel")
        script = tmp / "root" / PROVISION_BIN
        script.parent.mkdir(parents=True, exist_ok=True)
        script.write_text(PROVISION_SCRIPT)
        run(["chmod", "-R", "u+rwX,go+rX,go-w", str(tmp / "root")])
        script.chmod(0o755)
        command = " ".join(provision_pip_arguments(Path("/" + SITE), Path(wheel.name)))
        (tmp / "layer.txt").write_text(f"{repo} (key {key}): pip {command}; /{PROVISION_BIN}; "
                                       f"revision {PROVISION_REVISION}\n"
                                       + "".join(f"{name} {tags}\n" for name, tags in sorted(kinds.items())))
        for stale in stale_provision_layers(path):  # under the cache's lock: no build of another is under way
            log(f"Removing the older provision layer {stale}")
            remove_tree(stale)

    return rootfs.build_cached(path, build, "the lab's provision layer") / "root"


def copy_sources(repo: Path, src: Path) -> None:
    """SOURCES of repo into src, what the wheel is built from: the checkout's own build/ and egg-info, stale
    or not, stay out of it, and the build writes nothing into the checkout."""
    src.mkdir(parents=True, exist_ok=True)
    for name in SOURCES:
        if (repo / name).is_dir():
            shutil.copytree(repo / name, src / name, symlinks=True,
                            ignore=shutil.ignore_patterns(*NOT_SOURCES, "*.egg-info", "*.pyc", "*.pyo"))
        elif (repo / name).exists():
            shutil.copy2(repo / name, src / name)


def build_wheel(pip: list[str], src: Path, out: Path) -> Path:
    """provision's wheel (pure Python), built from the copy of its sources in src."""
    run([*pip, *wheel_arguments(src, out)], timeout=600)
    wheels = sorted(out.glob("provision-*.whl"))
    if len(wheels) != 1 or not wheels[0].name.endswith("-py3-none-any.whl"):
        raise LabError(f"pip wheel made {', '.join(w.name for w in wheels) or 'no provision wheel'} in {out}: "
                       "expected one pure-Python provision-*-py3-none-any.whl")
    return wheels[0]


def wheel_arguments(src: Path, out: Path) -> list[str]:
    """`pip wheel` of provision alone (its dependencies come with the install), from a local directory:
    an absolute path, which pip never takes for a name on an index."""
    return ["wheel", "--quiet", "--disable-pip-version-check", "--no-input", "--no-deps", "-w", str(out.absolute()),
            str(src.absolute())]


def provision_pip_arguments(site: Path, wheel: Path) -> list[str]:
    """`pip install` of provision's wheel and its dependencies into site, for the node's interpreter."""
    compile_flag = [] if sys.version_info[:2] == tuple(map(int, NODE_PYTHON.split("."))) else ["--no-compile"]
    platforms = [argument for platform in NODE_PLATFORMS for argument in ("--platform", platform)]
    return ["install", "--quiet", "--disable-pip-version-check", "--no-input", "--no-warn-script-location",
            "--target", str(site), "--only-binary=:all:", "--python-version", NODE_PYTHON,
            "--implementation", "cp", "--abi", NODE_ABI, *platforms, *compile_flag, str(wheel)]


def tag_fits_node(tag: str) -> bool:
    """A wheel tag the node's python3 loads: pure Python, or CPython 3.11 (or abi3 of an older 3.x) for
    manylinux x86_64."""
    try:
        interpreter, abi, platform = tag.split("-")
    except ValueError:
        return False
    interpreters = interpreter.split(".")  # py2.py3-none-any: either
    if platform == "any":
        return abi == "none" and any(i in ("py3", "py" + NODE_ABI[2:], NODE_ABI) for i in interpreters)
    node = int(NODE_ABI[3:])  # 11
    minors = [int(i[3:]) for i in interpreters if i.startswith("cp3") and i[3:].isdigit()]
    abi_ok = abi == NODE_ABI and node in minors or abi == "abi3" and any(minor <= node for minor in minors)
    platform_ok = all(p.startswith("manylinux") and p.endswith("_x86_64") for p in platform.split("."))
    return abi_ok and platform_ok


def check_wheel_tags(site: Path) -> dict[str, str]:
    """name-version -> its wheel tags, for every distribution pip installed in site; LabError when one was
    built for another interpreter or platform."""
    found, wrong = {}, []
    for info in sorted(site.glob("*.dist-info")):
        wheel = info / "WHEEL"
        tags = [line.split(":", 1)[1].strip() for line in (wheel.read_text().splitlines() if wheel.exists() else [])
                if line.startswith("Tag:")]
        name = info.name.removesuffix(".dist-info")
        found[name] = " ".join(tags)
        if not any(tag_fits_node(tag) for tag in tags):
            wrong.append(f"{name} ({', '.join(tags) or 'no WHEEL tags'})")
    if wrong:
        raise LabError(f"pip installed wheels the nodes' Python {NODE_PYTHON} (x86_64, glibc 2.36) cannot load: "
                       + "; ".join(wrong))
    return found


def stale_provision_layers(keep: Path, mountinfo: Path = Path("/proc/self/mountinfo")) -> list[Path]:
    """Provision layers in keep's directory other than keep, leaving out any a mounted node uses (an overlay
    whose lowerdir names it: a running lab keeps the layer it was made with)."""
    mounts = mountinfo.read_text() if mountinfo.exists() else ""
    return [layer for layer in sorted(keep.parent.glob(PROVISION_PREFIX + "*"))
            if layer != keep and layer.is_dir() and f"{layer}/root" not in mounts]
