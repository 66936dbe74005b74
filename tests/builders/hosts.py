"""An inventory host (provision.inventory.model.Host) from its provision_* blocks, as a user writes them:
`host("rig", provision_gpu={"power_limit": 400})`.

The blocks go through the inventory's own settings models (HostSettings), so a builder cannot make a host the
inventory would refuse: a block it refuses fails the test with the inventory's own words. The host is reached
over SSH as root by default, in group "all"; `flags` are the run flags the command line set
(capabilities/registry.py RUN_FLAGS: "accept_gpu_changes", ...).
"""

from __future__ import annotations

from typing import Any, Iterable

from provision.capabilities.host import VARIABLES, parse_host_settings
from provision.inventory.model import Host


def host(name: str = "node1", address: str | None = None, *, flags: Iterable[str] = (), user: str | None = "root",
         port: int | None = 22, connection: str = "ssh", become: bool = True,
         groups: Iterable[str] = ("all",), **blocks: Any) -> Host:
    """The host `name` (reached at `address`, the name by default) with these provision_* blocks."""
    unknown = sorted(set(blocks) - set(VARIABLES))
    assert not unknown, f"not a provision block: {', '.join(unknown)} (the blocks: {', '.join(sorted(VARIABLES))})"
    settings, problems = parse_host_settings({VARIABLES[key]: value for key, value in blocks.items()},
                                             "builders", f"host {name}")
    assert settings is not None and not problems, "; ".join(map(str, problems))
    return Host(name=name, address=address or name, user=user, port=port, connection=connection, ssh_config=None,
                become=become, groups=list(groups), vars=dict(blocks), settings=settings,
                flags=frozenset(flags))
