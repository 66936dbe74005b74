"""The lab's network: names, addresses, bridges, veth pairs and network namespaces.

Every name starts with the lab's prefix "plab<slot>-" so cleanup can find a
half-made lab by name alone. A lab is one slot: slot 0 is the default lab,
others get the first free one. Addresses are private and lab-only:

  management  10.213.<slot>.0/24   bridge plab<slot>-mgmt, controller .1, node i at .(10+i) on eth0
  fabric NIC k 10.(214+k).<slot>.0/24 bridge plab<slot>-f<k>, node i at .(10+i) (no host address: rails)

Nodes get no default route: nothing they send leaves these bridges.

Fabric links are shaped (tc tbf, both ways: the host end's egress into the node, the node end's out of it) to
1/LINK_SCALE of the speed the NIC reports, so a measured rate sees what the speed file says and stays within
what one machine's CPUs can move for every node at once: a "10GbE" port (speed 10000) carries 100 Mbit/s, one
on the "1GbE" switch (nic-slow) 10 Mbit/s.
"""

from __future__ import annotations

import ipaddress
import json
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from provision_lab.system import LabError, run

MAX_SLOTS = 32
MAX_NODES = 244  # .11 .. .254
MAX_NICS = 4  # 10.214 .. 10.217
LINK_SCALE = 100  # a fabric link carries 1/100 of its reported speed (above)
VETH_MBPS = 10000  # what a veth's speed file says
PREFIX = "plab"


@dataclass(frozen=True)
class LabNet:
    slot: int

    @property
    def prefix(self) -> str:
        return f"{PREFIX}{self.slot}-"

    @property
    def mgmt_bridge(self) -> str:
        return f"{self.prefix}mgmt"

    def fabric_bridge(self, nic: int) -> str:
        return f"{self.prefix}f{nic}"

    @property
    def controller(self) -> str:
        return f"10.213.{self.slot}.1"

    def subnets(self) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
        return [ipaddress.ip_network(f"10.{213 + k}.{self.slot}.0/24") for k in range(MAX_NICS + 1)]

    def mgmt_address(self, index: int) -> str:
        return f"10.213.{self.slot}.{10 + index}"

    def fabric_address(self, nic: int, index: int) -> str:
        return f"10.{214 + nic}.{self.slot}.{10 + index}"

    def netns(self, node: str) -> str:
        return f"{self.prefix}{node}"

    def host_veth(self, index: int, nic: int | None = None) -> str:
        """The host-side end of node `index`'s management (nic None) or fabric NIC veth (<= 15 chars)."""
        return f"{self.prefix}{index}{'m' if nic is None else f'f{nic}'}"


# --- making --------------------------------------------------------------------------------------

def make_bridges(net: LabNet, nics: int, lab_dir: Path) -> None:
    """The management bridge (with the controller address and the lab dir as its alias) and one per fabric rail."""
    check_addresses_free(net)
    lines = []
    for bridge in [net.mgmt_bridge, *map(net.fabric_bridge, range(nics))]:
        lines += [f"link add name {bridge} type bridge forward_delay 0 stp_state 0",
                  f"link set {bridge} up"]
    lines.append(f"addr add {net.controller}/24 dev {net.mgmt_bridge}")
    batch(lines)
    run(["ip", "link", "set", "dev", net.mgmt_bridge, "alias", str(lab_dir)])  # whose lab, even without state


def add_node(net: LabNet, name: str, index: int, nics: list[str]) -> None:
    """A namespace for node `name` with eth0 on the management bridge and each NIC on its fabric rail."""
    ns = net.netns(name)
    run(["ip", "netns", "add", ns])
    host_side = [(net.host_veth(index), "eth0", net.mgmt_bridge)]
    host_side += [(net.host_veth(index, k), nic, net.fabric_bridge(k)) for k, nic in enumerate(nics)]
    batch([line for veth, inside, bridge in host_side for line in (
        f"link add {veth} type veth peer name {inside} netns {ns}",
        f"link set {veth} master {bridge} up",
    )])
    inside = ["link set lo up", f"addr add {net.mgmt_address(index)}/24 dev eth0", "link set eth0 up"]
    for k, nic in enumerate(nics):
        inside += [f"addr add {net.fabric_address(k, index)}/24 dev {nic}", f"link set {nic} up"]
    batch(inside, netns=ns)
    for k, nic in enumerate(nics):
        shape(net, name, index, k, nic, VETH_MBPS)


def shape(net: LabNet, name: str, index: int, k: int, nic: str, mbps: int) -> None:
    """Fabric NIC k (`nic` inside the node) at 1/LINK_SCALE of `mbps`, both ways."""
    rate_mbit = max(1, mbps // LINK_SCALE)
    burst = max(16000, rate_mbit * 1_000_000 // 8 // 100)  # bytes: 10 ms at the rate, at least ten frames
    tbf = ["root", "tbf", "rate", f"{rate_mbit}mbit", "burst", str(burst), "latency", "50ms"]
    run(["tc", "qdisc", "replace", "dev", net.host_veth(index, k), *tbf])
    run(["ip", "netns", "exec", net.netns(name), "tc", "qdisc", "replace", "dev", nic, *tbf])


def set_cable(net: LabNet, index: int, nic: int, plugged: bool) -> None:
    """Plug or pull a fabric cable: the host end goes down, the node sees NO-CARRIER on its NIC."""
    run(["ip", "link", "set", net.host_veth(index, nic), "up" if plugged else "down"])


def batch(lines: list[str], netns: str | None = None) -> None:
    argv = ["ip", *(["-n", netns] if netns else []), "-batch", "-"]
    run(argv, input="\n".join(lines) + "\n")


def check_addresses_free(net: LabNet) -> None:
    """Refuse to shadow a network this machine already uses (its own routes are not ours to break)."""
    routes = json.loads(run(["ip", "-j", "route", "show", "table", "all"]).stdout or "[]")
    for route in routes:
        dst, dev = route.get("dst", ""), route.get("dev", "")
        if dev.startswith(net.prefix) or dst in ("", "default") or ":" in dst:
            continue
        try:
            used = ipaddress.ip_network(dst if "/" in dst else f"{dst}/32", strict=False)
        except ValueError:
            continue
        for subnet in net.subnets():
            if used.overlaps(subnet):
                raise LabError(f"this machine already routes {used} (dev {dev}), which overlaps the lab's "
                               f"{subnet}: the lab would break it. Use another --dir (another slot).", 2)


# --- finding -------------------------------------------------------------------------------------

def lab_namespaces(prefix: str) -> list[str]:
    out = run(["ip", "-j", "netns", "list"]).stdout.strip()
    return sorted(n["name"] for n in json.loads(out or "[]") if n["name"].startswith(prefix))


def lab_links(prefix: str) -> list[dict[str, Any]]:
    """Links on this machine named with the prefix (bridges and host-side veth ends)."""
    out = run(["ip", "-j", "-d", "link", "show"]).stdout.strip()
    return [link for link in json.loads(out or "[]") if link["ifname"].startswith(prefix)]


def used_slots() -> dict[int, str]:
    """slot -> the lab dir, from the management bridges' aliases ("" when unknown) and namespaces."""
    slots: dict[int, str] = {}
    for link in lab_links(PREFIX):
        slot = _slot_of(link["ifname"])
        if slot is None:
            continue
        if link["ifname"] == LabNet(slot).mgmt_bridge:
            slots[slot] = link.get("ifalias", "")
        else:
            slots.setdefault(slot, "")
    for ns in lab_namespaces(PREFIX):
        slot = _slot_of(ns)
        if slot is not None:
            slots.setdefault(slot, "")
    return slots


def _slot_of(name: str) -> int | None:
    digits, dash, _ = name[len(PREFIX):].partition("-")
    return int(digits) if name.startswith(PREFIX) and digits.isdigit() and dash else None


def netns_pids(ns: str) -> list[int]:
    out = run(["ip", "netns", "pids", ns], check=False).stdout
    return [int(p) for p in out.split() if p.isdigit()]


def ns_init_pid(ns: str) -> int | None:
    """The node's PID 1 (its host pid): the process in the namespace whose innermost pid is 1."""
    for pid in netns_pids(ns):
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        nspid = next((line.split()[1:] for line in status.splitlines() if line.startswith("NSpid:")), [])
        if len(nspid) > 1 and nspid[-1] == "1":
            return pid
    return None


# --- removing ------------------------------------------------------------------------------------

def kill_namespace_processes(ns: str, timeout: float = 10.0) -> int:
    """SIGKILL every process in the namespace (a power cut) and wait until they are gone. Returns how many."""
    killed = set()
    deadline = time.monotonic() + timeout
    while pids := netns_pids(ns):
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
            except ProcessLookupError:
                pass
        if time.monotonic() > deadline:
            raise LabError(f"processes {pids} in namespace {ns} survive SIGKILL (stuck in the kernel?)")
        time.sleep(0.05)
    return len(killed)


def delete_namespace(ns: str) -> None:
    run(["ip", "netns", "delete", ns], check=False)


def delete_links(prefix: str) -> list[str]:
    """Delete every link with the prefix: host veth ends first (their peers go too), then bridges."""
    links = lab_links(prefix)
    links.sort(key=lambda link: link.get("linkinfo", {}).get("info_kind") == "bridge")
    names = [link["ifname"] for link in links]
    for name in names:
        run(["ip", "link", "delete", name], check=False)  # may be gone already, with its peer
    return names
