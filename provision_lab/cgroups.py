"""A node's cgroups: a child of this process's cgroup in each of this machine's cgroup v1 hierarchies.

So a node stays where the lab command's processes are, one level down, named after its network namespace.
In its cgroup namespace that child is the root: what the node mounts under /sys/fs/cgroup (nodeinit.py) and
what its slurmd makes there are its own, apart from other nodes' and this machine's. Without v1 hierarchies
here (a cgroup v2-only machine) there is no cgroup namespace, and a node's v1 mounts, where the kernel allows
them, are the machine's own hierarchies.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from provision_lab import netns

# Before the node's namespaces: the shell joins the node's cgroups (each cgroup.procs file up to "--"), then
# runs the rest of its arguments (unshare ...): every process of the node starts in them.
JOIN = 'while [ "$1" != -- ]; do echo $$ > "$1" || exit 1; shift; done; shift; exec "$@"'
CGROUP_MOUNTS = Path("/proc/self/mountinfo")


def v1_hierarchies(cgroup_file: Path = Path("/proc/self/cgroup"), mountinfo: Path = CGROUP_MOUNTS) -> list[Path]:
    """This process's cgroup directory in each cgroup v1 controller hierarchy mounted on this machine
    (named ones such as name=systemd, and the v2 unified one, left out)."""
    mounts = []  # (controllers, mount root, mount point)
    for line in mountinfo.read_text().splitlines():
        fields = line.split()
        if " - " not in line:
            continue
        fstype, _source, super_options = line.split(" - ", 1)[1].split()[:3]
        if fstype == "cgroup":
            mounts.append((set(super_options.split(",")), fields[3], fields[4].encode().decode("unicode_escape")))
    found = []
    for line in cgroup_file.read_text().splitlines():
        _id, controllers, path = line.split(":", 2)
        if not controllers or controllers.startswith("name="):
            continue
        for options, root, point in mounts:
            if set(controllers.split(",")) <= options and (path + "/").startswith(root.rstrip("/") + "/"):
                found.append(Path(point) / path[len(root.rstrip("/")):].lstrip("/"))
                break
    return found


def make_cgroups(name: str, record: Path) -> list[Path]:
    """A cgroup `name` under this process's own in each v1 hierarchy; what was made is written to record
    (before it is made: a crash leaves no cgroup unrecorded). Best effort: a hierarchy that refuses is skipped."""
    made = []
    try:
        parents = v1_hierarchies()
    except (OSError, ValueError):
        return []
    record.write_text("".join(f"{p / name}\n" for p in parents))
    for parent in parents:
        path = parent / name
        try:
            path.mkdir(exist_ok=True)
            for inherited in ("cpuset.cpus", "cpuset.mems"):  # a new cpuset has none: nothing could join it
                if (path / inherited).exists() and not (path / inherited).read_text().strip():
                    (path / inherited).write_text((parent / inherited).read_text())
            made.append(path)
        except OSError:
            continue
    return made


def remove_cgroups(record: Path, timeout: float = 5.0) -> list[str]:
    """Remove the cgroups listed in record and every cgroup made below them (deepest first), once their
    processes are gone (a killed process leaves its cgroup a moment later). Returns those left."""
    try:
        roots = [Path(line) for line in record.read_text().splitlines() if line.strip()]
    except FileNotFoundError:
        return []
    deadline = time.monotonic() + timeout
    left = []
    for root in roots:
        if not root.name.startswith(netns.PREFIX):  # only a node's own: never what else lives in a hierarchy
            continue
        while root.is_dir():
            for directory, _subdirs, _files in sorted(os.walk(root, topdown=False), key=lambda w: -len(w[0])):
                try:
                    os.rmdir(directory)
                except OSError:
                    pass
            if not root.is_dir() or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        if root.is_dir():
            left.append(str(root))
    if not left:
        record.unlink(missing_ok=True)
    return left
