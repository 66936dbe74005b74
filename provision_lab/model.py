"""What a lab is: its nodes (NodeSpec: name, place, GPUs, NICs, driver) and the inventory they mirror (LabSpec).

Plain data, as the lab's state file records it; spec.py makes a LabSpec from --nodes N or --like INVENTORY,
cluster.py makes the lab.
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass, field
from typing import Any

from provision_lab.layout import DEFAULT_GPUS, DEFAULT_NICS, DRIVER_VERSION

# NodeSpec fields added after labs were first made, with their defaults: a lab's layout names one only where it
# differs, so that a lab made before the field existed (its state has none) is still the same lab.
LATER_FIELDS: dict[str, Any] = {"provision": False, "driver": True, "psu_watts": None, "board": None,
                                "modules_load": [], "systemd": False}


@dataclass
class NodeSpec:
    """What a node is: its name in the lab's inventory, its place, GPUs and NICs."""

    name: str
    index: int  # 1-based: addresses and veth names
    gpus: list[dict[str, Any]] = field(default_factory=lambda: [dict(g) for g in DEFAULT_GPUS])
    nics: list[str] = field(default_factory=lambda: list(DEFAULT_NICS))
    driver_version: str = DRIVER_VERSION
    persistenced: bool = False  # install the simulated nvidia-persistenced too
    driver: bool = True  # the simulated driver installed (nvidia-smi, its library): False, only a package brings one
    rdma: list[dict[str, Any]] = field(default_factory=list)  # RDMA NICs as topo -m shows them: {name, near_gpu, numa}
    numa_nodes: int = 1
    torch: bool = True  # the lab's Python layer (pylayer.py) under the node's disk: torch for its python3
    provision: bool = False  # the lab's provision layer (pylayer.py) above it: this checkout for its python3
    psu_watts: int | None = None  # the power supply's budget for the GPUs: past it under load, a GPU drops off
    board: str | None = None  # an NVSwitch baseboard the GPUs sit on (gpusim's BOARDS: "hgx-h100-8"); None: none
    modules_load: list[str] = field(default_factory=list)  # in its /etc/modules: loaded at every boot (nodeinit)
    systemd: bool = False  # systemctl starts and stops units now, as where systemd runs (nodeinit.systemctl)

    @property
    def gpu_count(self) -> int:
        return sum(g["count"] for g in self.gpus)

    def describe_gpus(self) -> str:
        return " + ".join(f"{g['count']}x {g['model']}" for g in self.gpus) or "no GPU"


@dataclass
class LabSpec:
    nodes: list[NodeSpec]
    tree: dict[str, Any]  # the inventory's YAML tree; each host's entry holds its own variables, no connection yet
    source: str  # "--nodes N" or the --like inventory's path

    def inventory(self, addresses: dict[str, str], ssh_config: str) -> dict[str, Any]:
        """The tree with every host reached at its lab address as root, through the lab's own ssh_config
        (so `provision apply` needs no --ssh-config; absolute, so a copy of the file works anywhere)."""
        tree = copy.deepcopy(self.tree)
        for hosts in _host_maps(tree):
            for name, own in hosts.items():
                hosts[name] = {"ansible_host": addresses[name], "ansible_user": "root", "provision_ssh_config": ssh_config,
                               **own}
        return tree

    def layout(self) -> list[dict[str, Any]]:
        """What must match for `up` to call a running lab the same lab (LATER_FIELDS only where not default)."""
        return [{k: v for k, v in asdict(n).items() if k not in LATER_FIELDS or v != LATER_FIELDS[k]}
                for n in self.nodes]


def _host_maps(tree: dict[str, Any]):
    for body in tree.values():
        yield from _host_maps_in(body)


def _host_maps_in(body: dict[str, Any]):
    if body.get("hosts"):
        yield body["hosts"]
    for child in (body.get("children") or {}).values():
        yield from _host_maps_in(child)
