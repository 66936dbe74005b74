"""Read an inventory: its format's reader (formats/), then build.py; or this machine as the one host."""

from __future__ import annotations

from pathlib import Path

from typing import Any

from provision.core.errors import InputError
from provision.inventory.build import Builder
from provision.inventory.formats import ini as ini_format
from provision.inventory.formats import yaml as yaml_format
from provision.inventory.model import Inventory

YAML_SUFFIXES = (".yml", ".yaml", ".json")  # Ansible's yaml inventory plugin's extensions


def load_inventory(path: str | Path) -> Inventory:
    """Read and validate an inventory file; raises InputError listing every problem."""
    document, ini = read_document(path)
    return Builder(str(path), Path(path).resolve().parent, ungrouped_is_a_group=ini).build(document)


def read_document(path: str | Path) -> tuple[Any, bool]:
    """The file's document in the YAML reader's shape, and whether it was INI. .yml, .yaml and .json are YAML, .ini is INI; a file
    with another name (`hosts`, Ansible's usual one) is YAML where it reads as a YAML mapping, else INI, as
    Ansible tries its yaml plugin before its ini one."""
    suffix = Path(path).suffix
    if suffix in YAML_SUFFIXES:
        return yaml_format.read(path), False
    if suffix == ".ini":
        return ini_format.read(path), True
    try:
        document = yaml_format.read(path)
    except InputError as as_yaml:
        try:
            return ini_format.read(path), True
        except InputError as as_ini:
            raise InputError([*as_yaml.problems, *as_ini.problems]) from None
    if isinstance(document, dict) or document is None:
        return document, False
    return ini_format.read(path), True  # YAML took it for a scalar or a list: host names, one per line, are INI


def local_inventory(vars: dict | None = None) -> Inventory:
    """This machine as the one host "localhost" (connection local), its settings validated from `vars`."""
    return Builder("<local>", Path.cwd()).build({"all": {"hosts": {"localhost": {**(vars or {}), "connection": "local"}}}})
