"""The lab's Debian image: debootstrap once, cached under /var/cache/provision-lab, shared read-only by all nodes.

Built into a temp dir and renamed when complete, so a crash never leaves a
half image in the cache. Nodes mount it as the lower layer of an overlayfs;
it must never be written to after that.
"""

from __future__ import annotations

import fcntl
import hashlib
import re
import shutil
import subprocess
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Callable

from provision_lab import layout
from provision_lab.layout import APT_REPO_IN_NODE
from provision_lab.system import LabError, remove_tree, run

SUITE = "bookworm"
PACKAGES = ("openssh-server", "sudo", "iproute2", "kmod", "python3", "systemd", "ca-certificates",
            "ipmitool", "openipmi",  # the BMC: ipmitool, and OpenIPMI's BMC simulator ipmi_sim (bmc.py)
            "iperf3")  # verify --active measures each NCCL port between nodes with it
IMAGE_REVISION = 2  # bump when customize() changes: a new cache key, a fresh image
# The lab's own apt repository (aptrepo.py), as every node sees it: a read-only bind mount (Node.create).
APT_SOURCES = f"deb [trusted=yes] file:{APT_REPO_IN_NODE} ./\n"

# Units the distro enables that need a running systemd, a console or the
# network; the lab starts sshd itself. Left enabled they would run at every
# node boot (see nodeinit.py).
STOCK_UNITS = ("getty@tty1.service", "ssh.service", "e2scrub_reap.service", "systemd-pstore.service",
               "apt-daily.timer", "apt-daily-upgrade.timer", "e2scrub_all.timer", "fstrim.timer",
               "ipmievd.service",  # ipmitool's event daemon: it needs /dev/ipmi0, which no node has
               "iperf3.service")  # a standing iperf3 server: verify --active starts its own, for one test each

SSHD_CONFIG = """\
# provision lab: key-only root logins, no PAM (no logind/systemd in a lab node).
HostKey /etc/ssh/ssh_host_ed25519_key
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
UseDNS no
MaxStartups 200
PidFile /run/sshd.pid
"""


def image_key() -> str:
    text = f"{SUITE} {' '.join(PACKAGES)} rev{IMAGE_REVISION}"
    return hashlib.sha256(text.encode()).hexdigest()[:10]


def image_path() -> Path:
    """The image's directory: root/ (the filesystem) and image.txt. It exists only once complete."""
    return layout.CACHE / f"rootfs-{SUITE}-{image_key()}"


def ensure_image(log=print) -> Path:
    """The cached image's root, built first if needed (about a minute). LabError when it cannot be built."""

    def build(tmp: Path) -> None:
        mirror, keyring = debian_mirror()
        debootstrap = _debootstrap_binary(log)
        log(f"Building the lab image (debootstrap {SUITE} from {mirror}, about a minute) into {image_path()} ...")
        argv = [debootstrap, "--variant=minbase", f"--include={','.join(PACKAGES)}"]
        argv += [f"--keyring={keyring}"] if keyring else []
        run([*argv, SUITE, str(tmp / "root"), mirror], timeout=1800)
        customize(tmp / "root")
        (tmp / "image.txt").write_text(f"debootstrap {SUITE} {' '.join(PACKAGES)} from {mirror}, "
                                       f"revision {IMAGE_REVISION}\n")

    return build_cached(image_path(), build, "the lab image") / "root"


def build_cached(path: Path, build: Callable[[Path], None], what: str) -> Path:
    """path in the cache, made first if needed: build(tmp) fills a temp dir that is renamed to path once
    complete, under the cache's lock (one builder at a time; the others wait and reuse its result)."""
    if path.exists():
        return path
    cache = layout.CACHE
    cache.mkdir(parents=True, exist_ok=True)
    with _locked(cache / ".lock"):
        if path.exists():  # another process built it while we waited
            return path
        for stale in cache.glob(".build-*"):  # a crashed build: may still hold a /proc or overlay mount
            remove_tree(stale)
        tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=cache))
        try:
            build(tmp)
            tmp.chmod(0o755)
            tmp.rename(path)
        except (LabError, subprocess.TimeoutExpired) as exc:
            raise LabError(f"cannot build {what}: {exc}", 2) from None
        finally:
            remove_tree(tmp)  # gone already when the rename happened
    return path


def customize(root: Path) -> None:
    """What every node shares: no host keys (each node makes its own), our sshd settings, stock units off,
    the lab's apt repository as the only apt source."""
    for key in (root / "etc" / "ssh").glob("ssh_host_*"):
        key.unlink()
    (root / "etc" / "ssh" / "sshd_config.d" / "provision-lab.conf").write_text(SSHD_CONFIG)
    for link in (root / "etc" / "systemd" / "system").glob("*.wants/*"):
        if link.name in STOCK_UNITS:
            link.unlink()
    # Nodes have no route out of the lab: the Debian mirror debootstrap listed is unreachable from them.
    (root / "etc" / "apt" / "sources.list").write_text(
        "# provision lab: nodes have no route out; their packages come from sources.list.d/provision-lab.list\n")
    (root / "etc" / "apt" / "sources.list.d" / "provision-lab.list").write_text(APT_SOURCES)


def debian_mirror(sources_dir: Path = Path("/etc/apt")) -> tuple[str, str | None]:
    """(mirror URI, keyring or None) of the Debian archive this machine's own apt uses, for SUITE."""
    entries = []
    for file in [sources_dir / "sources.list", *sorted((sources_dir / "sources.list.d").glob("*"))]:
        if file.name.endswith(".sources") and file.is_file():
            entries += _deb822_entries(file.read_text())
        elif file.name.endswith(".list") and file.is_file():
            entries += _one_line_entries(file.read_text())
    for uri, suites, components, keyring in entries:
        if SUITE in suites and "main" in components and uri.startswith(("http://", "https://", "file:")):
            return uri, keyring
    raise LabError(f"no apt source for Debian {SUITE} main in {sources_dir}/sources.list(.d): "
                   "the lab image is built from this machine's own Debian mirror", 2)


def _deb822_entries(text: str) -> list[tuple[str, list[str], list[str], str | None]]:
    entries = []
    for stanza in re.split(r"\n\s*\n", text):
        fields: dict[str, str] = {}
        for line in stanza.splitlines():
            if line.startswith("#") or ":" not in line or line[:1].isspace():
                continue
            key, _, value = line.partition(":")
            fields[key.strip().lower()] = value.strip()
        if "deb" in fields.get("types", "").split() and fields.get("enabled", "yes") != "no":
            for uri in fields.get("uris", "").split():
                entries.append((uri, fields.get("suites", "").split(), fields.get("components", "").split(),
                                _keyring(fields.get("signed-by"))))
    return entries


def _one_line_entries(text: str) -> list[tuple[str, list[str], list[str], str | None]]:
    entries = []
    for line in text.splitlines():
        match = re.match(r"^deb\s+(?:\[(?P<opts>[^\]]*)\]\s+)?(?P<uri>\S+)\s+(?P<suite>\S+)\s*(?P<comps>.*)$", line)
        if match:
            opts = dict(o.split("=", 1) for o in (match["opts"] or "").split() if "=" in o)
            entries.append((match["uri"], [match["suite"]], match["comps"].split(), _keyring(opts.get("signed-by"))))
    return entries


def _keyring(signed_by: str | None) -> str | None:
    return signed_by if signed_by and signed_by.startswith("/") and Path(signed_by).is_file() else None


def _debootstrap_binary(log) -> str:
    found = shutil.which("debootstrap") or shutil.which("debootstrap", path="/usr/sbin:/sbin")
    if found:
        return found
    if not shutil.which("apt-get"):
        raise LabError("debootstrap is not installed and there is no apt-get to install it", 2)
    log("Installing debootstrap (apt-get) ...")
    env_argv = ["env", "DEBIAN_FRONTEND=noninteractive"]
    run([*env_argv, "apt-get", "install", "-y", "-q", "--no-install-recommends", "debootstrap"], check=False,
        timeout=600)
    if run([*env_argv, "dpkg", "-s", "debootstrap"], check=False).returncode != 0:
        run([*env_argv, "apt-get", "update", "-q"], timeout=600)
        run([*env_argv, "apt-get", "install", "-y", "-q", "--no-install-recommends", "debootstrap"], timeout=600)
    return shutil.which("debootstrap", path="/usr/sbin:/sbin:/usr/bin") or "debootstrap"


@contextmanager
def _locked(path: Path):
    with open(path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield
