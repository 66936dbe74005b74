"""The network as NCCL sees it: interfaces (flags, addresses, speed, PCI device) and RDMA ports."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from provision.core.facts import FactReader, FactSection, Section
from provision.core.text import number

if TYPE_CHECKING:  # types only
    from provision.capabilities.host import HostFacts


@dataclass(frozen=True)
class Interface:
    """A network interface as `ip -j addr` and /sys/class/net show it."""

    name: str
    operstate: str  # "up", "down", "unknown" (lo, some virtual links), "lowerlayerdown", ...
    speed_mbps: int | None  # None: no link, or a kind of interface without a speed
    flags: tuple[str, ...] | None = None  # ip's: "UP", "LOWER_UP", "LOOPBACK", ...; None: `ip -j` not there
    addresses: tuple[str, ...] | None = None  # "10.214.1.11/24", ...; None: not known (no `ip -j`)
    device: str | None = None  # the PCI device behind it (/sys/class/net/NAME/device), None for virtual links
    rdma_port: str | None = None  # "mlx5_0:1": the RDMA port it rides on (IPoIB's ib0, a RoCE port's netdev)

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
    """One port of an RDMA device (/sys/class/infiniband/HCA/ports/N): what NCCL_IB_HCA names. None: the file
    was not there or could not be read."""

    hca: str  # "mlx5_0"
    port: int
    state: str | None  # "ACTIVE", "DOWN", "INIT", "ARMED", ... (the kernel's "4: ACTIVE" without its number)
    rate_gbps: float | None  # from "100 Gb/sec (4X EDR)"
    link_layer: str = ""  # "InfiniBand" or "Ethernet" (RoCE)
    phys_state: str | None = None  # "LinkUp", "Polling", "Disabled", ... ("5: LinkUp" without its number)
    rate_text: str = ""  # the kernel's words: "100 Gb/sec (4X EDR)", "25 Gb/sec (1X EDR)"
    # ERROR_COUNTERS read, by name: a count since the HCA was reset (boot); None where the file says something
    # else ("N/A (no PMA)"); a counter the kernel does not offer for the port is absent.
    counters: dict[str, int | None] = field(default_factory=dict, hash=False)

    @property
    def name(self) -> str:
        """"mlx5_0 port 1", as ibstat says it."""
        return f"{self.hca} port {self.port}"


# The error counters verify reads per RDMA port (counters/NAME), with each one's width in bits: the kernel reads
# them from the port's PMA PortCounters (drivers/infiniband/core/sysfs.c, PORT_PMA_ATTR; IBA 16.1.3.5), where a
# counter stops at 2**bits - 1 instead of wrapping. VL15_dropped (subnet management packets dropped while the
# port came up: counts on healthy ports) and the data and packet counters are not errors, and are not read.
ERROR_COUNTERS = {
    "symbol_error": 16,  # bad symbols on the wire: a marginal cable or transceiver
    "link_error_recovery": 8,  # the link retrained after errors
    "link_downed": 8,  # the link went down (a flap, or a pulled cable)
    "port_rcv_errors": 16,  # packets received with errors (CRC, malformed)
    "port_rcv_remote_physical_errors": 16,  # packets received marked bad by the far end
    "port_xmit_discards": 16,  # packets dropped on send: the link was down or congested
    "local_link_integrity_errors": 4,  # the link's error rate crossed its threshold
    "excessive_buffer_overrun_errors": 4,  # receive buffers overran: flow control failed
}
IB_CLASS = "/sys/class/infiniband"
IB_PORT_FILES = ("state", "phys_state", "rate", "link_layer", *(f"counters/{name}" for name in ERROR_COUNTERS))


# The network as NCCL sees it: `ip -j addr` (flags and addresses: NCCL takes only running interfaces with an
# address), then per interface its operstate, speed in Mb/s (empty or -1 where the link is down or has none)
# and PCI device, and the RDMA port it rides on where it has one (an IPoIB ib0 on an InfiniBand port, the netdev of
# a RoCE port: its device's infiniband/HCA, and dev_port, 0 for the HCA's port 1, as rdma-core's ibdev2netdev
# pairs them; read with the shell's own `read` and `cd -P`, no process per file), then, where there is an RDMA
# device, its ports (NCCL_IB_HCA names them): their directories
# (echo, a shell builtin) and one grep for every port's state, rate, link layer and error counters, "PATH:VALUE"
# a line (a file that is missing or cannot be read prints nothing: -s). parse_network reads them.
NET_SNIPPET = (
    "j=$(ip -j addr show 2>/dev/null) && echo \"ip $j\"; "
    "for d in /sys/class/net/*; do o=; read -r o 2>/dev/null <\"$d/operstate\"; "
    "v=-; read -r v 2>/dev/null <\"$d/speed\" || v=-; l=-; [ -e \"$d/device\" ] && l=$(cd -P \"$d/device\" && pwd); "
    "printf 'sys %s %s %s %s\\n' \"${d##*/}\" \"$o\" \"${v:--}\" \"${l:--}\"; "
    "for h in \"$d\"/device/infiniband/*; do [ -e \"$h\" ] && { p=0; read p 2>/dev/null <\"$d/dev_port\"; "
    "echo \"ibdev ${d##*/} ${h##*/} $p\"; }; done; done; "
    f"[ -d {IB_CLASS} ] && {{ echo ibports {IB_CLASS}/*/ports/*; "
    f"grep -Hs . {' '.join(f'{IB_CLASS}/*/ports/*/{name}' for name in IB_PORT_FILES)}; }}; true"
)


def parse_network(text: str) -> tuple[list[Interface], list[RdmaPort]]:
    """NET_SNIPPET's output: an 'ip JSON' line (absent where ip lacks -j), 'sys NAME OPERSTATE SPEED DEVICE'
    per interface, 'ibdev NAME HCA DEV_PORT' for one on an RDMA port, then the RDMA ports' lines (parse_rdma_ports). Interfaces in ifindex order where ip
    tells it (the order NCCL lists them in: getifaddrs'), else by name."""
    from_ip: dict[str, dict[str, Any]] = {}
    sys_lines = []
    on_rdma: dict[str, str] = {}
    for line in text.splitlines():
        kind, _, rest = line.partition(" ")
        if kind == "ip":
            try:
                from_ip = {link["ifname"]: link for link in json.loads(rest) if "ifname" in link}
            except (ValueError, TypeError):
                from_ip = {}  # a broken `ip -j`: the /sys lines still say enough
        elif kind == "sys" and len(rest.split()) == 4:
            sys_lines.append(rest.split())
        elif kind == "ibdev" and len(rest.split()) == 3 and rest.split()[2].isdigit():
            name, hca, dev_port = rest.split()
            on_rdma[name] = f"{hca}:{int(dev_port) + 1}"
    ports = parse_rdma_ports(text)
    interfaces = []
    for name, operstate, speed, device in sys_lines:
        link = from_ip.get(name)
        mbps = number(speed)
        interfaces.append(Interface(
            name, operstate.lower(), int(mbps) if mbps and mbps > 0 else None,
            flags=tuple(link.get("flags", ())) if link else None,
            addresses=tuple(f"{a['local']}/{a.get('prefixlen', '')}" for a in link.get("addr_info", ())
                            if "local" in a) if link else None,
            device=device if device.startswith("/sys/devices/pci") else None, rdma_port=on_rdma.get(name)))
    order = {name: link.get("ifindex", 0) for name, link in from_ip.items()}
    return sorted(interfaces, key=lambda i: order.get(i.name, 1 << 30)), ports


PORT_DIR = re.compile(re.escape(IB_CLASS) + r"/([^/\s]+)/ports/(\d+)$")
PORT_FILE = re.compile(re.escape(IB_CLASS) + r"/([^/\s]+)/ports/(\d+)/([\w/]+):(.*)$")


def parse_rdma_ports(text: str) -> list[RdmaPort]:
    """The RDMA ports in NET_SNIPPET's output: 'ibports DIR...' (every port's directory, so a port whose files
    cannot be read is still there), then grep's 'FILE:VALUE' lines. In the directories' order (the glob's).

    What the kernel writes there (drivers/infiniband/core/sysfs.c: state_show, phys_state_show, rate_show,
    link_layer_show, show_pma_counter; Documentation/ABI/stable/sysfs-class-infiniband), as real ports show it:
      state       "4: ACTIVE"; "1: DOWN", "2: INIT", "3: ARMED", "5: ACTIVE_DEFER"
      phys_state  "5: LinkUp"; "2: Polling" (no peer: a pulled cable), "3: Disabled", "1: Sleep",
                  "4: PortConfigurationTraining", "6: LinkErrorRecovery", "7: Phy Test"
      rate        "100 Gb/sec (4X EDR)", "200 Gb/sec (4X HDR)", "2.5 Gb/sec (1X SDR)", and on RoCE an IB word for
                  the Ethernet speed: "25 Gb/sec (1X EDR)" (25GbE), "10 Gb/sec (1X QDR)"; a port that is down
                  says some rate all the same ("40 Gb/sec (4X QDR)", "10 Gb/sec (4X SDR)")
      link_layer  "InfiniBand", "Ethernet" (RoCE)
      counters/*  a decimal count; "N/A (no PMA)" on a device without a performance agent (an mlx4 VF, i40iw);
                  an error on read, or no counters/ at all (irdma), on some RoCE and iWARP devices
    Sources: the kernel's sysfs.c (its sprintf formats); Mellanox OFED 2.2 user manual ("cat .../ports/1/state"
    2: INIT, "4: ACTIVE"; link_layer InfiniBand, Ethernet); `ibstatus` (which cats these files) on two 25GbE
    ConnectX RoCE hosts in a public NFS-over-RDMA write-up ("4: ACTIVE", "5: LinkUp", "25 Gb/sec (1X EDR)",
    "10 Gb/sec (1X QDR)", a port "1: DOWN", "3: Disabled", "40 Gb/sec (4X QDR)"); `ibstat` in
    linux-rdma/rdma-core#847 (a port Down, Disabled, rate 10; one Active, LinkUp, 56); the counters as
    prometheus/node_exporter#966 quotes them ("N/A (no PMA)"). Tests: tests/unit/capabilities/nccl/test_rdma_ports.py."""
    found: dict[tuple[str, int], dict[str, str]] = {}
    for line in text.splitlines():
        if line.startswith("ibports "):
            for path in line.split()[1:]:
                directory = PORT_DIR.match(path)  # no port: the glob stays as written, and matches nothing here
                if directory:
                    found.setdefault((directory[1], int(directory[2])), {})
        elif (match := PORT_FILE.match(line)) is not None:
            found.setdefault((match[1], int(match[2])), {})[match[3]] = match[4].strip()
    return [_port(hca, port, files) for (hca, port), files in found.items()]


def _port(hca: str, port: int, files: dict[str, str]) -> RdmaPort:
    rate = files.get("rate", "")
    return RdmaPort(hca, port, _state_word(files.get("state")), number(rate.split()[0]) if rate else None,
                    files.get("link_layer", ""), _state_word(files.get("phys_state")), rate,
                    {name: int(files[f"counters/{name}"]) if files[f"counters/{name}"].isdigit() else None
                     for name in ERROR_COUNTERS if f"counters/{name}" in files})


def _state_word(value: str | None) -> str | None:
    """"4: ACTIVE" -> "ACTIVE", "7: Phy Test" -> "Phy Test"; a word without its number as it is; None: unread."""
    if not value:
        return None
    number_part, colon, word = value.partition(":")
    return word.strip() if colon and number_part.strip().isdigit() else value.strip()


def parse(sections: dict[str, Section], facts: HostFacts) -> None:
    if "net" in sections:
        facts.interfaces, facts.rdma = parse_network(sections["net"].output)


READER = FactReader((FactSection("net", NET_SNIPPET),), parse)
