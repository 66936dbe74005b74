"""What is wrong with a node's RDMA ports (nccl/facts.py reads them): the ports NCCL may use (NCCL_IB_HCA's
rules), each judged on its own: up (ACTIVE and LinkUp), at the rate expected, no link error counted since boot.
One finding per port and cause: the error counts of a port that is down or slow are said in that finding (one
cable, one cause), not beside it. Pure: checks_rdma.py asks, tests/unit/capabilities/nccl/test_rdma_ports.py tests.

NCCL_IB_HCA, as NCCL's env docs give it (../shared/reference, section 4.2): a comma list of
<hca>[:<port>] items, prefixes unless `=` makes them exact names, an exclusion list after `^`.
"""

from __future__ import annotations

from provision.capabilities.nccl.facts import ERROR_COUNTERS, RdmaPort
from provision.core.checks import CRITICAL, WARNING, Finding

ACTIVE, LINK_UP = "ACTIVE", "LinkUp"
NOT_INITIALIZED = ("INIT", "ARMED")  # the link trained, but no subnet manager has configured the port
CONGESTION = {"port_xmit_discards", "excessive_buffer_overrun_errors"}  # drops for want of credits, not bad bits


def subject(port: RdmaPort) -> str:
    """"mlx5_0:1": the port as NCCL_IB_HCA names it, and what its findings are `about`."""
    return f"{port.hca}:{port.port}"


def nccl_ports(ib_hca: str | None, ports: list[RdmaPort]) -> list[RdmaPort]:
    """The ports NCCL may use under NCCL_IB_HCA=ib_hca (None: every one), in the node's order."""
    if not ib_hca:
        return list(ports)
    exclude = ib_hca.startswith("^")
    items = ib_hca[1:] if exclude else ib_hca
    exact = items.startswith("=")
    items = items[1:] if exact else items
    named = [item.split(":") for item in items.split(",") if item]

    def listed(port: RdmaPort) -> bool:
        return any((port.hca == hca if exact else port.hca.startswith(hca)) and (not rest or rest[0] == str(port.port))
                   for hca, *rest in named)

    return [port for port in ports if listed(port) != exclude]


def is_down(port: RdmaPort) -> bool:
    """A state or physical state read, and not ACTIVE / LinkUp. Neither read: not judged (None fails nothing)."""
    return (port.state is not None and port.state != ACTIVE) or (port.phys_state is not None and
                                                                  port.phys_state != LINK_UP)


def expected_rate(port: RdmaPort, ports: list[RdmaPort], setting: float | None) -> tuple[float, str] | None:
    """(Gb/s, the rule that gave it) for a port: provision_nccl.expected_ib_rate_gbps; else the fastest of the node's other
    ports NCCL may use that are up, of the same link layer (NCCL spreads its traffic over them: the slowest sets
    the pace). None: nothing to hold it to (the only port of its kind, or none of the others up)."""
    if setting is not None:
        return setting, "provision_nccl.expected_ib_rate_gbps"
    others = [p for p in ports if p is not port and p.link_layer == port.link_layer and not is_down(p)
              and p.rate_gbps is not None]
    if not others:
        return None
    fastest = max(others, key=lambda p: p.rate_gbps or 0.0)
    kind = f" {port.link_layer}" if port.link_layer else ""
    return fastest.rate_gbps or 0.0, f"as fast as {fastest.name}, the fastest other{kind} port here"


def counted(port: RdmaPort) -> dict[str, int]:
    """The error counters above zero, in ERROR_COUNTERS' order."""
    return {name: n for name, n in port.counters.items() if n}


def count_words(counts: dict[str, int]) -> str:
    """"symbol_error 1520, port_rcv_errors 37"; a counter at its maximum stops there: "at least" that many."""
    return ", ".join(f"{name} {n}" + (" (its maximum: at least that many)" if n >= (1 << ERROR_COUNTERS[name]) - 1
                                       else "") for name, n in counts.items())


def findings(ports: list[RdmaPort], expected_gbps: float | None = None) -> list[Finding]:
    """What is wrong with `ports` (those NCCL may use), one finding per port and cause, in the ports' order."""
    found: list[Finding] = []
    for port in ports:
        counts = counted(port)
        want = expected_rate(port, ports, expected_gbps) if port.state == ACTIVE else None
        if is_down(port):
            found.append(_down(port, counts))
        elif want is not None and port.rate_gbps is not None and port.rate_gbps < want[0]:
            found.append(_slow(port, *want, counts))
        elif counts:
            found.append(_errors(port, counts))
    return found


def _counted_too(counts: dict[str, int]) -> str:
    return f"; counted since boot: {count_words(counts)}" if counts else ""


def _down(port: RdmaPort, counts: dict[str, int]) -> Finding:
    state = f"state {port.state or 'unreadable'}, physical state {port.phys_state or 'unreadable'}"
    if port.link_layer == "Ethernet":
        fix = (f"{port.hca}'s Ethernet port has no link: check that its network interface is up (`rdma link "
               f"show {port.hca}/{port.port}` on the node names it; `ip link`), then its cable and switch port")
    elif port.phys_state == "Disabled":
        fix = (f"the port is disabled: enable it at its switch port (or with `ibportstate` from the fabric's "
               f"management node), then `ibstat {port.hca} {port.port}` on the node says Active")
    elif port.phys_state in (None, LINK_UP) and port.state in NOT_INITIALIZED:
        fix = ("the link is up but no subnet manager brought the port to ACTIVE: check that opensm (or the "
               "switches' SM) runs on this fabric (`sminfo` on the node)")
    else:
        fix = (f"no link: reseat the cable of {port.name} at both ends and check its switch port (a dark port "
               f"LED: replace the cable or move it to another switch port); `ibstat {port.hca} {port.port}` on the "
               f"node shows the port")
    return Finding(f"{port.name} {ACTIVE}, physical state {LINK_UP}", f"{port.name}: {state}{_counted_too(counts)}",
                   fix, about=(subject(port),), severity=CRITICAL)


def _slow(port: RdmaPort, want: float, rule: str, counts: dict[str, int]) -> Finding:
    said = f" ({port.rate_text})" if port.rate_text else ""
    return Finding(
        f"{port.name} at {want:g} Gb/s ({rule})", f"{port.name} at {port.rate_gbps:g} Gb/s{said}{_counted_too(counts)}",
        "the link trained slower (fewer lanes, 1X of 4X, or a lower speed): a damaged cable or connector, or a "
        f"slower switch port: reseat or replace the cable of {port.name} and check its switch port, then "
        f"`ibstat {port.hca} {port.port}` on the node; slower on purpose: set provision_nccl.expected_ib_rate_gbps",
        about=(subject(port),), severity=WARNING)


def _errors(port: RdmaPort, counts: dict[str, int]) -> Finding:
    reset = f"`perfquery -R -C {port.hca} -P {port.port}` on the node zeroes them: counts that do not grow again " \
            "came from one event"
    if set(counts) <= CONGESTION:
        fix = f"packets dropped for want of credits (congestion, or the far end not taking them): {reset}; " \
              "counts that grow: check the switch port and the fabric's congestion (`ibqueryerrors`)"
    else:
        fix = f"errors at the physical layer (a marginal cable or transceiver): reseat or replace the cable of " \
              f"{port.name} and check its switch port; {reset}"
    return Finding(f"{port.name}: no link error counted since boot", f"{port.name}: {count_words(counts)}", fix,
                   about=(subject(port),), severity=WARNING)
