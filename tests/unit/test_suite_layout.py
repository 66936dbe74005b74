"""The test suite's own layout: pytest imports test modules by basename (rootdir, no packages), so two modules of
one name in different folders stop the whole collection ("import file mismatch") on a clean clone."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_every_test_module_has_a_name_of_its_own():
    names = Counter(path.name for path in TESTS.rglob("test_*.py"))
    assert [name for name, n in names.items() if n > 1] == []


def imported_modules(path: Path) -> list[str]:
    """Every module `path` imports, at its top or inside a function: "a.b" for `import a.b` and `from a.b import
    c`, and "a.b.c" too for the latter (c may be a module)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found += [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
    return found


# The one import left: the Slurm lab test runs the README's Slurm block by its place in test_readme.py's WHERE, where
# every page's command is registered; it goes when WHERE moves to a module of its own (tests/docpages.py).
WHERE_USERS = {"lab/test_slurm.py: docs.test_readme", "lab/test_slurm.py: docs.test_readme.commands_for"}


def test_no_test_module_imports_another_nor_the_tests_package():
    """What tests share lives in tests/builders (or a helper module beside conftest.py), imported from tests/ (on
    sys.path through conftest.py): a test module imported by another ties their tests together, and a name under
    `tests.` is found only when the repository root is on sys.path too (python -m pytest, not pytest)."""
    wrong = sorted(f"{path.relative_to(TESTS)}: {name}" for path in TESTS.rglob("*.py")
                   for name in imported_modules(path)
                   if name.split(".")[0] == "tests" or name.split(".")[-1].startswith("test_"))
    assert [line for line in wrong if line not in WHERE_USERS] == []
