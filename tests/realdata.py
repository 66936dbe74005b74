"""The verbatim real-GPU captures in tests/fixtures/real, for parser and simulator tests."""

from pathlib import Path

REAL_H100 = Path(__file__).parent / "fixtures" / "real" / "h100-80gb-hbm3"


def capture(name: str) -> tuple[str, int]:
    """A verbatim capture without its '$ command' first line and '[exit N]' last line: (output, exit code)."""
    lines = (REAL_H100 / name).read_text().splitlines()
    assert lines[0].startswith("$ ") and lines[-1].startswith("[exit ")
    return "\n".join(lines[1:-1]) + "\n", int(lines[-1][6:-1])


def h100_query_output(fields: list[str] | None = None) -> str:
    """What `--query-gpu=FIELDS --format=csv,nounits` prints on the real H100 (default: the fields we ask for).

    Rebuilt from qgpu.txt (its header, with nvidia-smi's canonical names and units) and qgpu-nh.txt (its
    row, nounits), which asked for more fields: columns are picked by position in the captured command.
    compute_cap was not in that capture: its header is its name, and "9.0" is the H100's (CUDA's compute
    capability table).
    """
    from provision.facts.gpu import QUERY_FIELDS, split_csv_row

    command = (REAL_H100 / "qgpu.txt").read_text().splitlines()[0]
    asked = command.split("--query-gpu=", 1)[1].split(" ", 1)[0].split(",")
    header = split_csv_row(capture("qgpu.txt")[0].splitlines()[0])
    row = split_csv_row(capture("qgpu-nh.txt")[0].strip())
    columns = dict(zip(asked, zip(header, row)))
    columns.setdefault("compute_cap", ("compute_cap", "9.0"))
    picked = [columns[name] for name in fields or [f.name for f in QUERY_FIELDS]]
    return ", ".join(head for head, _ in picked) + "\n" + ", ".join(cell for _, cell in picked) + "\n"
