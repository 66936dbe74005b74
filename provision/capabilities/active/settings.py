"""The active block of the inventory: how `provision verify --active` loads a node."""

from __future__ import annotations

from provision.core.settings import SHELL_WORD, Block, setting


class ActiveSettings(Block):
    """What load to run, and with which Python. Without the block: provision's own load program (torch) in the
    Python beside the launcher's torchrun, else python3."""

    python: str | None = setting(None, "a command on PATH or an absolute path, e.g. /opt/venv/bin/python",
                                 "the Python with torch (default: beside launcher.torchrun, else python3)",
                                 pattern=SHELL_WORD.pattern)
    load_command: list[str] | None = setting(
        None, 'an argument list, e.g. ["/usr/local/sbin/site-burn"]',
        "runs instead of provision's load program, given --seconds N; it prints the same JSON line")
    expected_port_mbps: float | None = setting(
        None, "a number of Mb/s > 0", "what iperf3 should reach on each NCCL port (default: 90% of its link speed)",
        gt=0)
    interval_ms: int = setting(100, "an integer, 20..1000 (ms)", "the sampler's interval: 100 is 10 Hz", ge=20,
                               le=1000)
