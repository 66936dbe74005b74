"""What NCCL makes of a node's network: the interfaces it will use, by NCCL's own rules, and what is wrong.

From NCCL's env docs and its source (../shared/reference, section 4.2; NVIDIA/nccl src/misc/socket.cc
ncclFindInterfaces, src/os/linux.cc ncclOsFindInterfaces, src/misc/utils.cc matchIfList):

- NCCL_SOCKET_IFNAME is a comma list of name prefixes; a leading `^` excludes what the list matches
  instead, and a following `=` makes each item an exact name (`^=docker0`). So `ens803f` takes ens803f0
  and ens803f1, and any slower port that happens to share the prefix: the reason speeds are checked.
- A value of one character or none is ignored: NCCL then chooses by itself, in this order until one
  step finds something: `ib*`, everything but docker*, lo and virbr*, then docker*, lo, virbr*. Once the
  variable is set, that default exclusion of lo and docker* no longer applies (`^eth` takes lo).
- Only running interfaces (up, with a link) that have an IPv4 or IPv6 address count, at most 16, in the
  kernel's order. A matched port that is down is skipped without a word: scaling just drops.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dataclasses import dataclass, field

from provision.capabilities.nccl.facts import Interface, RdmaPort
from provision.capabilities.nccl.settings import NcclSettings

if TYPE_CHECKING:  # types only
    from provision.capabilities.host import HostFacts

MAX_INTERFACES = 16  # MAX_IFS in NCCL's socket code
AUTOMATIC_ORDER = ("ib", "^docker,lo,virbr", "docker", "lo", "virbr")
NOT_A_FABRIC = ("lo", "docker", "virbr")  # what NCCL's automatic choice avoids


def parse_ifname(value: str) -> tuple[bool, bool, list[str]]:
    """(exclude, exact, items) of an NCCL_SOCKET_IFNAME (or NCCL_IB_HCA) value."""
    exclude = value.startswith("^")
    value = value[1:] if exclude else value
    exact = value.startswith("=")
    value = value[1:] if exact else value
    # An item may carry ":port" (NCCL_IB_HCA's mlx5_0:1); interface names never hold a colon.
    return exclude, exact, [item.split(":")[0] for item in value.split(",") if item.split(":")[0]]


def selected_interfaces(ifname: str, interfaces: list[str]) -> list[str]:
    """The names among `interfaces` that NCCL_SOCKET_IFNAME=`ifname` matches, in their order."""
    exclude, exact, items = parse_ifname(ifname)

    def listed(name: str) -> bool:  # an empty list matches every name, as in NCCL's matchIfList
        return not items or any(name == item if exact else name.startswith(item) for item in items)

    return [name for name in interfaces if listed(name) != exclude]


@dataclass
class Selection:
    """The interfaces NCCL's socket transport will use on a node, and those it matched but will skip."""

    rule: str  # how they were chosen, in words
    used: list[Interface] = field(default_factory=list)
    skipped: list[tuple[Interface, str]] = field(default_factory=list)  # matched by name; why NCCL skips it

    def describe(self) -> str:
        """'ens803f0 10000 Mb/s, ens803f1 10000 Mb/s' (or 'none'), then what is skipped and why."""
        used = ", ".join(f"{i.name} {speed_words(i)}" for i in self.used) or "none"
        skipped = "".join(f"; skips {i.name}, which {why}" for i, why in self.skipped)
        return used + skipped


def speed_words(interface: Interface) -> str:
    return f"{interface.speed_mbps} Mb/s" if interface.speed_mbps else "speed unknown"


def usable(interface: Interface) -> str | None:
    """None when NCCL can use the interface, else why not ("is down")."""
    if not interface.running:
        return "is down" if interface.operstate != "up" else "is administratively down"
    if interface.addressed is False:
        return "has no IP address"
    return None


def _find(prefix_list: str, interfaces: list[Interface]) -> Selection:
    names = set(selected_interfaces(prefix_list, [i.name for i in interfaces]))
    selection = Selection(f"NCCL_SOCKET_IFNAME={prefix_list}")
    for interface in (i for i in interfaces if i.name in names):
        why = usable(interface)
        if why:
            selection.skipped.append((interface, why))
        elif len(selection.used) < MAX_INTERFACES:
            selection.used.append(interface)
    return selection


def select(ifname: str | None, interfaces: list[Interface]) -> Selection:
    """What NCCL will use with NCCL_SOCKET_IFNAME=ifname (None: unset)."""
    if ifname is not None and len(ifname) > 1:
        return _find(ifname, interfaces)
    for step in AUTOMATIC_ORDER:
        found = _find(step, interfaces)
        if found.used:
            return Selection(f"NCCL's own choice ({step})", found.used)
    return Selection("NCCL's own choice")


@dataclass(frozen=True)
class NetProblem:
    """One thing wrong with what NCCL will use, in a sentence naming the interfaces; its kind (KINDS) says
    what to do about it."""

    kind: str
    text: str
    because: tuple[str, ...] = ()  # the check it follows from (Finding.because): an IPoIB port down with its IB port

    def __str__(self) -> str:
        return self.text


# Each kind of problem, and the next step for it (verify says one per kind: one cause, one finding).
KINDS = {
    "unread": "run `provision facts` on the node: it says why its interfaces could not be read",
    "unmatched": "a NIC renamed after a new card, driver or kernel? compare `ip -br link` on the node with "
                 "provision_nccl.socket_ifname and fix the inventory",
    "down": "a port down: check its cable, the switch port and `ip link show` on the node; a port left out on "
            "purpose: make provision_nccl.socket_ifname exact (=NAME,NAME)",
    "unaddressed": "give the port its address (the node's network configuration), or leave it out of "
                   "provision_nccl.socket_ifname",
    "stray": "exclude them: provision_nccl.socket_ifname '^...,lo,docker', or name the fabric's ports",
    "slow": "a port at the wrong speed is cabled to a slower switch port (the 1GbE uplink?): move the cable; "
            "check `ethtool NAME` on the node; a port left out on purpose: make provision_nccl.socket_ifname exact",
    "hca": "fix provision_nccl.ib_hca to the RDMA devices the node has (ls /sys/class/infiniband), or set provision_nccl.ib_disable",
}


def link_problems(settings: NcclSettings, interfaces: list[Interface] | None) -> list[NetProblem]:
    """What is wrong with the interfaces NCCL will use under `settings` (an NcclSettings), one sentence each,
    naming the interfaces. Empty when NCCL will use what the inventory means."""
    if interfaces is None:
        return [NetProblem("unread", "the node's network interfaces could not be read")]
    ifname = settings.socket_ifname
    selection = select(ifname, interfaces)
    names = ", ".join(i.name for i in interfaces) or "no interface"
    if ifname and not selection.used and not selection.skipped:
        return [NetProblem("unmatched", f"NCCL_SOCKET_IFNAME={ifname} matches none of this node's interfaces "
                                        f"({names})")]
    problems = _missing(ifname, interfaces) if ifname else []
    skipped = [_skipped(i, why) for i, why in selection.skipped]
    problems += skipped
    if not selection.used:
        # left with none because RDMA ports are down (IPoIB only): those ports' finding
        leads = tuple(lead for p in skipped for lead in p.because) if all(p.because for p in skipped) else ()
        return problems + [NetProblem("unmatched", f"NCCL would find no interface to use ({selection.rule}) "
                                                   f"among {names}", leads)]
    if ifname:
        strays = [i.name for i in selection.used if i.name.startswith(NOT_A_FABRIC)]
        if strays:
            problems.append(NetProblem("stray", f"NCCL_SOCKET_IFNAME={ifname} lets NCCL use {', '.join(strays)}: "
                                                "once the variable is set NCCL no longer leaves lo and docker* out "
                                                "by itself"))
    problems += _speed_problems(settings, selection.used)
    return problems


def _skipped(interface: Interface, why: str) -> NetProblem:
    down = why.endswith("down")
    # an interface on an RDMA port (IPoIB's ib0, RoCE's netdev) is down with it: one cable, the port's finding
    on_port = (f"rdma_ports_are_up_at_rate_without_errors:{interface.rdma_port}",) if down and interface.rdma_port \
        else ()
    return NetProblem("down" if down else "unaddressed", f"{interface.name} {why}: NCCL skips it without a word",
                      on_port)


def _missing(ifname: str, interfaces: list[Interface]) -> list[NetProblem]:
    """The names (exact) or prefixes of an include list that match no interface: a port gone missing."""
    exclude, exact, items = parse_ifname(ifname)
    if exclude:
        return []
    names = [i.name for i in interfaces]
    absent = [item for item in items if not (item in names if exact else any(n.startswith(item) for n in names))]
    return [NetProblem("unmatched", f"NCCL_SOCKET_IFNAME={ifname}: no interface {item} on this node")
            for item in absent]


def _speed_problems(settings: NcclSettings, used: list[Interface]) -> list[NetProblem]:
    expected = settings.expected_link_speed_mbps
    if expected:
        off = [f"{i.name} {speed_words(i)}" for i in used if i.speed_mbps != expected]
        return [NetProblem("slow", f"{', '.join(off)}, not {expected} Mb/s (expected_link_speed_mbps)")] if off else []
    speeds = {i.speed_mbps for i in used if i.speed_mbps}
    if len(speeds) > 1 and not settings.allow_mixed_speeds:
        return [NetProblem("slow", f"{', '.join(f'{i.name} {speed_words(i)}' for i in used)}: interfaces of "
                                   "different speeds (NCCL spreads traffic evenly, so the slowest sets the pace; "
                                   "allow_mixed_speeds: true if meant)")]
    return []


def node_problems(settings: NcclSettings, facts: HostFacts) -> list[NetProblem]:
    """Everything that stops NCCL's files from meaning what the inventory says on this node: the interfaces
    NCCL will use, then the RDMA devices NCCL_IB_HCA names (unless IB is off). Apply and verify both ask."""
    wrong = link_problems(settings, facts.interfaces)
    if not settings.ib_disable:
        wrong += hca_problems(settings.ib_hca, facts.rdma)
    return wrong


def hca_problems(ib_hca: str | None, ports: list[RdmaPort]) -> list[NetProblem]:
    """NCCL_IB_HCA names RDMA devices (and ports) that this node does not have."""
    if not ib_hca:
        return []
    exclude, exact, _ = parse_ifname(ib_hca)
    if exclude:
        return []  # an exclusion list needs nothing to exist
    have = sorted({f"{p.hca}:{p.port}" for p in ports})
    missing = []
    for item in ib_hca.lstrip("^=").split(","):
        hca, _, port = item.partition(":")
        port = port.partition(":")[0]
        found = [p for p in ports if (p.hca == hca if exact else p.hca.startswith(hca))
                 and (not port or str(p.port) == port)]
        if not found:
            missing.append(item)
    if missing:
        return [NetProblem("hca", f"NCCL_IB_HCA={ib_hca}: no RDMA device {', '.join(missing)} here "
                                  f"(this node has: {', '.join(have) or 'none'}; /sys/class/infiniband)")]
    return []


def summary(settings: NcclSettings | None, interfaces: list[Interface] | None) -> dict[str, Any]:
    """What `provision facts` says of NCCL on a node: the rule, the interfaces it will use (name, Mb/s), those
    it will skip, and the problems apply would refuse to write over. settings: an NcclSettings, or None."""
    settings = settings or NcclSettings()
    if interfaces is None:
        return {"rule": "", "uses": [], "skips": [], "problems": [str(p) for p in link_problems(settings, None)]}
    selection = select(settings.socket_ifname, interfaces)
    return {"rule": selection.rule,
            "uses": [{"name": i.name, "speed_mbps": i.speed_mbps} for i in selection.used],
            "skips": [{"name": i.name, "why": why} for i, why in selection.skipped],
            "problems": [str(p) for p in link_problems(settings, interfaces)]}
