"""Where templates and playbooks come from: a --templates/--playbook override, else the ones shipped in the package."""

from __future__ import annotations

from importlib import resources
from pathlib import Path


def shipped(kind: str) -> Path:
    """provision/data/{templates,playbooks}: symlinks to the repo's top-level folders, copied into wheels."""
    return Path(str(resources.files("provision") / "data" / kind))


def templates_dir(override: str | None = None) -> Path:
    return Path(override) if override else shipped("templates")


def playbook_path(name_or_path: str | None) -> Path:
    """A path, or the name of a shipped playbook ("site", "gpu")."""
    if name_or_path is None:
        name_or_path = "site"
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") or path.exists():
        return path
    return shipped("playbooks") / f"{name_or_path}.yaml"
