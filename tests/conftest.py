"""Fixtures shared by every test folder.

`real_output` reads ../shared/real-outputs (beside the repository): verbatim outputs found in public
repositories, which tests may read but the project must never hold copies of. Tests that need one skip
cleanly when the folder is absent. PROVISION_SHARED_REAL_OUTPUTS, when set, names another folder to read
them from (set it to a path that does not exist, e.g. /nonexistent, to check that those tests skip).
"""

import os
from pathlib import Path

import pytest

SHARED_REAL_OUTPUTS = Path(os.environ.get("PROVISION_SHARED_REAL_OUTPUTS")
                           or Path(__file__).resolve().parents[2] / "shared" / "real-outputs")


@pytest.fixture
def real_output():
    """A file from ../shared/real-outputs (public captures we may read but not copy), without its header
    (the lines up to "# ---"); skips the test when absent, or returns None then if optional=True (for a
    test that also reads other inputs and should go on without it)."""
    def read(relative: str, *, optional: bool = False) -> str | None:
        path = SHARED_REAL_OUTPUTS / relative
        if not path.exists():
            if optional:
                return None
            pytest.skip(f"{path} not available")
        return path.read_text().split("# ---\n", 1)[-1]
    return read
