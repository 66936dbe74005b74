"""What NCCL makes of NCCL_SOCKET_IFNAME: the interfaces a setting selects, by NCCL's own rules.

From NCCL's env docs and its source (src/misc/socket.cc, matchIfList; see
../shared/reference, section 4.2): the value is a comma list of name prefixes; a
leading `^` excludes what the list matches instead, and a following `=` makes each
item an exact name (`^=docker0`). So `ens803f` takes ens803f0 and ens803f1, and
any slower port that happens to share the prefix: the reason verify checks speeds.
"""

from __future__ import annotations


def parse_ifname(value: str) -> tuple[bool, bool, list[str]]:
    """(exclude, exact, items) of an NCCL_SOCKET_IFNAME value."""
    exclude = value.startswith("^")
    value = value[1:] if exclude else value
    exact = value.startswith("=")
    value = value[1:] if exact else value
    # An item may carry ":port" (NCCL_COMM_ID style); interface names never hold a colon.
    return exclude, exact, [item.split(":")[0] for item in value.split(",") if item]


def selected_interfaces(ifname: str, interfaces: list[str]) -> list[str]:
    """The interfaces among `interfaces` that NCCL_SOCKET_IFNAME=`ifname` lets NCCL use, in their order."""
    exclude, exact, items = parse_ifname(ifname)

    def listed(name: str) -> bool:
        return any(name == item if exact else name.startswith(item) for item in items)

    return [name for name in interfaces if listed(name) != exclude]
