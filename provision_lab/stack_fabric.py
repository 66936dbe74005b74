"""NVIDIA Fabric Manager in the lab: its packages, as Ubuntu's archive names them, one per driver the repository serves.

nvidia-fabricmanager-<branch> (and libnvidia-nscq-<branch>, the NVSwitch query library DCGM uses) at each lab
driver's exact version, plus one fabric manager release with no driver of its own (MISMATCHED_VERSION: the
`fabric-manager-version` fault installs it). As Canonical's packages: Provides/Conflicts/Replaces
nvidia-fabricmanager (one branch at a time); as the FM guide says, the unit is installed and not enabled
(../shared/reference/node-lifecycle-reference.md, 1.2). As in Ubuntu's archive, where nvidia-fabricmanager-N
depends on nvidia-kernel-common-N at its driver's exact version, a lab driver's fabric manager depends on that
driver's package at its exact version (the lab's driver is one package): a held fabric manager of the driver before
stops apt from moving the driver unless the driver's own apt-get removes it. The fault's release, which no lab driver
matches, depends on any driver, as NVIDIA's repository's packages do (they do not tie the two): keeping them equal
there is provision's job alone.

The service runs the GPU simulator as nv-fabricmanager: it compares the version this package ships
(FABRIC_MANAGER_VERSION_FILE) with the loaded driver's, then registers the node's NVSwitch GPUs with the fabric
(fabric state Completed) and stays running, or logs the real mismatch line and exits 1 (gpusim/fabric.py).
"""

from __future__ import annotations

from provision_lab.deb import REVISION, Deb
from provision_lab.layout import DRIVERS, NODE_LAB_DIR, NODE_NVML_LIBRARY, driver_package
from provision_lab.simzip import sim_wrapper

MISMATCHED_VERSION = "580.126.09"  # a 580 fabric manager no lab driver matches
FABRIC_MANAGER = "/usr/bin/nv-fabricmanager"
FABRIC_MANAGER_VERSION_FILE = f"{NODE_LAB_DIR}/fabricmanager-version"  # the stand-in's own version
FABRIC_MANAGER_CONFIG = "/usr/share/nvidia/nvswitch/fabricmanager.cfg"  # the FM guide's default path
UNIT = "nvidia-fabricmanager.service"

# The shipped unit's [Unit] text was not found (reference 1.4, "Not confirmed"): the description is the one its
# journal shows ("Starting NVIDIA fabric manager service..."); Type=simple, since the stand-in does not fork.
UNIT_TEXT = f"""\
[Unit]
Description=NVIDIA fabric manager service

[Service]
User=root
PrivateTmp=false
Type=simple
ExecStart={FABRIC_MANAGER} -c {FABRIC_MANAGER_CONFIG}

[Install]
WantedBy=multi-user.target
"""


def branch_of(version: str) -> str:
    return version.split(".")[0]


def fabric_manager(version: str) -> Deb:
    branch = branch_of(version)
    driver = f"{driver_package(version)} (= {version}{REVISION})" if version in DRIVERS.values() else "nvidia-driver"
    return Deb(
        name=f"nvidia-fabricmanager-{branch}", version=version + REVISION, depends=f"python3, {driver}",
        provides="nvidia-fabricmanager", conflicts="nvidia-fabricmanager", replaces="nvidia-fabricmanager",
        files={FABRIC_MANAGER: (0o755, sim_wrapper(FABRIC_MANAGER)),
               FABRIC_MANAGER_VERSION_FILE: (0o644, version + "\n"),
               FABRIC_MANAGER_CONFIG: (0o644, "# the lab's fabric manager reads no option\n"),
               f"/lib/systemd/system/{UNIT}": (0o644, UNIT_TEXT)},
        description=f"Fabric Manager for NVSwitch based systems (simulated, provision lab)\n"
                    f"The GPU simulator as nv-fabricmanager {version}: it registers the node's GPUs with the\n"
                    f"NVSwitch fabric when the loaded driver is {version}, else logs the mismatch and exits 1.")


def nscq(version: str) -> Deb:
    branch = branch_of(version)
    return Deb(
        name=f"libnvidia-nscq-{branch}", version=version + REVISION,
        provides="libnvidia-nscq", conflicts="libnvidia-nscq", replaces="libnvidia-nscq",
        files={f"/usr/lib/x86_64-linux-gnu/libnvidia-nscq.so.{version}": (0o644, "simulated NSCQ library\n")},
        description="NVSwitch Configuration and Query library (simulated, provision lab)\n"
                    "Its version must be the driver's, as the real one's.")


def debs() -> list[Deb]:
    """Fabric manager and NSCQ at each lab driver's version, and the fabric manager no driver matches."""
    versions = sorted(DRIVERS.values())
    return [*(fabric_manager(v) for v in versions), *(nscq(v) for v in versions), fabric_manager(MISMATCHED_VERSION)]


# --- the fault: fabric manager at another version than the driver --------------------------------------------------

FAULT = "fabric-manager-version"
APT = "DEBIAN_FRONTEND=noninteractive apt-get -q -y -o Dpkg::Use-Pty=0"


def mismatch_script() -> str:
    """What an unpinned upgrade does: the fabric manager package replaced with a release no lab driver matches (the
    running one goes on, the old binary; it aborts at its next start)."""
    return (f"apt-get -q update >/dev/null && {APT} install --allow-downgrades --allow-change-held-packages "
            f"{fabric_manager(MISMATCHED_VERSION).name}={MISMATCHED_VERSION}{REVISION}")


def matching_script() -> str:
    """The fault undone: the fabric manager of the installed driver's version (the simulator's library file)."""
    return (f"v=$(cat {NODE_NVML_LIBRARY}) && {APT} install --allow-downgrades --allow-change-held-packages "
            f"\"nvidia-fabricmanager-${{v%%.*}}=$v{REVISION}\"")
