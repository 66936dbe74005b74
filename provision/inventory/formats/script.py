"""An executable inventory script, run as Ansible runs one (its `script` plugin): `SCRIPT --list` prints JSON,

    {"gpu": {"hosts": ["node1", "node2"], "vars": {...}, "children": ["v100"]},
     "login": ["head"],                                  # a list: the group's hosts
     "_meta": {"hostvars": {"node1": {"ansible_host": "10.0.0.1"}}}}

and, where it gives no `_meta.hostvars`, `SCRIPT --host NAME` prints each host's variables. The result is put
in the document shape the YAML reader gives (all: {hosts, children, vars}), for build.py.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from provision.core.errors import InputError, Problem

TIMEOUT = 120.0  # a script that asks a cloud API may be slow; one that hangs must not hang the run


def is_script(path: Path) -> bool:
    """Executable and starting with `#!`: Ansible runs any executable file and falls back to reading it when
    that fails; a file without `#!` cannot be run, so it is read."""
    if not os.access(path, os.X_OK):
        return False
    with open(path, "rb") as fh:
        return fh.read(2) == b"#!"


def read(path: str | Path) -> dict:
    """The inventory the script prints, as a document; InputError naming the script for anything else."""
    file = str(path)
    data = _json(file, _run(file, "--list"), "--list")
    if not isinstance(data, dict):
        raise InputError([Problem(file, "", "", f"--list printed {type(data).__name__}, not a JSON object of groups",
                                  "an inventory script prints {\"group\": {\"hosts\": [...]}, \"_meta\": ...}")])
    meta = data.pop("_meta", {})
    hostvars = meta.get("hostvars") if isinstance(meta, dict) else None
    document: dict[str, Any] = {}
    problems: list[Problem] = []
    for group, body in data.items():
        document[str(group)] = _group(file, str(group), body, problems)
    if problems:
        raise InputError(problems)
    _place_host_vars(file, document, hostvars)
    return document


def _group(file: str, name: str, body: Any, problems: list[Problem]) -> dict:
    if not isinstance(body, dict):  # the old form: a list of hosts
        body = {"hosts": body}
    elif not any(k in body for k in ("hosts", "vars", "children")):  # the oldest: the group is its one host
        body = {"hosts": [name], "vars": body}
    group: dict[str, Any] = {"vars": body.get("vars") or {}}
    for key in ("hosts", "children"):
        names = body.get(key) or []
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            problems.append(Problem(file, f"group {name}", key, f"{key} must be a list of names, "
                                    f"not {json.dumps(names)[:60]}"))
            names = []
        group[key] = dict.fromkeys(names)
    return group


def _place_host_vars(file: str, document: dict, hostvars: dict | None) -> None:
    """Each host's variables, written where it is first listed (in `ungrouped` when only `all` lists it,
    as Ansible places it); from `--host NAME` when the script gave no `_meta.hostvars`."""
    placed: set[str] = set()
    if "all" in document and document["all"]["hosts"]:
        document.setdefault("ungrouped", {"hosts": {}})["hosts"].update(document["all"].pop("hosts"))
    for group in document.values():
        for host in group.get("hosts", {}):
            if host in placed:
                continue
            placed.add(host)
            variables = hostvars.get(host, {}) if hostvars is not None else _json(file, _run(file, "--host", host),
                                                                                  f"--host {host}")
            group["hosts"][host] = variables or None


def _run(file: str, *args: str) -> str:
    try:
        proc = subprocess.run([os.path.abspath(file), *args], capture_output=True, text=True, timeout=TIMEOUT,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise InputError([Problem(file, "", "", f"the inventory script did not answer {' '.join(args)} in "
                                  f"{TIMEOUT:.0f} s")]) from None
    except OSError as exc:
        raise InputError([Problem(file, "", "", f"cannot run the inventory script: {exc.strerror}")]) from None
    if proc.returncode != 0:
        said = proc.stderr.strip().splitlines()[-1:] or ["(nothing on stderr)"]
        raise InputError([Problem(file, "", "", f"the inventory script exited {proc.returncode} on "
                                  f"{' '.join(args)}: {said[0][:200]}", "run it by hand to see why")])
    return proc.stdout


def _json(file: str, text: str, asked: str) -> Any:
    if not text.strip() and asked.startswith("--host"):
        return {}
    try:
        return json.loads(text)
    except ValueError as exc:
        raise InputError([Problem(file, "", "", f"the inventory script's {asked} output is not JSON: {exc}",
                                  "an inventory script prints one JSON object")]) from None
