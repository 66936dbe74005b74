"""Read an inventory: its format's reader (formats/), then build.py; or this machine as the one host."""

from __future__ import annotations

from pathlib import Path

from provision.inventory.build import Builder
from provision.inventory.formats import yaml as yaml_format
from provision.inventory.model import Inventory


def load_inventory(path: str | Path) -> Inventory:
    """Read and validate an inventory file; raises InputError listing every problem."""
    return Builder(str(path), Path(path).resolve().parent).build(yaml_format.read(path))


def local_inventory(vars: dict | None = None) -> Inventory:
    """This machine as the one host "localhost" (connection local), its settings validated from `vars`."""
    return Builder("<local>", Path.cwd()).build({"all": {"hosts": {"localhost": {**(vars or {}), "connection": "local"}}}})
