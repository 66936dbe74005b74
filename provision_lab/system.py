"""Host plumbing for the lab: commands as argument lists, the root/Linux check, mounts."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path


class LabError(Exception):
    """A lab operation failed; the message says what and what to do. exit_code: 1 failed, 2 cannot start."""

    def __init__(self, message: str, exit_code: int = 1):
        super().__init__(message)
        self.exit_code = exit_code


TOOLS = ("ip", "unshare", "nsenter", "mount", "umount", "mknod", "chroot", "ssh-keygen", "rm")


def require_host() -> None:
    """The lab needs Linux, root and a few util-linux/iproute2/openssh tools."""
    if not sys.platform.startswith("linux"):
        raise LabError(f"the lab needs Linux (network namespaces, overlayfs); this is {sys.platform}", 2)
    if os.geteuid() != 0:
        raise LabError("the lab needs root (it makes network namespaces, bridges and mounts): run it with sudo", 2)
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        raise LabError(f"missing tools: {', '.join(missing)}; install iproute2, util-linux, coreutils, "
                       "openssh-client (apt-get install iproute2 util-linux openssh-client)", 2)


def run(argv: list[str], *, input: str | None = None, check: bool = True,
        timeout: float | None = 120) -> subprocess.CompletedProcess[str]:
    """Run a host command; on failure (with check) raise LabError with its output."""
    proc = subprocess.run(argv, input=input, capture_output=True, text=True, timeout=timeout,
                          stdin=None if input is not None else subprocess.DEVNULL)
    if check and proc.returncode != 0:
        output = (proc.stderr.strip() or proc.stdout.strip() or "no output")[-2000:]
        raise LabError(f"`{' '.join(argv[:8])}{' ...' if len(argv) > 8 else ''}` exited {proc.returncode}: {output}")
    return proc


def mounts_under(path: Path) -> list[str]:
    """Mount points at or below path (this mount namespace), deepest first: the order to unmount them."""
    prefix = str(path.resolve())
    found = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        point = line.split()[1].encode().decode("unicode_escape")  # /proc/mounts writes spaces as \040
        if point == prefix or point.startswith(prefix + "/"):
            found.append(point)
    return sorted(found, key=len, reverse=True)


def unmount_all_under(path: Path) -> None:
    for point in mounts_under(path):
        if run(["umount", point], check=False).returncode != 0:
            run(["umount", "--lazy", point], check=False)  # busy: detach now, freed when the last user goes


def remove_tree(path: Path) -> None:
    """rm -rf that never follows a mount into another filesystem (a leftover /proc or /dev mount)."""
    if path.exists() or path.is_symlink():
        unmount_all_under(path)
        run(["rm", "-rf", "--one-file-system", "--", str(path)])
