"""The NVIDIA Container Toolkit as the host has it: its packages, nvidia-ctk, the CDI specs and which driver they
name, the container engines installed and whether each is configured for the nvidia runtime.

A CDI spec (`nvidia-ctk cdi generate`) mounts the driver's libraries by their versioned file names:

  containerEdits:
    mounts:
    - containerPath: /usr/lib/x86_64-linux-gnu/libcuda.so.460.91.03
      hostPath: /usr/lib/x86_64-linux-gnu/libcuda.so.460.91.03

(the toolkit's own example, NVIDIA/nvidia-container-runtime#85). After a driver upgrade those files are gone and
every container fails ("crun: cannot stat `/lib64/libEGL_nvidia.so.550.54.14`", NVIDIA/nvidia-container-toolkit#450),
so the version the spec names is the fact: libcuda's and libnvidia-ml's, the two libraries every spec of a driver
mounts (others, as libnvidia-egl-wayland.so.1.1.13, carry versions of their own).
"""

from __future__ import annotations

import fnmatch
import json
import re
import tomllib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import yaml

from provision.core import dpkg
from provision.core.facts import FactReader, FactSection, Section

if TYPE_CHECKING:  # types only
    from provision.capabilities.host import HostFacts

# The four packages of one toolkit release (NVIDIA's install guide pins them to one version).
TOOLKIT_PACKAGES = ("nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container-tools",
                    "libnvidia-container1")
# Where the container engines look for CDI specs (/etc/cdi, then /var/run/cdi), and the toolkit's own file names.
CDI_RUN = "/var/run/cdi/nvidia.yaml"  # what `nvidia-ctk cdi generate` writes in NVIDIA's current docs
CDI_ETC = "/etc/cdi/nvidia.yaml"  # the older docs' place; a spec left there is read too
CDI_SPECS = (CDI_ETC, CDI_RUN)
# What `nvidia-ctk runtime configure --runtime=ENGINE` writes (cmd/nvidia-ctk/runtime/configure/configure.go in
# NVIDIA/nvidia-container-toolkit). For containerd, the toolkit before 1.18 writes the runtime into config.toml
# itself ("Wrote updated config to /etc/containerd/config.toml", NVIDIA/nvidia-container-toolkit#433); from 1.18 on
# into a drop-in, with its directory's "*.toml" added to config.toml's `imports` (pkg/config/engine/containerd/
# config_drop_in.go). 1.18.0 wrote the drop-in under config.d (NVIDIA/nvidia-container-toolkit#1404), later ones
# under conf.d (#1407).
DOCKER_CONFIG = "/etc/docker/daemon.json"
CONTAINERD_DROP_IN = "/etc/containerd/conf.d/99-nvidia.toml"
CONTAINERD_DROP_INS = (CONTAINERD_DROP_IN, "/etc/containerd/config.d/99-nvidia.toml")
CONTAINERD_CONFIG = "/etc/containerd/config.toml"
ENGINES = {"docker": "dockerd", "containerd": "containerd"}  # engine -> the program that tells it is installed
CONFIG_FILES = (DOCKER_CONFIG, *CONTAINERD_DROP_INS, CONTAINERD_CONFIG)

DRIVER_LIBRARY = re.compile(r"/lib(?:cuda|nvidia-ml)\.so\.(\d+(?:\.\d+)+)$")

# "ctk" where nvidia-ctk is on the PATH, "engine NAME" per engine installed, "pkg NAME VERSION STATUS" per
# toolkit package dpkg knows (core/dpkg.py), then "file PATH" and its text for each spec and config file there.
CONTAINERS_SNIPPET = (
    "command -v nvidia-ctk >/dev/null 2>&1 && echo ctk; "
    + "".join(f"command -v {program} >/dev/null 2>&1 && echo 'engine {engine}'; " for engine, program in ENGINES.items())
    + dpkg.status_snippet(list(TOOLKIT_PACKAGES), "pkg ") + "; "
    + f"for f in {' '.join(CDI_SPECS + CONFIG_FILES)}; do [ -f \"$f\" ] && echo \"file $f\" && cat \"$f\" && echo; done; true"
)


@dataclass
class CdiSpecFile:
    """One CDI spec file of the toolkit's: the driver versions its libraries name, or why it names none."""

    path: str
    drivers: list[str] = field(default_factory=list)  # sorted; one in a spec generated for one driver
    problem: str = ""  # not YAML, not a CDI spec: what is wrong with it


@dataclass
class ContainersFacts:
    """The container toolkit and engines on the host (capabilities/containers/facts.py)."""

    packages: dict[str, str] = field(default_factory=dict)  # installed toolkit packages -> Debian version
    held: list[str] = field(default_factory=list)  # of those, the ones on hold
    ctk: bool = False  # nvidia-ctk on the PATH
    specs: dict[str, CdiSpecFile] = field(default_factory=dict)  # path -> spec, for the CDI_SPECS there
    engines: list[str] = field(default_factory=list)  # "docker", "containerd": installed
    # engine -> "" when its config names the nvidia runtime, else why not (for the engines installed)
    runtime_problems: dict[str, str] = field(default_factory=dict)


def parse_containers(text: str) -> ContainersFacts:
    found = ContainersFacts()
    files: dict[str, list[str]] = {}
    current: list[str] | None = None
    packages: list[str] = []
    for line in text.splitlines():
        kind, _, rest = line.partition(" ")
        if kind == "file" and rest in CDI_SPECS + CONFIG_FILES:
            current = files.setdefault(rest, [])
        elif current is not None:
            current.append(line)
        elif line == "ctk":
            found.ctk = True
        elif kind == "engine":
            found.engines.append(rest.strip())
        elif kind == "pkg":
            packages.append(rest)
    found.packages, found.held = dpkg.installed_packages(packages)
    texts = {path: "\n".join(lines) for path, lines in files.items()}
    found.specs = {path: parse_spec(path, texts[path]) for path in CDI_SPECS if path in texts}
    found.runtime_problems = {engine: runtime_problem(engine, texts) for engine in found.engines}
    return found


def parse_spec(path: str, text: str) -> CdiSpecFile:
    """A CDI spec (YAML, or JSON, which YAML reads too): the driver versions its mounts' host paths name."""
    try:
        spec = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        return CdiSpecFile(path, problem=f"not YAML: {str(exc).splitlines()[0]}")
    if not isinstance(spec, dict) or "cdiVersion" not in spec or "kind" not in spec:
        return CdiSpecFile(path, problem="not a CDI spec (no cdiVersion and kind)")
    edits = [spec.get("containerEdits")] + [d.get("containerEdits") for d in spec.get("devices") or []
                                            if isinstance(d, dict)]
    versions = {match.group(1) for e in edits if isinstance(e, dict) for mount in e.get("mounts") or []
                if isinstance(mount, dict) and (match := DRIVER_LIBRARY.search(str(mount.get("hostPath", ""))))}
    return CdiSpecFile(path, sorted(versions))


def runtime_problem(engine: str, texts: dict[str, str]) -> str:
    """"" when the engine's config names the nvidia runtime (as `nvidia-ctk runtime configure` writes it), else
    what is missing."""
    if engine == "containerd":
        return _containerd_problem(texts)
    if DOCKER_CONFIG not in texts:
        return f"no {DOCKER_CONFIG}"
    try:
        config: Any = json.loads(texts[DOCKER_CONFIG])
    except ValueError as exc:
        return f"{DOCKER_CONFIG} is not JSON: {exc}"
    return "" if _names_nvidia_runtime(config) else f"{DOCKER_CONFIG} names no nvidia runtime"


def _containerd_problem(texts: dict[str, str]) -> str:
    """containerd reads the nvidia runtime from config.toml itself (the toolkit before 1.18), or from a drop-in
    that config.toml's `imports` names, by its path or a glob (from 1.18 on)."""
    config, problem = _toml(CONTAINERD_CONFIG, texts)
    if config is not None and _names_nvidia_runtime(config):
        return ""
    for drop_in in (path for path in CONTAINERD_DROP_INS if path in texts):
        found, drop_in_problem = _toml(drop_in, texts)
        if found is None or not _names_nvidia_runtime(found):
            problem = drop_in_problem or f"{drop_in} names no nvidia runtime"
        elif config is None:
            return problem or f"no {CONTAINERD_CONFIG} (its imports name {drop_in})"
        elif _imports(config, drop_in):
            return ""
        else:
            problem = f"{CONTAINERD_CONFIG} does not import {drop_in}"
    if problem:
        return problem
    return f"{CONTAINERD_CONFIG} names no nvidia runtime" if config is not None else \
        f"no {CONTAINERD_CONFIG} nor {CONTAINERD_DROP_IN}"


def _toml(path: str, texts: dict[str, str]) -> tuple[dict[str, Any] | None, str]:
    """(the file's TOML, "") or (None, why not)."""
    if path not in texts:
        return None, ""
    try:
        return tomllib.loads(texts[path]), ""
    except ValueError as exc:
        return None, f"{path} is not TOML: {exc}"


def _imports(config: dict[str, Any], path: str) -> bool:
    imports = config.get("imports", [])
    return isinstance(imports, list) and any(fnmatch.fnmatch(path, str(pattern)) for pattern in imports)


def _names_nvidia_runtime(config: Any) -> bool:
    """A `runtimes` table with an `nvidia` entry anywhere: docker's top level; containerd's CRI plugin, whose
    table's name changed between config versions (io.containerd.grpc.v1.cri, io.containerd.cri.v1.runtime)."""
    if not isinstance(config, dict):
        return False
    runtimes = config.get("runtimes")
    return (isinstance(runtimes, dict) and "nvidia" in runtimes) or any(_names_nvidia_runtime(v) for v in config.values())


def parse(sections: dict[str, Section], facts: HostFacts) -> None:
    if "containers" in sections:
        facts.containers = parse_containers(sections["containers"].output)


# The toolkit's packages, the CDI specs and the engines' configs.
READER = FactReader((FactSection("containers", CONTAINERS_SNIPPET),), parse)
