"""The capabilities provision ships, in one place: each one's verify checks (and, as they move here, its
settings block, fact sections and tasks). A new capability is a folder under capabilities/ plus its lines here."""

from __future__ import annotations

import importlib.util
from pathlib import Path

# verify runs the checks in this order (its report lists them so): one module per capability, a few have two.
CHECKS = (
    "provision.capabilities.driver.checks",
    "provision.capabilities.gpu.checks",
    "provision.capabilities.health.checks",
    "provision.capabilities.health.checks_kernel",
    "provision.capabilities.nccl.checks",
    "provision.capabilities.slurm.checks",
    "provision.capabilities.topology.checks",
)


def check_files() -> list[Path]:
    """The check modules' files, for verify's pytest session (found, not imported: pytest imports them)."""
    files = []
    for name in CHECKS:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            raise LookupError(f"{name}: a check module the registry lists is not installed")
        files.append(Path(spec.origin))
    return files
