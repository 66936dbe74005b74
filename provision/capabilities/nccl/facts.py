"""The network as NCCL sees it: interfaces (flags, addresses, speed, PCI device) and RDMA ports."""

from __future__ import annotations
import json
from dataclasses import dataclass

from provision.core.facts import FactReader, FactSection, Section
from provision.core.text import number


@dataclass(frozen=True)
class Interface:
    """A network interface as `ip -j addr` and /sys/class/net show it."""

    name: str
    operstate: str  # "up", "down", "unknown" (lo, some virtual links), "lowerlayerdown", ...
    speed_mbps: int | None  # None: no link, or a kind of interface without a speed
    flags: tuple[str, ...] | None = None  # ip's: "UP", "LOWER_UP", "LOOPBACK", ...; None: `ip -j` not there
    addresses: tuple[str, ...] | None = None  # "10.214.1.11/24", ...; None: not known (no `ip -j`)
    device: str | None = None  # the PCI device behind it (/sys/class/net/NAME/device), None for virtual links

    @property
    def running(self) -> bool:
        """The kernel's IFF_RUNNING, which NCCL requires: administratively up and its link up (or unknown, as
        on lo). Without ip's flags, the operstate alone."""
        link_up = self.operstate in ("up", "unknown")
        return link_up and (self.flags is None or "UP" in self.flags)

    @property
    def addressed(self) -> bool | None:
        """Has an IPv4 or IPv6 address NCCL can use (IPv6 loopback aside); None when unknown."""
        if self.addresses is None:
            return None
        return any(a.split("/")[0] != "::1" for a in self.addresses)


@dataclass(frozen=True)
class RdmaPort:
    """One port of an RDMA device (/sys/class/infiniband/HCA/ports/N): what NCCL_IB_HCA names."""

    hca: str  # "mlx5_0"
    port: int
    state: str  # "ACTIVE", "DOWN", "INIT", ...
    rate_gbps: float | None  # from "100 Gb/sec (4X EDR)"
    link_layer: str = ""  # "InfiniBand" or "Ethernet" (RoCE)


# The network as NCCL sees it: `ip -j addr` (flags and addresses: NCCL takes only running interfaces with an
# address), then per interface its operstate, speed in Mb/s (empty or -1 where the link is down or has none)
# and PCI device, then each RDMA port (NCCL_IB_HCA names them). One word per field: parse_network reads them.
NET_SNIPPET = (
    "j=$(ip -j addr show 2>/dev/null) && echo \"ip $j\"; "
    "for d in /sys/class/net/*; do printf 'sys %s %s %s %s\\n' \"${d##*/}\" \"$(cat \"$d/operstate\" 2>/dev/null)\" "
    "\"$(cat \"$d/speed\" 2>/dev/null || echo -)\" \"$(readlink -f \"$d/device\" 2>/dev/null || echo -)\"; done; "
    "for p in /sys/class/infiniband/*/ports/*; do [ -d \"$p\" ] || continue; h=${p%/ports/*}; "
    "s=$(cat \"$p/state\" 2>/dev/null); r=$(cat \"$p/rate\" 2>/dev/null); l=$(cat \"$p/link_layer\" 2>/dev/null); "
    "echo \"ib ${h##*/} ${p##*/} ${s#*: } ${r%% *} ${l:--}\"; done; true"
)


def parse_network(text: str) -> tuple[list[Interface], list[RdmaPort]]:
    """NET_SNIPPET's output: an 'ip JSON' line (absent where ip lacks -j), 'sys NAME OPERSTATE SPEED DEVICE'
    per interface, 'ib HCA PORT STATE RATE LINK_LAYER' per RDMA port. Interfaces in ifindex order where ip
    tells it (the order NCCL lists them in: getifaddrs'), else by name."""
    from_ip: dict[str, dict] = {}
    sys_lines, ports = [], []
    for line in text.splitlines():
        kind, _, rest = line.partition(" ")
        if kind == "ip":
            try:
                from_ip = {link["ifname"]: link for link in json.loads(rest) if "ifname" in link}
            except (ValueError, TypeError):
                from_ip = {}  # a broken `ip -j`: the /sys lines still say enough
        elif kind == "sys" and len(rest.split()) == 4:
            sys_lines.append(rest.split())
        elif kind == "ib" and len(rest.split()) == 5:
            hca, port, state, rate, layer = rest.split()
            ports.append(RdmaPort(hca, int(port) if port.isdigit() else 0, state, number(rate),
                                  "" if layer == "-" else layer))
    interfaces = []
    for name, operstate, speed, device in sys_lines:
        link = from_ip.get(name)
        mbps = number(speed)
        interfaces.append(Interface(
            name, operstate.lower(), int(mbps) if mbps and mbps > 0 else None,
            flags=tuple(link.get("flags", ())) if link else None,
            addresses=tuple(f"{a['local']}/{a.get('prefixlen', '')}" for a in link.get("addr_info", ())
                            if "local" in a) if link else None,
            device=device if device.startswith("/sys/devices/pci") else None))
    order = {name: link.get("ifindex", 0) for name, link in from_ip.items()}
    return sorted(interfaces, key=lambda i: order.get(i.name, 1 << 30)), ports


def parse(sections: dict[str, Section], facts) -> None:
    if "net" in sections:
        facts.interfaces, facts.rdma = parse_network(sections["net"].output)


READER = FactReader((FactSection("net", NET_SNIPPET),), parse)
