"""The verbatim real-GPU captures in tests/fixtures/real, for parser and simulator tests."""

from pathlib import Path

REAL_H100 = Path(__file__).parent / "fixtures" / "real" / "h100-80gb-hbm3"


def capture(name: str) -> tuple[str, int]:
    """A verbatim capture without its '$ command' first line and '[exit N]' last line: (output, exit code)."""
    lines = (REAL_H100 / name).read_text().splitlines()
    assert lines[0].startswith("$ ") and lines[-1].startswith("[exit ")
    return "\n".join(lines[1:-1]) + "\n", int(lines[-1][6:-1])
