"""Where an inventory comes from, found as Ansible finds it: each -i source is a file (YAML, INI or an executable
script), a directory (every inventory file in it, in sorted order, skipping the names and extensions Ansible
skips), or a host list (`-i "node1,node2,"`). Beside each source's directory, group_vars/ and host_vars/ hold
variables files: `NAME`, `NAME.yml`, `NAME.yaml` or `NAME.json` (the first found), or a directory `NAME/` whose
files are read in sorted order.

Every file is read by files.py: a regular file, of at most files.MAX_FILE_BYTES (a device, a FIFO or a socket in
an inventory directory is an error naming it). A symbolic link back to a directory above it is an error too, where
Ansible would read the same files again and again until the path grew too long."""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path
from typing import Any, Iterable, Iterator

from provision.core.errors import InputError, Problem
from provision.core.localfiles import read_text
from provision.inventory.formats import ini as ini_format
from provision.inventory.formats import script as script_format
from provision.inventory.formats import yaml as yaml_format
from provision.inventory.model import Document

YAML_SUFFIXES = (".yml", ".yaml", ".json")  # Ansible's yaml inventory plugin's extensions, and its vars files'
# Ansible's defaults for a directory source: IGNORED_ALWAYS, and INVENTORY_IGNORE_EXTS (REJECT_EXTS + 3 more)
IGNORED_NAMES = re.compile(r"^\.|^host_vars$|^group_vars$|^vars_plugins$")
IGNORED_EXTENSIONS = (".pyc", ".pyo", ".swp", ".bak", "~", ".rpm", ".md", ".txt", ".rst", ".orig", ".cfg", ".retry")


def read_source(source: str) -> list[Document]:
    """The documents of one -i source, in Ansible's order."""
    path = Path(source)
    if not path.exists() and "," in source:
        return [_host_list(source)]
    if path.is_dir():
        return list(_directory(path, path, frozenset()))
    if not path.exists():
        raise InputError([Problem(source, "", "", "no such inventory file or directory",
                                  "give the inventory's path (a file, or the directory ansible-playbook -i takes)")])
    return [_file(path, path.parent)]


def _directory(path: Path, base: Path, above: frozenset[tuple[int, int]]) -> Iterator[Document]:
    try:
        entries = sorted(os.listdir(path))
        above = _below(path, above)
    except OSError as exc:
        raise InputError([Problem(str(path), "", "", f"cannot read the directory: {exc.strerror}")]) from None
    for entry in entries:
        if IGNORED_NAMES.search(entry) or entry.endswith(IGNORED_EXTENSIONS):
            continue
        if (path / entry).is_dir():
            yield from _directory(path / entry, base, above)  # its group_vars/ are not read: only the source's
        else:
            yield _file(path / entry, base)


def _below(directory: Path, above: frozenset[tuple[int, int]]) -> frozenset[tuple[int, int]]:
    """The directories above a subdirectory of `directory`; InputError if `directory` is one of `above` again
    (a symbolic link loop, which would be read again and again)."""
    info = directory.stat()
    if (info.st_dev, info.st_ino) in above:
        raise InputError([Problem(str(directory), "", "", f"leads back to {os.path.realpath(directory)}, a directory "
                                  "above it: a symbolic link loop", "remove the link")])
    return above | {(info.st_dev, info.st_ino)}


def _file(path: Path, base: Path) -> Document:
    if script_format.is_script(path):
        return Document(str(path), script_format.read(path), base)
    return Document(str(path), read_document(path), base)


def read_document(path: str | Path) -> Any:
    """The file's document in the YAML reader's shape, read as Ansible's enabled inventory plugins read a file
    (host_list, script, auto, yaml, ini, toml: the first that takes it): its yaml plugin for a name ending in
    .yml, .yaml or .json or without extension, then its ini plugin for any name. So a .yaml file of INI text
    (terraform writes them) is INI, and a file that neither reads is an error saying what each said."""
    file, text = str(path), read_text(path, "inventory")
    suffix = os.path.splitext(path)[1]
    if suffix == ".toml":  # only Ansible's toml plugin reads these: its yaml and ini plugins leave them
        raise InputError([Problem(file, "", "", "is a TOML inventory, which provision does not read",
                                  f"write it as YAML: ansible-inventory -i {path} --list --yaml > hosts.yml")])
    readers = [("INI", ini_format.parse_file)]
    if suffix in ("", *YAML_SUFFIXES):
        readers.insert(0, ("YAML", lambda text, file: _not_a_plugin(path, yaml_format.inventory(text, file))))
    refused: list[tuple[str, InputError]] = []
    for kind, reader in readers:
        try:
            return reader(text, file)
        except PluginFile:
            raise
        except InputError as exc:
            refused.append((kind, exc))
    if len(refused) == 1 or yaml_format.opens_as_mapping(text):  # meant as YAML: INI's "cannot read all:" is noise
        raise refused[0][1]
    raise InputError([dataclasses.replace(problem, where=", ".join(filter(None, (f"read as {kind}", problem.where))))
                      for kind, exc in refused for problem in exc.problems])


class PluginFile(InputError):
    """The configuration of an inventory plugin: no other reader is tried (Ansible's auto plugin takes these)."""


def _not_a_plugin(path: str | Path, document: Any) -> Any:
    """An inventory plugin's configuration (`plugin: openstack.cloud.openstack`) asks a service for the hosts:
    refused by name, with the way to give provision the hosts it finds."""
    if isinstance(document, dict) and isinstance(document.get("plugin"), str):
        raise PluginFile([Problem(str(path), "", "plugin", f"is the configuration of Ansible's inventory plugin "
                                  f"{document['plugin']!r}; provision reads inventory files and scripts",
                                  f"write the hosts it finds to a file: ansible-inventory -i {path} --list --yaml "
                                  "> hosts.yml, and give provision that file")])
    return document


def _host_list(source: str) -> Document:
    """`-i "node1,node2:2222,"`: Ansible's host_list: names (and ports), in "ungrouped"."""
    hosts: dict[str, dict[str, int] | None] = {}
    for item in (part.strip() for part in source.split(",")):
        name, colon, port = item.rpartition(":")
        if colon and port.isdigit() and ":" not in name:
            hosts[name] = {"ansible_port": int(port)}
        elif item:
            hosts[item] = None
    return Document(source, {"ungrouped": {"hosts": hosts}}, Path.cwd(), vars_dir=False)


class VarsDir:
    """group_vars/ or host_vars/ beside a source: listed once (a 10,000-host inventory looks up every name)."""

    def __init__(self, path: Path):
        self.path = path
        self.entries = set(os.listdir(path)) if path.is_dir() else set()

    def files(self, name: str) -> list[Path]:
        """The files that hold NAME's variables, in the order they are read (DataLoader.find_vars_files)."""
        for candidate in (name, *(name + suffix for suffix in YAML_SUFFIXES)):
            if candidate in self.entries:
                found = self.path / candidate
                return _files_in(found, frozenset()) if found.is_dir() else [found]
        return []


def _files_in(path: Path, above: frozenset[tuple[int, int]]) -> list[Path]:
    """A NAME/ directory's variables files: sorted, into subdirectories, without hidden files and backups."""
    above = _below(path, above)
    found: list[Path] = []
    for entry in sorted(os.listdir(path)):
        if entry.startswith(".") or entry.endswith("~"):
            continue
        full, suffix = path / entry, os.path.splitext(entry)[1]
        if full.is_dir() and not suffix:
            found += _files_in(full, above)
        elif full.is_file() and (not suffix or suffix in YAML_SUFFIXES):
            found.append(full)
    return found


def vars_files(base: Path, groups: Iterable[str], hosts: Iterable[str]) -> Iterator[tuple[str, str, Path]]:
    """("group"|"host", name, file) for each variables file beside a source, groups first."""
    for kind, names in (("group", groups), ("host", hosts)):
        directory = VarsDir(base / f"{kind}_vars")
        if directory.entries:
            for name in names:
                for file in directory.files(name):
                    yield kind, name, file
