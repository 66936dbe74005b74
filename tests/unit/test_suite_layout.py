"""The test suite's own layout: pytest imports test modules by basename (rootdir, no packages), so two modules of
one name in different folders stop the whole collection ("import file mismatch") on a clean clone."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_every_test_module_has_a_name_of_its_own():
    names = Counter(path.name for path in TESTS.rglob("test_*.py"))
    assert [name for name, n in names.items() if n > 1] == []
