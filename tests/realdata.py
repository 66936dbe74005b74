"""The verbatim real-GPU captures in tests/fixtures/real, for parser and simulator tests."""

from pathlib import Path

REAL = Path(__file__).parent / "fixtures" / "real"
REAL_H100 = REAL / "h100-80gb-hbm3"
REAL_H200 = REAL / "h200"
REAL_H200_MODES = REAL / "h200-modes"


def capture(name: str, folder: Path = REAL_H100) -> tuple[str, int]:
    """A verbatim capture without its '$ command' first line and '[exit N]' last line: (output, exit code).
    folder: which machine's captures (REAL_H100, the default, or REAL_H200)."""
    lines = (folder / name).read_text().splitlines()
    assert lines[0].startswith("$ ") and lines[-1].startswith("[exit ")
    return "\n".join(lines[1:-1]) + "\n", int(lines[-1][6:-1])


def _captured_columns(name: str, noheader_name: str | None = None,
                      folder: Path = REAL_H100) -> dict[str, tuple[str, str]]:
    """field asked for -> (header cell, row cell) of a captured --query-* output. The row comes from the
    nounits capture where there is one (noheader_name), else from the capture itself."""
    command = (folder / name).read_text().splitlines()[0]
    asked = command.split("=", 1)[1].split(" ", 1)[0].split(",")
    output = capture(name, folder)[0].splitlines()
    row = capture(noheader_name, folder)[0].strip() if noheader_name else output[1]
    return dict(zip(asked, zip(split_csv_row(output[0]), split_csv_row(row))))


def split_csv_row(line: str) -> list[str]:
    from provision.capabilities.gpu.smi import split_csv_row as split
    return split(line)


def recovery_column() -> tuple[str, str]:
    """(header, cell) of --query-gpu=gpu_recovery_action on the real H200 (h200-recovery/recovery-field.txt, which
    has no '$' framing: the csv header, its row, rc=0, ...)."""
    header, cell = (REAL / "h200-recovery" / "recovery-field.txt").read_text().splitlines()[:2]
    return header, cell


def h100_query_output(fields: list[str] | None = None) -> str:
    """What `--query-gpu=FIELDS --format=csv,nounits` prints on the real H100 (default: the fields we ask for).

    Rebuilt from qgpu.txt (its header, with nvidia-smi's canonical names and units) and qgpu-nh.txt (its
    row, nounits), which asked for more fields: columns are picked by the name asked for in the captured
    command. The health fields come from qgpu2 (clocks_throttle_reasons.active, shown as
    clocks_event_reasons.active, and retired_pages.pending) and remapped.txt (remapped_rows.*, whose
    values read the same in --query-gpu). compute_cap was not in those captures: its header is its name,
    and "9.0" is the H100's (CUDA's compute capability table); nor was fabric.*, N/A in the capture's -q. The
    pending modes (ecc.mode.pending, mig.mode.pending) are the real H200's (h200-modes/q-modes.txt), where the
    H100's captures lack them; so is gpu_recovery_action (h200-recovery).
    """
    from provision.capabilities.gpu.smi import QUERY_FIELDS

    columns = _captured_columns("q-modes.txt", folder=REAL_H200_MODES)
    columns.update(_captured_columns("remapped.txt"))
    columns.update(_captured_columns("qgpu2.txt", "qgpu2-nh.txt"))
    columns.update(_captured_columns("qgpu.txt", "qgpu-nh.txt"))
    columns.setdefault("compute_cap", ("compute_cap", "9.0"))
    for name in ("fabric.state", "fabric.status"):  # not in the captures either: -q's Fabric section reads N/A
        columns.setdefault(name, (name, "[N/A]"))
    columns.setdefault("gpu_recovery_action", recovery_column())  # the H200's, the same driver
    picked = [columns[name] for name in fields or [f.name for f in QUERY_FIELDS]]
    return ", ".join(head for head, _ in picked) + "\n" + ", ".join(cell for _, cell in picked) + "\n"
