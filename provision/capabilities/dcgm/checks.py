"""DCGM check (provision_driver.dcgm): its packages at the pinned version for the driver's CUDA major, and the host
engine up and running that version. The dcgm task files what it would change under this check (Change.cause)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from provision.capabilities.dcgm.tasks import dcgm_pin
from provision.capabilities.driver import heldback
from provision.core.checks import ERROR, fail

if TYPE_CHECKING:  # types only
    from provision.verify.model import Node


def check_dcgm_host_engine_runs_the_pinned_version(node: Node) -> None:
    """Reads: provision_driver.dcgm, .version or .branch and .hold; DCGM's packages dpkg has installed, and
    `dcgmi -v` (its own version and the host engine's, when it reaches one).
    Next step: packages: `provision apply INVENTORY --limit NODE`; the host engine: `sudo systemctl enable --now
    nvidia-dcgm` (journalctl -u nvidia-dcgm says why it stopped); another version running: `sudo systemctl restart
    nvidia-dcgm`."""
    wanted = node.inventory.settings.driver
    if wanted is None or wanted.dcgm is None:
        pytest.skip("the inventory sets no provision_driver.dcgm for this host")
    try:
        pin = dcgm_pin(heldback.as_kept(wanted, node.facts), node.facts.nvidia.gpus)
    except ValueError as exc:
        pytest.skip(str(exc))
    found, apply = node.facts.dcgm, node.apply_command()
    missing = pin.misses(found.packages, found.held, wanted.hold)
    if missing:
        fail(f"{' '.join(pin.names)} at {pin.version}" + (", held" if wanted.hold else ""), missing, apply,
             severity=ERROR)
    if found.hostengine is None:
        fail(f"the DCGM host engine (nvidia-dcgm) running {pin.version}",
             "dcgmi reaches no host engine" + (f": {found.said}" if found.said else ""),
             f"sudo systemctl enable --now nvidia-dcgm on {node.name} (journalctl -u nvidia-dcgm says why it stopped), "
             f"or {apply}", severity=ERROR)
    if found.hostengine != pin.version:
        fail(f"the DCGM host engine running {pin.version}, the version installed",
             f"it runs {found.hostengine} (started before the upgrade)",
             f"sudo systemctl restart nvidia-dcgm on {node.name}, or {apply}", severity=ERROR)
