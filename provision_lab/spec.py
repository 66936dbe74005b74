"""What a lab is made of: its nodes (GPUs, NICs) and its inventory, from --nodes N or --like INVENTORY.

With --like, the lab mirrors the inventory: the same groups, nesting and
variables, every host renamed "lab-<host>" (also where provision_slurm.controller names it) and reached at its lab address
as root (the inventory's own connection variables are dropped). Each host's
GPUs and NICs come from, first match wins:

  GPUs  1. provision_custom.lab.gpus: [{model: v100-sxm2-16gb, count: 4}, ...]  (host or group variable)
        2. the host's name, then its groups (innermost first), containing a model hint:
           v100 -> 4x v100-sxm2-16gb, 3090 -> 1x rtx-3090, 4090 -> 7x rtx-4090, h100 -> 8x h100-80gb-hbm3
        3. 4x v100-sxm2-16gb
  NICs  1. provision_custom.lab.nics: [ens803f0, ens803f1]
        2. provision_nccl.socket_ifname: "=a,b" gives a and b; one prefix "p" gives p0 and p1
        3. ens803f0, ens803f1
  RDMA  provision_custom.lab.rdma: [{name: mlx5_0, near_gpu: 0}, ...]: RDMA NICs as `nvidia-smi topo -m` shows
        them (PIX to the GPU slot near_gpu, NODE or PHB to the others; numa: N places one on a socket), each
        an InfiniBand HCA with one port in the node's own /sys/class/infiniband (rdma.py);
        provision_custom.lab.numa_nodes: 2 splits the GPUs over two sockets (SYS between them). Default: none, one.
  provision_driver.version, when set, is the simulated driver's version; provision_custom.lab.persistenced: true
  installs the simulated nvidia-persistenced too.
  driver  provision_custom.lab.driver: false makes a node with its GPUs but no NVIDIA driver: no nvidia-smi (nor
        nvidia-persistenced), nothing loaded, no /dev/nvidia*, no /proc/driver/nvidia, until a driver package
        of the lab's apt repository is installed and the node rebooted. Default true.
  torch  provision_custom.lab.torch: false leaves the lab's Python layer (torch for the node's python3, pylayer.py)
        out of that node; default true, or false for every node with PROVISION_LAB_TORCH=0.
  provision  provision_custom.lab.provision: true puts this checkout's provision (and its dependencies) on the node's
        python3, with /usr/local/bin/provision, so the node runs `provision verify --local` (a Slurm
        HealthCheckProgram): the lab's provision layer (pylayer.py), rebuilt when the code changes.
        Default false (--nodes N too): building it takes about 15 s.
  board provision_custom.lab.board: hgx-h100-8 puts the GPUs on an HGX baseboard (8x h100-80gb-hbm3 on four
        NVSwitches: no `gpus` beside it): they stay "In Progress" in the fabric until nvidia-fabricmanager of
        the loaded driver's version runs (the lab's apt repository has it: stack_fabric.py).
  modules  provision_custom.lab.modules_load: [nvidia-peermem] names modules in the node's /etc/modules, which its boot
        loads as systemd-modules-load does (nodeinit.py): a node whose admin set that up. Default: none, and a node
        with RDMA NICs loads nvidia_peermem at boot only where /etc/modules-load.d names it (provision's file).
  systemd  provision_custom.lab.systemd: true makes the node answer as one where systemd runs: /run/systemd/system
        is there, and its systemctl starts, stops and restarts units now (a package's, apply's `systemctl restart`),
        not only at the next boot (nodeinit.systemctl). Default false: systemctl works offline (enable, is-enabled)
        and units start at boot, which every other lab test is written for.
  PSU   provision_custom.lab.psu_watts: N is what the node's power supplies give its GPUs: under a load (the GPU
        simulator's `load`, verify --active's stand-in) whose transients add up past it, a GPU falls off the
        bus (Xid 79), as on the V100 box. Default: no limit.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from provision_lab import pylayer
from provision_lab.gpusim.models import BOARDS
from provision_lab.layout import DEFAULT_GPUS, DEFAULT_NICS, DRIVER_VERSION
from provision_lab.model import LabSpec, NodeSpec
from provision_lab.netns import MAX_NICS, MAX_NODES
from provision_lab.system import LabError

MODELS = ("v100-sxm2-16gb", "rtx-3090", "rtx-4090", "h100-80gb-hbm3")
MODEL_HINTS = (("v100", "v100-sxm2-16gb", 4), ("3090", "rtx-3090", 1), ("4090", "rtx-4090", 7),
               ("h100", "h100-80gb-hbm3", 8))
LAB_KEYS = ("gpus", "nics", "persistenced", "rdma", "numa_nodes", "torch", "provision", "driver", "psu_watts", "board",
            "modules_load", "systemd")
# The default lab rehearses the basement V100 fix: persistence on, 200 W.
DEFAULT_VARS = {"provision_gpu": {"persistence": True, "power_limit": 200}}
MODULE_NAME = re.compile(r"^[A-Za-z0-9_-]{1,55}$")
NIC_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,14}$")
HOST_PREFIX = "lab-"
DEFAULT_NODES = 3


def default_spec(count: int) -> LabSpec:
    if not 1 <= count <= MAX_NODES:
        raise LabError(f"--nodes {count}: a lab has 1 to {MAX_NODES} nodes", 2)
    nodes = [NodeSpec(f"{HOST_PREFIX}node-{i}", i, torch=pylayer.wanted()) for i in range(1, count + 1)]
    tree = {"all": {"children": {"nodes": {"hosts": {n.name: {} for n in nodes}, "vars": DEFAULT_VARS}}}}
    return LabSpec(nodes, tree, f"--nodes {count}")


def like_spec(path: str | Path) -> LabSpec:
    """Mirror an inventory (validated first: InputError, exit 2, when it is bad)."""
    from provision.inventory.load import load_inventory  # only --like needs the inventory code

    inv = load_inventory(path)
    if len(inv.hosts) > MAX_NODES:
        raise LabError(f"{path}: {len(inv.hosts)} hosts; a lab has at most {MAX_NODES} nodes", 2)
    nodes = [_node_for(host, i) for i, host in enumerate(inv.hosts.values(), start=1)]
    raw = yaml.safe_load(Path(path).read_text())
    tree = {str(name): _mirror_group(body) for name, body in raw.items()}
    return LabSpec(nodes, tree, str(Path(path).resolve()))


def _node_for(host, index: int) -> NodeSpec:
    lab = host.settings.custom.get("lab") or {}
    where = f"host {host.name}: provision_custom.lab"
    if not isinstance(lab, dict) or set(lab) - set(LAB_KEYS):
        raise LabError(f"{where} must be a mapping with keys among {', '.join(LAB_KEYS)}", 2)
    driver = host.settings.driver.version if host.settings.driver and host.settings.driver.version else None
    return NodeSpec(name=HOST_PREFIX + host.name, index=index, gpus=_gpus(host, lab, where),
                    nics=_nics(host, lab, where), driver_version=driver or DRIVER_VERSION,
                    persistenced=bool(lab.get("persistenced", False)), rdma=_rdma(lab, where),
                    numa_nodes=_numa_nodes(lab, where), torch=_flag(lab, "torch", pylayer.wanted(), where),
                    provision=_flag(lab, "provision", False, where), driver=_flag(lab, "driver", True, where),
                    psu_watts=_psu_watts(lab, where), board=_board(lab, where),
                    modules_load=_modules_load(lab, where), systemd=_flag(lab, "systemd", False, where))


def _gpus(host, lab: dict[str, Any], where: str) -> list[dict[str, Any]]:
    if lab.get("board") in BOARDS:  # the board holds its GPUs
        board = BOARDS[lab["board"]]
        return [{"model": board.model, "count": board.gpus}]
    if "gpus" in lab:
        gpus = lab["gpus"]
        ok = isinstance(gpus, list) and all(
            isinstance(g, dict) and set(g) == {"model", "count"} and g["model"] in MODELS
            and isinstance(g["count"], int) and 1 <= g["count"] <= 16 for g in gpus)
        if not ok:
            raise LabError(f"{where}.gpus must be a list of {{model: M, count: 1..16}} with M one of "
                           f"{', '.join(MODELS)}; got {gpus!r}", 2)
        return [dict(g) for g in gpus]
    for word in [host.name, *reversed(host.groups)]:
        for hint, model, count in MODEL_HINTS:
            if hint in word.lower():
                return [{"model": model, "count": count}]
    return [dict(g) for g in DEFAULT_GPUS]


def _nics(host, lab: dict[str, Any], where: str) -> list[str]:
    nics = lab.get("nics")
    if nics is None:
        nics = _nics_from_nccl(host.settings.nccl.socket_ifname if host.settings.nccl else None)
    ok = (isinstance(nics, list) and 1 <= len(nics) <= MAX_NICS and len(set(nics)) == len(nics)
          and all(isinstance(n, str) and NIC_NAME.match(n) and n not in ("eth0", "lo") for n in nics))
    if not ok:
        raise LabError(f"{where}.nics must be 1 to {MAX_NICS} distinct interface names (up to 15 characters; "
                       f"eth0 is the lab's management port); got {nics!r}", 2)
    return list(nics)


def _rdma(lab: dict[str, Any], where: str) -> list[dict[str, Any]]:
    """The simulator checks the ranges against the node's GPUs; here the shape, to fail at `lab up`."""
    rdma = lab.get("rdma", [])
    ok = isinstance(rdma, list) and all(
        isinstance(nic, dict) and set(nic) <= {"name", "near_gpu", "numa"} and isinstance(nic.get("name"), str)
        and NIC_NAME.match(nic["name"]) and all(isinstance(nic.get(k, 0), int) for k in ("near_gpu", "numa"))
        for nic in rdma)
    if not ok:
        raise LabError(f"{where}.rdma must be a list of {{name: mlx5_0, near_gpu: GPU slot, numa: N}} "
                       f"(near_gpu and numa optional); got {rdma!r}", 2)
    return [dict(nic) for nic in rdma]


def _numa_nodes(lab: dict[str, Any], where: str) -> int:
    nodes = lab.get("numa_nodes", 1)
    if not isinstance(nodes, int) or isinstance(nodes, bool) or not 1 <= nodes <= 8:
        raise LabError(f"{where}.numa_nodes must be 1..8; got {nodes!r}", 2)
    return nodes


def _modules_load(lab: dict[str, Any], where: str) -> list[str]:
    names = lab.get("modules_load", [])
    if not isinstance(names, list) or not all(isinstance(n, str) and MODULE_NAME.match(n) for n in names):
        raise LabError(f"{where}.modules_load must be a list of kernel module names ([nvidia-peermem]); got {names!r}", 2)
    return list(names)


def _psu_watts(lab: dict[str, Any], where: str) -> int | None:
    watts = lab.get("psu_watts")
    if watts is not None and (not isinstance(watts, int) or isinstance(watts, bool) or not 50 <= watts <= 20000):
        raise LabError(f"{where}.psu_watts must be a number of watts, 50..20000; got {watts!r}", 2)
    return watts


def _board(lab: dict[str, Any], where: str) -> str | None:
    board = lab.get("board")
    if board is not None and (board not in BOARDS or "gpus" in lab):
        raise LabError(f"{where}.board must be one of {', '.join(BOARDS)} (its GPUs are the board's: no gpus beside "
                       f"it); got {board!r}", 2)
    return board


def _flag(lab: dict[str, Any], key: str, default: bool, where: str) -> bool:
    value = lab.get(key, default)
    if not isinstance(value, bool):
        raise LabError(f"{where}.{key} must be true or false; got {value!r}", 2)
    return value


def _nics_from_nccl(ifname: str | None) -> list[str]:
    if not ifname or ifname.startswith("^"):
        return list(DEFAULT_NICS)
    names = ifname.lstrip("=").split(",")
    if ifname.startswith("="):
        return names
    return [f"{names[0]}0", f"{names[0]}1"] if len(names) == 1 else list(DEFAULT_NICS)


def _mirror_group(body) -> dict[str, Any]:
    """One group of the raw YAML, in its own key order: hosts renamed, connection variables dropped."""
    out: dict[str, Any] = {}
    for key, value in (body or {}).items():
        if key == "hosts" and value:
            out["hosts"] = {HOST_PREFIX + str(h): _without_connection(v) for h, v in value.items()}
        elif key == "children" and value:
            out["children"] = {str(name): _mirror_group(child) for name, child in value.items()}
        elif key == "vars" and _without_connection(value):
            out["vars"] = _without_connection(value)
    return out


def _without_connection(variables) -> dict[str, Any]:
    """The variables a lab host keeps: no connection ones; a host a setting names (provision_slurm.controller) renamed."""
    from provision.inventory.build import SETTING_OF

    kept = {k: v for k, v in (variables or {}).items() if k not in SETTING_OF and not k.startswith("ansible_")}
    slurm = kept.get("provision_slurm")
    if isinstance(slurm, dict) and isinstance(slurm.get("controller"), str):
        kept["provision_slurm"] = {**slurm, "controller": HOST_PREFIX + slurm["controller"]}
    return kept
