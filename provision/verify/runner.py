"""verify's runner: the shipped checks in a pytest session in-process, over the nodes read."""

from __future__ import annotations

import contextlib
import io
import os
from pathlib import Path
from typing import Iterator

import pytest

from provision.capabilities.registry import check_files
from provision.verify.model import Node, Verdict
from provision.verify.plugin import Collector

SUITE = Path(__file__).parent / "suite"  # pytest.ini: verify's own pytest settings
AS_INTENDED = Path(__file__).parent / "as_intended.py"  # every task's desired state, after the capabilities' checks


@contextlib.contextmanager
def no_plugin_autoload() -> Iterator[None]:
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
