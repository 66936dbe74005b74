from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
REAL_H100 = FIXTURES / "real" / "h100-80gb-hbm3"
SHARED_REAL_OUTPUTS = Path(__file__).resolve().parents[2] / "shared" / "real-outputs"


def capture(name: str) -> tuple[str, int]:
    """A verbatim capture without its '$ command' first line and '[exit N]' last line: (output, exit code)."""
    lines = (REAL_H100 / name).read_text().splitlines()
    assert lines[0].startswith("$ ") and lines[-1].startswith("[exit ")
    return "\n".join(lines[1:-1]) + "\n", int(lines[-1][6:-1])


@pytest.fixture
def real_output():
    """A file from ../shared/real-outputs (public captures we may read but not copy); skips when absent."""
    def read(relative: str) -> str:
        path = SHARED_REAL_OUTPUTS / relative
        if not path.exists():
            pytest.skip(f"{path} not available")
        return path.read_text().split("# ---\n", 1)[-1]
    return read
