"""NVIDIA Fabric Manager as the host has it: whether the board has NVSwitches, the fabric manager's and NSCQ's
packages, and whether its service is enabled. One section of the facts batch, snippet beside its parser.

NVSwitches are found as NVIDIA's driver container finds them, /proc/driver/nvidia-nvswitch/devices non-empty (the
driver makes it once loaded), and as AWS ParallelCluster does, NVSwitch bridges on the PCI bus (lspci: 10de:1af1,
A100's; 10de:22a3, H100's and H200's), which answers before any driver is installed
(../shared/reference/node-lifecycle-reference.md, 1.1). Whether the service runs is the system's daemons section
(its process, nv-fabricmanager); the GPUs' registration with the fabric is the gpu capability's query
(fabric.state, fabric.status).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from provision.core import dpkg
from provision.core.facts import FactReader, FactSection, Section

if TYPE_CHECKING:  # types only
    from provision.capabilities.host import HostFacts

NVSWITCH_DEVICES = "/proc/driver/nvidia-nvswitch/devices"
NVSWITCH_PCI_IDS = ("10de:1af1", "10de:22a3")
UNIT = "nvidia-fabricmanager.service"
PROCESS = "nv-fabricmanage"  # the daemon's comm (system/daemons.py)
# Every package that carries the fabric manager's version: Ubuntu's per branch, NVIDIA's unsuffixed from R580,
# and the meta-package cuda-drivers-fabricmanager-<branch>.
PACKAGE_PATTERNS = ("nvidia-fabricmanager*", "libnvidia-nscq*", "cuda-drivers-fabricmanager*")

# "nvswitch NAME" per device the driver lists, "switch-pci SLOT ID" per NVSwitch bridge lspci lists, "unit STATE"
# (systemctl is-enabled; empty: no such unit), then "pkg NAME VERSION STATUS" (core/dpkg.py).
FABRIC_SNIPPET = (
    f"for d in {NVSWITCH_DEVICES}/*; do [ -e \"$d\" ] && echo \"nvswitch ${{d##*/}}\"; done; "
    "if command -v lspci >/dev/null 2>&1; then lspci -n -d 10de: 2>/dev/null | while read -r s c i _; do "
    f"case $i in {'|'.join(NVSWITCH_PCI_IDS)}) echo \"switch-pci $s $i\";; esac; done; fi; "
    f"echo \"unit $(systemctl is-enabled {UNIT} 2>/dev/null)\"; "
    + dpkg.status_snippet(list(PACKAGE_PATTERNS), "pkg ")
)


@dataclass
class FabricFacts:
    """NVSwitches and the fabric manager's packages and unit (capabilities/fabric/facts.py)."""

    nvswitches: list[str] = field(default_factory=list)  # the driver's NVSwitch devices (/proc/driver/nvidia-nvswitch)
    switch_pci: list[str] = field(default_factory=list)  # NVSwitch bridges on the PCI bus: "SLOT ID"
    unit: str = ""  # systemctl is-enabled nvidia-fabricmanager.service: "enabled", "disabled", ...; "": no such unit
    packages: dict[str, str] = field(default_factory=dict)  # installed fabric manager packages -> Debian version
    held: list[str] = field(default_factory=list)  # of those, the ones on hold

    @property
    def has_nvswitch(self) -> bool:
        return bool(self.nvswitches or self.switch_pci)

    def seen(self) -> str:
        """Where the NVSwitches were seen, in words."""
        return "; ".join(part for part in (
            f"{len(self.nvswitches)} in {NVSWITCH_DEVICES}" if self.nvswitches else "",
            f"{len(self.switch_pci)} on the PCI bus ({', '.join(sorted({p.split()[-1] for p in self.switch_pci}))})"
            if self.switch_pci else "") if part)


def parse_fabric(text: str) -> FabricFacts:
    found = FabricFacts()
    for line in text.splitlines():
        kind, _, rest = line.partition(" ")
        if kind == "nvswitch" and rest.strip():
            found.nvswitches.append(rest.strip())
        elif kind == "switch-pci" and rest.strip():
            found.switch_pci.append(rest.strip())
        elif kind == "unit":
            found.unit = rest.strip()
        elif kind == "pkg" and (package := dpkg.installed(rest)):
            name, version, held = package
            found.packages[name] = version
            found.held += [name] if held else []
    return found


def parse(sections: dict[str, Section], facts: HostFacts) -> None:
    if "fabric" in sections:
        facts.fabric = parse_fabric(sections["fabric"].output)


# Read again after a batch only where a change altered it (the fabric-manager task; the driver's, which alters all).
READER = FactReader((FactSection("fabric", FABRIC_SNIPPET, refresh_on=frozenset({"fabric"})),), parse)
