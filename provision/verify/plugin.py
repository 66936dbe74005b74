"""verify's pytest plugin: parametrizes the checks by node (and by task), skips those switched off for a node
(verify/switch.py), and records each outcome in the node's verdict."""

from __future__ import annotations

from typing import Any, Generator

import pytest
from pluggy import Result

from provision.core.checks import CheckFailed
from provision.verify.model import FAIL, Failure, Node, Verdict, failures
from provision.verify.switch import switched_off


def checked(item: pytest.Item) -> tuple[Node, str] | None:
    """The node a check item runs for and the check's name as the report shows it ("as_intended[TASK]" for a
    task's); None for an item that is no check of a node."""
    params = getattr(item, "callspec", None) and item.callspec.params  # type: ignore[attr-defined]
    if not params or "node" not in params:
        return None
    name = item.originalname.removeprefix("check_")  # type: ignore[attr-defined]
    return params["node"], name + (f"[{params['task'].name}]" if "task" in params else "")


class Collector:
    """The pytest plugin: parametrizes the checks by node (and task), and records each outcome per host."""

    def __init__(self, nodes: list[Node]):
        self.nodes = nodes
        self.verdicts = {node.name: Verdict(node.name) for node in nodes}

    @pytest.fixture
    def host(self, node: Node) -> object:
        """testinfra's host object for this node, over provision's own connection (replaces testinfra's fixture)."""
        return node.host

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        if "node" not in metafunc.fixturenames:
            return
        if "task" in metafunc.fixturenames:
            pairs = [(node, task) for node in self.nodes for task in node.tasks]
            metafunc.parametrize(("node", "task"), pairs, ids=[f"{n.name}-{t.name}" for n, t in pairs])
        else:
            metafunc.parametrize("node", self.nodes, ids=[n.name for n in self.nodes])

    @pytest.hookimpl(tryfirst=True)
    def pytest_pyfunc_call(self, pyfuncitem: pytest.Function) -> None:
        """A check switched off for its node is skipped with the reason, never run: the report says so."""
        found = checked(pyfuncitem)
        why = switched_off(*found) if found else ""
        if why:
            pytest.skip(why)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[Any]
                                  ) -> Generator[None, Result[pytest.TestReport], None]:
        outcome = yield
        report = outcome.get_result()
        found = checked(item)
        if found is None or (report.when != "call" and not report.failed):
            return
        node, check = found
        verdict = self.verdicts[node.name]
        if report.skipped:  # longrepr: (file, line, "Skipped: why")
            why = report.longrepr[2].removeprefix("Skipped: ") if isinstance(report.longrepr, tuple) else ""
            verdict.skipped.append(f"{check}: {why}" if why else check)
        elif report.passed:
            verdict.passed.append(check)
        else:
            error = call.excinfo.value if call.excinfo else None
            if isinstance(error, CheckFailed):
                verdict.failures += failures(check, error.findings)
            else:  # a check that broke: shown as found, never hidden
                verdict.failures.append(Failure(check, "the check to run", f"{type(error).__name__}: {error}",
                                                "a bug in provision's checks: please report it"))
            verdict.status = FAIL
