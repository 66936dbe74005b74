"""NCCL_SOCKET_IFNAME as NCCL reads it: prefixes, exact names (=), exclusion (^), both (^=)."""

from __future__ import annotations

import pytest

from provision.capabilities.nccl.interfaces import selected_interfaces

NICS = ["lo", "eno1", "ens803f0", "ens803f1", "ens803f10", "docker0", "docker_gwbridge"]


@pytest.mark.parametrize("ifname, selected", [
    ("ens803f", ["ens803f0", "ens803f1", "ens803f10"]),  # a prefix takes every port that starts so
    ("=ens803f0,ens803f1", ["ens803f0", "ens803f1"]),  # exact names: not ens803f10
    ("=ens803f", []),
    ("eno,ens803f1", ["eno1", "ens803f1", "ens803f10"]),
    ("^docker,lo", ["eno1", "ens803f0", "ens803f1", "ens803f10"]),
    ("^=docker0", ["lo", "eno1", "ens803f0", "ens803f1", "ens803f10", "docker_gwbridge"]),
    ("ens803f0:5000", ["ens803f0"]),  # an item may carry a port; names are still prefixes
])
def test_each_form_selects_what_nccl_would(ifname, selected):
    assert selected_interfaces(ifname, NICS) == selected
