"""verify's checks called directly, as the suite calls them (no pytest session): the Node a check is given and its
verdict. A test gives the facts it is about and the host's provision_* blocks: `verdict(check, checked_node(
facts(gpus=gpus(2)), provision_gpu={"power_limit": 400}))`."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import pytest

from provision.capabilities.host import HostFacts
from provision.core.checks import CheckFailed
from provision.core.plan import Task
from provision.verify import Node

from builders.hosts import host


def checked_node(facts: HostFacts, name: str = "rig", *, tasks: Iterable[Task] = (),
                 inventory_path: str = "basement.yaml", **blocks: Any) -> Node:
    """Host `name` as the checks see it: these facts, its inventory host built from `blocks` (builders.hosts)."""
    return Node(name, host(name, **blocks), facts, list(tasks), host=None, inventory_path=inventory_path)


def verdict(check: Callable[..., object], *args: Any) -> CheckFailed | str | None:
    """What the check made of its arguments: the CheckFailed it raised, "skip: why" when it skipped, None when it
    passed."""
    try:
        check(*args)
    except CheckFailed as failed:
        return failed
    except pytest.skip.Exception as skipped:
        return f"skip: {skipped.msg}"
    return None
