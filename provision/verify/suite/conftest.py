"""Fixtures of the verify suite: `node` (parametrized by provision.verify.Collector) and `host`."""

import pytest


@pytest.fixture
def host(node):
    """testinfra's host object for this node, over provision's own connection (replaces testinfra's fixture)."""
    return node.host
