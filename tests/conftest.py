from pathlib import Path

import pytest

SHARED_REAL_OUTPUTS = Path(__file__).resolve().parents[2] / "shared" / "real-outputs"


@pytest.fixture
def real_output():
    """A file from ../shared/real-outputs (public captures we may read but not copy); skips when absent."""
    def read(relative: str) -> str:
        path = SHARED_REAL_OUTPUTS / relative
        if not path.exists():
            pytest.skip(f"{path} not available")
        return path.read_text().split("# ---\n", 1)[-1]
    return read
