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
    power_budget_watts: float | None = setting(
        None, "a number of watts > 0", "what the node's power supplies give its GPUs: their instant draws added up "
        "past it under load are a finding (a brownout waiting to happen)", gt=0)
    expected_port_mbps: float | None = setting(
        None, "a number of Mb/s > 0", "what iperf3 should reach on each NCCL port (default: 70% of the best port of its speed in the group)",
        gt=0)
    interval_ms: int = setting(100, "an integer, 20..1000 (ms)", "the sampler's interval: 100 is 10 Hz", ge=20,
                               le=1000)
