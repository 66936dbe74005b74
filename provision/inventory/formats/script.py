"""An executable inventory script, run as Ansible runs one (its `script` plugin): `SCRIPT --list` prints JSON,

    {"gpu": {"hosts": ["node1", "node2"], "vars": {...}, "children": ["v100"]},
     "login": ["head"],                                  # a list: the group's hosts
     "_meta": {"hostvars": {"node1": {"ansible_host": "10.0.0.1"}}}}

and, where it gives no `_meta.hostvars`, `SCRIPT --host NAME` prints each host's variables. The result is put
in the document shape the YAML reader gives (all: {hosts, children, vars}), for build.py.

Bounded where Ansible waits: the script has TIMEOUT seconds to print and exit (then it is killed, with the
processes it started: it runs in a session of its own), and may print at most MAX_OUTPUT_BYTES. Its output is
what it printed by the time it exited, and up to AFTER_EXIT seconds after: a process it left running that still
holds its stdout is not waited for (Ansible waits until that one closes it too), nor killed.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from provision.core.errors import InputError, Problem
from provision.core.localfiles import MAX_FILE_BYTES, read_bytes, size_words

TIMEOUT = 120.0  # a script that asks a cloud API may be slow; one that hangs must not hang the run
AFTER_EXIT = 1.0  # seconds its output may still come once the script has exited (a pipe drains in far less)
MAX_OUTPUT_BYTES = MAX_FILE_BYTES  # what it prints is an inventory file's text, bounded as one
STDERR_KEPT = 64 * 1024  # the end of what it says on stderr: its last line is quoted when it fails
POLL = 0.1  # seconds between looks at whether the script has exited, while it prints nothing


def is_script(path: Path) -> bool:
    """Executable and starting with `#!`: Ansible runs any executable file and falls back to reading it when
    that fails; a file without `#!` cannot be run, so it is read."""
    if not os.access(path, os.X_OK):
        return False
    return read_bytes(path, "inventory", 2, whole=False) == b"#!"  # of a regular file: a FIFO's open would block


def read(path: str | Path) -> dict[str, Any]:
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


def _group(file: str, name: str, body: Any, problems: list[Problem]) -> dict[str, Any]:
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


def _place_host_vars(file: str, document: dict[str, Any], hostvars: dict[Any, Any] | None) -> None:
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
    asked = " ".join(args)
    try:
        proc = subprocess.Popen([os.path.abspath(file), *args], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True)
    except OSError as exc:
        raise InputError([Problem(file, "", "", f"cannot run the inventory script: {exc.strerror}")]) from None
    try:
        out, err = _output(proc)
    finally:
        if proc.poll() is None:  # it did not exit in time, or printed too much: it and what it started
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:  # gone meanwhile
                pass
        proc.wait()
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.close()
        proc.stderr.close()
    if out is None:
        raise InputError([Problem(file, "", "", f"the inventory script printed more than "
                                  f"{size_words(MAX_OUTPUT_BYTES)} on {asked} (provision's limit)",
                                  "is it the inventory script meant?")])
    if err is None:
        raise InputError([Problem(file, "", "", f"the inventory script did not answer {asked} in "
                                  f"{TIMEOUT:.0f} s")])
    if proc.returncode != 0:
        said = err.decode("utf-8", "replace").strip().splitlines()[-1:] or ["(nothing on stderr)"]
        raise InputError([Problem(file, "", "", f"the inventory script exited {proc.returncode} on "
                                  f"{asked}: {said[0][:200]}", "run it by hand to see why")])
    try:
        return out.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError([Problem(file, "", "", f"the inventory script's {asked} output is not UTF-8 (byte "
                                  f"{exc.start})", "an inventory script prints one JSON object")]) from None


def _output(proc: subprocess.Popen[bytes]) -> tuple[bytes | None, bytes | None]:
    """What the script prints on stdout, and the end of its stderr, by the time it exits (and AFTER_EXIT more);
    stdout None where it passes MAX_OUTPUT_BYTES, stderr None where the script has not exited by TIMEOUT."""
    out, err = bytearray(), bytearray()
    deadline = time.monotonic() + TIMEOUT
    end = deadline
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ, out)  # type: ignore[arg-type]
        selector.register(proc.stderr, selectors.EVENT_READ, err)  # type: ignore[arg-type]
        while selector.get_map():
            if end == deadline and proc.poll() is not None:
                end = min(deadline, time.monotonic() + AFTER_EXIT)
            left = end - time.monotonic()
            if left <= 0:
                break
            for key, _ in selector.select(min(left, POLL)):
                chunk = os.read(key.fd, 1 << 16)
                if not chunk:
                    selector.unregister(key.fileobj)
                    continue
                key.data.extend(chunk)
                if len(out) > MAX_OUTPUT_BYTES:
                    return None, bytes(err)
                if len(err) > 2 * STDERR_KEPT:
                    del err[:-STDERR_KEPT]
    try:
        proc.wait(max(0.0, deadline - time.monotonic()))  # its pipes are closed: it may still be at work
    except subprocess.TimeoutExpired:
        return bytes(out), None
    return bytes(out), bytes(err)


def _json(file: str, text: str, asked: str) -> Any:
    if not text.strip() and asked.startswith("--host"):
        return {}
    try:
        return json.loads(text)
    except RecursionError:
        raise InputError([Problem(file, "", "", f"the inventory script's {asked} output is nested too deeply to "
                                  "read", "an inventory is a few levels of groups, hosts and variables")]) from None
    except ValueError as exc:
        raise InputError([Problem(file, "", "", f"the inventory script's {asked} output is not JSON: {exc}",
                                  "an inventory script prints one JSON object")]) from None
