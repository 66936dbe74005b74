"""The end-to-end lab: three real nodes (4x V100, 1x RTX 3090, 1x RTX 3090) from tests/lab/cluster.yaml.

One lab per test session, in its own directory (never the user's default
lab). A crashed earlier run is cleaned first (`lab down`), and the lab is
always torn down at the end, also when a test fails.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest

# PROVISION_E2E_LAB_DIR: a second lab beside a running one (two checkouts testing at once).
LAB_DIR = Path(os.environ.get("PROVISION_E2E_LAB_DIR", "/var/lib/provision-lab/e2e"))
CLUSTER = Path(__file__).parent / "cluster.yaml"
BASEMENT = Path(__file__).resolve().parents[2] / "inventories" / "basement.yaml"
GPUSIM = Path(__file__).resolve().parents[2] / "provision_lab" / "gpusim"


class LabCluster:
    """The running lab, driven the way a user drives it: the real CLIs, in subprocesses."""

    def __init__(self, lab_dir: Path, log: Path):
        self.dir = lab_dir
        self.inventory = lab_dir / "inventory.yaml"
        self.ssh_config = lab_dir / "ssh_config"
        self.log = log

    def lab(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        proc = _run([sys.executable, "-m", "provision_lab.cli", *args, "--dir", str(self.dir)])
        assert not check or proc.returncode == 0, f"lab {' '.join(args)}: {proc.stdout}{proc.stderr}"
        return proc

    def provision(self, *args: str) -> subprocess.CompletedProcess:
        return _run([sys.executable, "-m", "provision", *args])

    def apply(self, *args: str, inventory: Path | None = None) -> tuple[int, dict]:
        """`provision apply --json` on the lab: (exit code, the JSON; {} when there was none)."""
        proc = self.provision("apply", str(inventory or self.inventory), "--ssh-config", str(self.ssh_config),
                              "--json", "--log", str(self.log), *args)
        return proc.returncode, json.loads(proc.stdout) if proc.stdout.strip() else {"stderr": proc.stderr}

    def facts(self) -> dict:
        proc = self.provision("facts", str(self.inventory), "--ssh-config", str(self.ssh_config), "--json")
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)

    def gpus(self, node: str) -> list[dict]:
        return self.facts()[node]["nvidia"]["gpus"]

    def ssh(self, node: str, command: str) -> subprocess.CompletedProcess:
        """A command on a node over real SSH (the lab's ssh_config: its key, its strict known_hosts)."""
        return _run(["ssh", "-F", str(self.ssh_config), "-o", "BatchMode=yes", node, command])

    def status(self) -> dict:
        return json.loads(self.lab("status", "--json").stdout)

    def node_file(self, node: str, path: str) -> Path:
        """A file of a node, seen from this machine (the node's disk is an overlay mount)."""
        return self.dir / "nodes" / node / "root" / path.lstrip("/")


def _run(argv: list[str]) -> subprocess.CompletedProcess:
    # COLUMNS: verify wraps its findings at the terminal's width (100 on a pipe); the tests look for whole ones
    return subprocess.run(argv, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL,
                          env={**os.environ, "COLUMNS": "1000"})


def lab_machine() -> None:
    """Skip unless this machine can make labs; the image and apt repository built (and cached) first."""
    if not sys.platform.startswith("linux") or os.geteuid() != 0:
        pytest.skip("the lab needs root on Linux (namespaces, bridges, mounts)")
    if not GPUSIM.exists():
        pytest.skip(f"{GPUSIM} (the GPU simulator) is not there yet")
    from provision_lab.aptrepo import ensure_repo
    from provision_lab.rootfs import ensure_image
    from provision_lab.system import LabError

    try:
        image = ensure_image(log=lambda message: None)  # about a minute the first time, then cached
        ensure_repo(image, log=lambda message: None)  # the Debian mirror once more: seconds, then cached
    except LabError as exc:
        pytest.skip(f"the lab's image or apt repository cannot be built here (Debian mirror?): {exc}")


@pytest.fixture(scope="session")
def lab(tmp_path_factory):
    lab_machine()
    cluster = LabCluster(LAB_DIR, tmp_path_factory.mktemp("lab") / "runs.jsonl")
    cluster.lab("down")  # what a crashed earlier run left
    try:
        cluster.lab("up", "--like", str(CLUSTER))
        yield cluster
    finally:
        cluster.lab("down")


@pytest.fixture(scope="session")
def lab_beside(lab, tmp_path_factory):
    """Another lab beside the session's one: `with lab_beside(NAME, up) as cluster:` cleans LAB_DIR-NAME, makes
    the lab with up(cluster), and always tears it down."""
    return lambda name, up: made(LabCluster(Path(f"{lab.dir}-{name}"), tmp_path_factory.mktemp(name) / "runs.jsonl"),
                                 up)


@pytest.fixture(scope="session")
def lab_alone(tmp_path_factory):
    """A small lab of its own, without the session's (three nodes): `with lab_alone(NAME, up) as cluster:` cleans
    LAB_DIR-NAME, makes the lab with up(cluster), and always tears it down."""
    lab_machine()
    return lambda name, up: made(LabCluster(Path(f"{LAB_DIR}-{name}"), tmp_path_factory.mktemp(name) / "runs.jsonl"),
                                 up)


@contextmanager
def made(cluster: LabCluster, up):
    """The lab in cluster.dir: what a crashed earlier run left cleaned, made with up(cluster), always torn down."""
    cluster.lab("down")
    try:
        up(cluster)
        yield cluster
    finally:
        cluster.lab("down")


@pytest.fixture(scope="session")
def basement(lab_beside):
    """A second lab beside the session's one, mirroring inventories/basement.yaml: V100 (application clocks),
    four RTX 3090 blades with ens803f0/1, the RTX 4090 riser box. Tests that use it leave it converged."""
    with lab_beside("basement", lambda cluster: cluster.lab("up", "--like", str(BASEMENT))) as cluster:
        yield cluster
