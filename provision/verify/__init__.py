"""provision verify: is every node exactly as the inventory intends, and healthy? Read-only.

Each host is read once, with the facts batch `apply` uses (one command per
host, in parallel). Then a pytest session runs in-process over the shipped
checks, each capability's checks.py (provision/capabilities/*/, functions
check_*, in the order capabilities.CHECKS lists them) and then this package's
as_intended.py (every task's plan, which must change nothing), each
parametrized by node (and by task, for the desired-state checks), with the
facts, the inventory's host, and testinfra's `host` object over provision's
own connection (its modules for what the batch does not read). A check
that finds a difference says what it expected, what it found and what to do
(`fail(expected, found, fix)`). Nothing on a node is changed: the batch only
reads, and the desired-state checks are the tasks' own plans, never applied.
"""

from __future__ import annotations

import contextlib
import io
import os
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from provision.capabilities.active.run import ActiveRun
from provision.capabilities.host import HostFacts
from provision.capabilities.registry import check_files
from provision.core.checks import CRITICAL, CheckFailed, Finding
from provision.inventory.model import Host
from provision.core.plan import Task

SUITE = Path(__file__).parent / "suite"  # pytest.ini: verify's own pytest settings
AS_INTENDED = Path(__file__).parent / "as_intended.py"  # every task's desired state, after the capabilities' checks
PASS, FAIL, UNREACHABLE = "pass", "fail", "unreachable"
# verify --active: nothing failed, but the load (or a part of it) did not run on the node: never a pass
NOT_TESTED = "not tested"


@dataclass
class Node:
    """One host as the checks see it."""

    name: str
    inventory: Host
    facts: HostFacts
    tasks: list[Task]
    host: object  # testinfra.host.Host over provision's connection (verify/backend.py)
    inventory_path: str = "INVENTORY"  # for the "what to do" lines
    notes: list[str] = field(default_factory=list)  # note(): said, never failed
    active: ActiveRun | None = None  # verify --active: the load's run on this node (capabilities/active/run.py)

    def __repr__(self) -> str:  # pytest shows it in ids and failures
        return self.name


@dataclass
class Failure:
    """One finding of one check (a check that found several causes has several)."""

    check: str
    expected: str
    found: str
    fix: str = ""
    because: list[str] = field(default_factory=list)  # the leads it named ("CHECK" or "CHECK:SUBJECT"), likeliest first
    about: list[str] = field(default_factory=list)
    severity: str = CRITICAL


@dataclass
class Verdict:
    host: str
    status: str = PASS  # pass | fail | unreachable | not tested
    message: str = ""  # why unreachable
    passed: list[str] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)  # every check's findings, as the checks said them
    skipped: list[str] = field(default_factory=list)  # "check: why"
    notes: list[str] = field(default_factory=list)
    not_tested: list[str] = field(default_factory=list)  # --active: "part: why" for each part the load left untested
    figures: list[dict] = field(default_factory=list)  # --active: what was measured (capabilities/active/outcome.py)

    @property
    def findings(self) -> list[Cause]:
        """The failures grouped by cause: one entry per cause, with the failures that follow from it inside."""
        return by_cause(self.failures)


class Collector:
    """The pytest plugin: parametrizes the checks by node (and task), and records each outcome per host."""

    def __init__(self, nodes: list[Node]):
        self.nodes = nodes
        self.verdicts = {node.name: Verdict(node.name) for node in nodes}

    @pytest.fixture
    def host(self, node):
        """testinfra's host object for this node, over provision's own connection (replaces testinfra's fixture)."""
        return node.host

    def pytest_generate_tests(self, metafunc):
        if "node" not in metafunc.fixturenames:
            return
        if "task" in metafunc.fixturenames:
            pairs = [(node, task) for node in self.nodes for task in node.tasks]
            metafunc.parametrize(("node", "task"), pairs, ids=[f"{n.name}-{t.name}" for n, t in pairs])
        else:
            metafunc.parametrize("node", self.nodes, ids=[n.name for n in self.nodes])

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        outcome = yield
        report = outcome.get_result()
        params = getattr(item, "callspec", None) and item.callspec.params
        if not params or "node" not in params or (report.when != "call" and not report.failed):
            return
        verdict = self.verdicts[params["node"].name]
        check = item.originalname.removeprefix("check_") + (f"[{params['task'].name}]" if "task" in params else "")
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


def failures(check: str, findings: list[Finding]) -> list[Failure]:
    """A check's findings as a verdict records them."""
    return [Failure(check, f.expected, f.found, f.fix, list(f.because), list(f.about), f.severity) for f in findings]


@dataclass
class Cause:
    """One finding as verify reports it: the failure that is the cause, and the failures that follow from it."""

    failure: Failure
    consequences: list[Failure] = field(default_factory=list)


def by_cause(failures: list[Failure]) -> list[Cause]:
    """Group a node's failures by cause. A failure whose `because` names another failure of the node (that
    check, or that check and one of the subjects it is `about`; the first lead that did) goes under that
    failure's cause, followed to the root; one whose leads name nothing that failed here is a cause of its own.
    In the checks' order."""
    def explains(ref: str, other: Failure) -> bool:
        return ref == other.check or any(ref == f"{other.check}:{subject}" for subject in other.about)

    position = {id(failure): i for i, failure in enumerate(failures)}

    def root(failure: Failure) -> Failure:
        chain = [failure]
        while chain[-1].because:
            parent = next((o for lead in chain[-1].because for o in failures
                           if o is not chain[-1] and explains(lead, o)), None)
            if parent is None:
                break
            if any(parent is f for f in chain):  # leads in a circle: the first of it in the checks' order
                start = next(i for i, f in enumerate(chain) if f is parent)
                return min(chain[start:], key=lambda f: position[id(f)])
            chain.append(parent)
        return chain[-1]

    causes: dict[int, Cause] = {}
    for failure in failures:
        top = root(failure)
        cause = causes.setdefault(id(top), Cause(top))
        if top is not failure:
            cause.consequences.append(failure)
    return sorted(causes.values(), key=lambda c: position[id(c.failure)])


@contextlib.contextmanager
def no_plugin_autoload():
    """The suite without the pytest plugins installed beside provision (testinfra's, hypothesis's, a user's):
    none is the suite's, and loading them, their modules' assertions rewritten, cost verify a second."""
    before = os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD")
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    try:
        yield
    finally:
        if before is None:
            del os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"]
        else:
            os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = before


def run_checks(nodes: list[Node], junitxml: str | None = None) -> dict[str, Verdict]:
    """Run the suite in-process over the nodes; the verdict per host. pytest's own output is not shown."""
    collector = Collector(nodes)
    if nodes:
        args = [*map(str, check_files()), str(AS_INTENDED), "-c", str(SUITE / "pytest.ini"), "--rootdir", str(SUITE), "-q",
                "-p", "no:cacheprovider", "--assert=plain",  # the checks raise CheckFailed: no assert to rewrite
                # pytest's watch for exceptions nobody could catch (three hook calls per check, a full garbage
                # collection at the end: about 1% of a 32-node verify's Python time) reports them as warnings,
                # which no verdict reads
                "-p", "no:unraisableexception", "-p", "no:threadexception",
                # Per check pytest also swaps stdout for a buffer, installs a log handler and a warnings
                # filter; no verdict reads what they catch (the checks print nothing, a check's warning or
                # log line goes to this run's stderr, as from the rest of provision): about a fifth of the
                # suite's CPU
                "--capture=no", "-p", "no:logging", "-p", "no:warnings",
                # The verdicts come from the checks' own CheckFailed; pytest's traceback of each failure (every
                # check file parsed again for each) is only the JUnit XML's text: 32 nodes' checks, 2.9 -> 1.8 s
                *(["--junitxml", junitxml] if junitxml else ["--tb=no"])]
        with no_plugin_autoload(), contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            pytest.main(args, plugins=[collector])
    for node in nodes:
        collector.verdicts[node.name].notes = list(node.notes)
    return collector.verdicts
