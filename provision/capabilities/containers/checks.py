"""Container checks (provision_driver.container_toolkit): the toolkit at its pinned version, the CDI spec of the
loaded driver, the engines installed here configured for the nvidia runtime. The toolkit's tasks file what they
would change under these (tasks.py: Change.cause), so each cause is one finding."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from provision.capabilities.driver.packages import reboot_reasons
from provision.capabilities.containers.tasks import NO_CTK, TOOLKIT_CHECK, stale_specs, toolkit_pin
from provision.core.checks import ERROR, Finding, fail, fail_each

if TYPE_CHECKING:  # types only
    from provision.capabilities.driver.settings import DriverSettings
    from provision.verify.model import Node


def _wanted(node: Node) -> tuple[DriverSettings, str]:
    wanted = node.inventory.settings.driver
    if wanted is None or wanted.container_toolkit is None:
        pytest.skip("the inventory sets no provision_driver.container_toolkit for this host")
    return wanted, wanted.container_toolkit


def _unless_nvidia_ctk(node: Node) -> None:
    if not node.facts.containers.ctk:
        pytest.skip(f"not judged while {NO_CTK} ({TOOLKIT_CHECK} says why)")


def check_container_toolkit_is_the_pinned_version(node: Node) -> None:
    """Reads: provision_driver.container_toolkit and .hold; the toolkit's packages dpkg has installed, and held.
    Next step: `provision apply INVENTORY --limit NODE` (installs them at the pinned version and holds them)."""
    wanted, version = _wanted(node)
    pin, found = toolkit_pin(version), node.facts.containers
    missing = pin.misses(found.packages, found.held, wanted.hold)
    if missing:
        fail(f"{', '.join(pin.names)} at {version}" + (", held" if wanted.hold else ""), missing, node.apply_command(),
             severity=ERROR)


def check_cdi_spec_names_the_loaded_driver(node: Node) -> None:
    """Reads: provision_driver.container_toolkit; /etc/cdi/nvidia.yaml and /var/run/cdi/nvidia.yaml (the driver
    version of the libraries they mount), the loaded driver (/proc/driver/nvidia/version).
    Next step: `provision apply INVENTORY --limit NODE` (or on the node: `sudo nvidia-ctk cdi generate
    --output=/var/run/cdi/nvidia.yaml`). A stale spec fails every GPU container: "crun: cannot stat
    `/lib64/libEGL_nvidia.so.550.54.14`: No such file or directory"."""
    _wanted(node)
    loaded = node.facts.driver.loaded
    if loaded is None:
        pytest.skip("not judged while no NVIDIA module is loaded (driver_loaded_is_the_pinned_version says why)")
    _unless_nvidia_ctk(node)
    if reboot_reasons(node.inventory.settings.driver, node.facts):
        pytest.skip("not judged while the driver waits for a reboot (driver_loaded_is_the_pinned_version says why)")
    stale = stale_specs(node.facts.containers, loaded)
    if stale:
        named = "; ".join(f"{path}: {state}" for path, state in stale)
        generate = " && ".join(f"sudo nvidia-ctk cdi generate --output={path}" for path, _ in stale)
        fail(f"a CDI spec of driver {loaded}, the loaded one",
             f"{named} (GPU containers fail: the engine cannot stat the libraries it names)",
             f"{node.apply_command()} (or on the node: {generate})", severity=ERROR)


def check_container_engines_use_the_nvidia_runtime(node: Node) -> None:
    """Reads: provision_driver.container_toolkit; docker and containerd where installed (dockerd, containerd on the
    PATH) and what `nvidia-ctk runtime configure` writes for them: /etc/docker/daemon.json's runtimes.nvidia,
    containerd's runtimes.nvidia in /etc/containerd/config.toml (toolkit before 1.18) or in
    /etc/containerd/conf.d/99-nvidia.toml, imported by config.toml (1.18 on).
    Next step: `provision apply INVENTORY --limit NODE` (or on the node: `sudo nvidia-ctk runtime configure
    --runtime=ENGINE && sudo systemctl restart ENGINE`)."""
    _wanted(node)
    found = node.facts.containers
    if not found.engines:
        pytest.skip("neither docker nor containerd is installed here (provision installs no container engine)")
    _unless_nvidia_ctk(node)
    fail_each([Finding(f"{engine} configured for the nvidia runtime", problem,
                       f"{node.apply_command()} (or on the node: sudo nvidia-ctk runtime configure --runtime={engine} && "
                       f"sudo systemctl restart {engine})", about=(engine,), severity=ERROR)
               for engine, problem in found.runtime_problems.items() if problem])
