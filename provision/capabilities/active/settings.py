"""The active block of the inventory: how `provision verify --active` loads a node."""

from __future__ import annotations

from pydantic import model_validator

from provision.core.settings import Block, Command, refuse, setting


class ActiveSettings(Block):
    """What load to run, and with which Python. Without the block: provision's own load program (torch) in the
    Python beside the launcher's torchrun, else python3. load_command or dcgm_diag runs another load."""

    python: Command | None = setting(None, "a command on PATH or an absolute path, e.g. /opt/venv/bin/python",
                                 "the Python with torch (default: beside provision_launcher.torchrun, else python3)",
                                 examples=["/opt/venv/bin/python"])
    load_command: list[str] | None = setting(
        None, 'an argument list, e.g. ["/usr/local/sbin/site-burn"]',
        "runs instead of provision's load program, given --seconds N; it prints the same JSON line",
        examples=[["/usr/local/sbin/site-burn"]])
    dcgm_diag: int | None = setting(
        None, "1, 2, 3 or 4: the level of `dcgmi diag -r N`", "runs `dcgmi diag -r N -j` as the load (DCGM "
        "installed, nv-hostengine running); its level sets how long, its failed tests are findings", ge=1, le=4,
        examples=[2])
    power_budget_watts: float | None = setting(
        None, "a number of watts > 0", "what the node's power supplies give its GPUs: their instant draws added up "
        "past it under load are a finding (a brownout waiting to happen)", gt=0, examples=[1800])
    expected_port_mbps: float | None = setting(
        None, "a number of Mb/s > 0", "what iperf3 should reach on each NCCL port (default: 70% of the best port of its speed in the group)",
        gt=0, examples=[90000])
    interval_ms: int = setting(100, "an integer, 20..1000 (ms)", "the sampler's interval: 100 is 10 Hz", ge=20,
                               le=1000)

    @model_validator(mode="after")
    def _one_load(self) -> ActiveSettings:
        if self.load_command and self.dcgm_diag is not None:
            raise refuse("load_command and dcgm_diag are two loads; the node runs one",
                         "keep dcgm_diag for `dcgmi diag -r N -j`, or load_command for your own")
        return self
