"""The lab's local apt repository: simulated NVIDIA packages (debs.py), Debian's munge and Slurm, for the nodes.

Nodes have no route out of the lab. They see this repository as a flat file: source
(rootfs.APT_SOURCES, at layout.APT_REPO_IN_NODE: a read-only bind mount, see Node.create), and real
apt and dpkg install from it. Two cached parts, each built once (rootfs.build_cached):

  debian-<key>/  munge and Slurm with exactly the dependencies the node image lacks: apt-get
                 --download-only in a chroot of the image (an overlay over it: the image itself is
                 never written), from this machine's Debian mirror. Keyed by the image.
  apt-<key>/     the served repository: those .debs (hard links), the simulated packages
                 built here (the drivers, debs.LAB_DEBS), Packages, Packages.gz, Release. Keyed by the image and the simulator,
                 so a changed simulator makes a new repository in about a second, with no download.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import time
from email.utils import formatdate
from pathlib import Path

from provision_lab import layout, rootfs, simzip
from provision_lab.deb import REVISION, Deb, build_deb
from provision_lab.debs import LAB_DEBS
from provision_lab.layout import DRIVERS, NODE_NVML_LIBRARY, NODE_SIM_ZIPAPP, NVIDIA_PERSISTENCED, NVIDIA_SMI
from provision_lab.system import run, unmount_all_under

REPO_REVISION = 4  # bump when the simulated packages or the index change: a new cache key, a fresh repository
# libslurm-dev: spank.h of the image's own Slurm, which the lab's pyxis plugin is compiled against (stack_pyxis.py)
DEBIAN_PACKAGES = ("munge", "slurmd", "slurmctld", "slurm-client", "libslurm-dev")
DEBIAN_REVISION = REVISION
PROXY_VARIABLES = ("http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY")

# As Ubuntu's packaged drivers ship it: static (no [Install]), persistence mode left off
# (see ../shared/reference/gpu-node-reference.md, 1.1).
PERSISTENCED_UNIT = """\
[Unit]
Description=NVIDIA Persistence Daemon
Wants=syslog.target

[Service]
Type=forking
ExecStart=/usr/bin/nvidia-persistenced --user nvidia-persistenced --no-persistence-mode --verbose
ExecStopPost=/bin/rm -rf /var/run/nvidia-persistenced
"""

DRIVER_DESCRIPTION = """\
NVIDIA driver {driver} (simulated, provision lab)
The provision lab's GPU simulator as nvidia-smi and nvidia-persistenced, with the
nvidia-persistenced unit as Ubuntu ships it, and the NVML library's version. As with
a real driver, the node's kernel module changes only at its next boot: until then
nvidia-smi fails (library/driver version mismatch, or no driver loaded).
"""

# The daemon's --user must exist. Nothing loads the new driver: the node's next boot does (gpusim's reboot).
POSTINST = """\
#!/bin/sh
set -e
if [ "$1" = configure ]; then
    getent passwd nvidia-persistenced >/dev/null || useradd --system --user-group --home-dir /nonexistent \\
        --no-create-home --shell /usr/sbin/nologin --comment "NVIDIA Persistence Daemon" nvidia-persistenced
fi
"""


def ensure_repo(image: Path, log=print) -> Path:
    """The repository's directory (what nodes mount), built first if needed. LabError when it cannot be."""
    path = layout.CACHE / f"apt-{repo_key()}"
    if path.exists():
        return path
    debian = ensure_debian_packages(image, log)

    def build(tmp: Path) -> None:
        started = time.monotonic()
        for fetched in sorted(debian.glob("*.deb")):
            os.link(fetched, tmp / fetched.name)  # the same filesystem: no copy
        for simulated in all_debs():
            build_deb(simulated, tmp)
        write_index(tmp)
        log(f"Lab apt repository ready in {path} ({time.monotonic() - started:.1f}s)")

    return rootfs.build_cached(path, build, "the lab's apt repository")


def all_debs() -> list[Deb]:
    """Every simulated package the repository serves: the drivers, then each stack's (debs.LAB_DEBS)."""
    return [*(driver_deb(name, driver) for name, driver in DRIVERS.items()), *LAB_DEBS()]


def repo_key() -> str:
    """The image, the revision and every simulated package as built (the simulator's bytes among them)."""
    digest = hashlib.sha256(f"{rootfs.image_key()} rev{REPO_REVISION} {DEBIAN_PACKAGES}".encode())
    for simulated in all_debs():
        digest.update(repr(simulated).encode())
    return digest.hexdigest()[:10]


# --- munge and Slurm from Debian ------------------------------------------------------------------


def ensure_debian_packages(image: Path, log=print) -> Path:
    """A directory of the .debs that installing DEBIAN_PACKAGES on a node needs, built first if needed."""
    key = hashlib.sha256(f"{rootfs.image_key()} {DEBIAN_PACKAGES}".encode()).hexdigest()[:10]
    path = layout.CACHE / f"debian-{key}"

    def build(tmp: Path) -> None:
        mirror, _ = rootfs.debian_mirror()
        started = time.monotonic()
        log(f"Fetching {', '.join(DEBIAN_PACKAGES)} and their dependencies for the lab's apt repository "
            f"(apt-get in the image, from {mirror}) ...")
        chroot = tmp / ".chroot"
        try:
            root = _overlay_over(image, chroot)
            _download(root, mirror)
            for deb in (root / "var" / "cache" / "apt" / "archives").glob("*.deb"):
                shutil.move(deb, tmp / deb.name)
        finally:
            unmount_all_under(chroot)
            shutil.rmtree(chroot, ignore_errors=True)
        debs = list(tmp.glob("*.deb"))
        log(f"Fetched {len(debs)} packages ({sum(d.stat().st_size for d in debs) / 2**20:.0f} MiB) "
            f"in {time.monotonic() - started:.0f}s")

    return rootfs.build_cached(path, build, f"the lab's Debian packages ({', '.join(DEBIAN_PACKAGES)})")


def _overlay_over(image: Path, work: Path) -> Path:
    """A writable root over the image (whose files stay as they are), with /proc: apt runs in it."""
    for sub in ("upper", "work", "root"):
        (work / sub).mkdir(parents=True)
    root = work / "root"
    run(["mount", "-t", "overlay", "plab-apt", "-o",
         f"lowerdir={image},upperdir={work / 'upper'},workdir={work / 'work'}", str(root)])
    run(["mount", "-t", "proc", "proc", str(root / "proc")])
    return root


def _download(root: Path, mirror: str) -> None:
    """apt-get --download-only in the chroot: the image's own apt and dpkg status decide what is missing."""
    etc_apt = root / "etc" / "apt"
    (etc_apt / "sources.list").write_text(f"deb {mirror} {rootfs.SUITE} main\n")
    (etc_apt / "sources.list.d" / "provision-lab.list").unlink(missing_ok=True)  # not served here
    shutil.copy(Path("/etc/resolv.conf").resolve(), root / "etc" / "resolv.conf")  # the host's network
    env = ["env", "-i", "PATH=/usr/sbin:/usr/bin:/sbin:/bin", "DEBIAN_FRONTEND=noninteractive", "LANG=C.UTF-8",
           *(f"{name}={os.environ[name]}" for name in PROXY_VARIABLES if name in os.environ)]
    apt = ["chroot", str(root), *env, "apt-get", "-q", "-y"]
    run([*apt, "clean"])  # debootstrap's own .debs: the archives directory then holds only what is fetched
    run([*apt, "update"], timeout=600)
    run([*apt, "install", "--download-only", *DEBIAN_PACKAGES], timeout=1800)


# --- the simulated driver packages ------------------------------------------------------------------


def driver_deb(name: str, driver: str) -> Deb:
    """The simulator as nvidia-smi and nvidia-persistenced, and the installed driver's NVML library version (the
    simulator's NVIDIA_SIM_LIBRARY): driver, loaded at the next boot."""
    return Deb(
        name=name, version=driver + DEBIAN_REVISION, depends="python3, passwd",
        provides="nvidia-driver", conflicts="nvidia-driver", replaces="nvidia-driver",
        files={NODE_SIM_ZIPAPP: (0o644, simzip.zipapp()),
               NODE_NVML_LIBRARY: (0o644, driver + "\n"),
               NVIDIA_SMI: (0o755, simzip.sim_wrapper(NVIDIA_SMI)),
               NVIDIA_PERSISTENCED: (0o755, simzip.sim_wrapper(NVIDIA_PERSISTENCED)),
               # Debian bookworm ships units under /lib (usrmerge aliasing), and nodeinit looks there.
               "/lib/systemd/system/nvidia-persistenced.service": (0o644, PERSISTENCED_UNIT)},
        postinst=POSTINST, description=DRIVER_DESCRIPTION.format(driver=driver))


def build_driver_package(out_dir: Path, name: str, driver: str) -> Path:
    """out_dir/NAME_VERSION_all.deb: driver_deb, built."""
    return build_deb(driver_deb(name, driver), out_dir)


# --- the index ----------------------------------------------------------------------------------------


def write_index(repo: Path) -> None:
    """Packages, Packages.gz and Release of a flat repository: what apt-get update reads.

    Written here rather than by dpkg-scanpackages/apt-ftparchive (dpkg-dev, apt-utils), which the
    host may not have; dpkg-deb, which every Debian has, reads each package's control fields.
    """
    stanzas = []
    for deb in sorted(repo.glob("*.deb")):
        control = run(["dpkg-deb", "--field", str(deb)]).stdout
        stanzas.append(index_stanza(control, f"./{deb.name}", deb.read_bytes()))
    packages = "\n".join(stanzas).encode()
    (repo / "Packages").write_bytes(packages)
    (repo / "Packages.gz").write_bytes(gzip.compress(packages, mtime=0))
    (repo / "Release").write_text(release_text({"Packages": packages,
                                                "Packages.gz": (repo / "Packages.gz").read_bytes()}))


def index_stanza(control: str, filename: str, data: bytes) -> str:
    """One package's Packages entry: its control fields as dpkg-deb prints them, then where and what it is."""
    fields = control.rstrip("\n")
    return (f"{fields}\nFilename: {filename}\nSize: {len(data)}\nMD5sum: {hashlib.md5(data).hexdigest()}\n"
            f"SHA256: {hashlib.sha256(data).hexdigest()}\n")


def release_text(files: dict[str, bytes], date: float | None = None) -> str:
    """A flat repository's Release: the index files' sizes and checksums (unsigned: nodes say trusted=yes)."""
    lines = ["Origin: provision-lab", "Label: provision-lab", f"Date: {formatdate(date, usegmt=True)}"]
    for title, digest in (("MD5Sum", hashlib.md5), ("SHA256", hashlib.sha256)):
        lines.append(f"{title}:")
        lines += [f" {digest(data).hexdigest()} {len(data)} {name}" for name, data in sorted(files.items())]
    return "\n".join(lines) + "\n"
