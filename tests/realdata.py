"""The verbatim real-GPU captures in tests/fixtures/real, for parser and simulator tests."""

from pathlib import Path

REAL_H100 = Path(__file__).parent / "fixtures" / "real" / "h100-80gb-hbm3"


def capture(name: str) -> tuple[str, int]:
    """A verbatim capture without its '$ command' first line and '[exit N]' last line: (output, exit code)."""
    lines = (REAL_H100 / name).read_text().splitlines()
    assert lines[0].startswith("$ ") and lines[-1].startswith("[exit ")
    return "\n".join(lines[1:-1]) + "\n", int(lines[-1][6:-1])


def h100_query_row(fields: list[str]) -> str:
    """Our --query-gpu row for the real H100, rebuilt by name from qgpu.txt (which asked for more fields).

    compute_cap was not in that capture: "9.0" is the H100's (CUDA's compute capability table).
    """
    from provision.facts.gpu import split_csv_row

    header = [h.split(" [")[0].replace("clocks.current.sm", "clocks.sm").replace("clocks.current.memory", "clocks.mem")
              for h in split_csv_row(capture("qgpu.txt")[0].splitlines()[0])]
    row = dict(zip(header, split_csv_row(capture("qgpu-nh.txt")[0].strip())))
    row.setdefault("compute_cap", "9.0")
    return ", ".join(row[f] for f in fields) + "\n"
