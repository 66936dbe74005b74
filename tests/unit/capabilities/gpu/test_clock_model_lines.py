"""clocks --list as printed: the gpu capability makes the lines (a heading per GPU model, a row per memory clock
group), the report only prints them in their tones."""

from __future__ import annotations

import click
from click.testing import CliRunner

from provision.capabilities.capability import HEADING
from provision.capabilities.gpu.clock_models import lines
from provision.output import report

V100 = {"model": "Tesla V100-SXM2-16GB", "gpus": 4, "hosts": 1, "application_clocks": "877,1380",
        "memory_lock": None, "gpu_lock": True, "pairs": [{"mem": [877], "sm_min": 135, "sm_max": 1530, "sm_values": 187}]}
RTX4090 = {"model": "NVIDIA GeForce RTX 4090", "gpus": 7, "hosts": 1, "application_clocks": None,
           "memory_lock": "405..10501", "gpu_lock": True, "pairs": []}


def test_each_model_is_a_heading_then_its_clock_rows():
    shown = lines([V100, RTX4090])
    assert [line.text for line in shown] == [
        "Tesla V100-SXM2-16GB  4 GPU(s) on 1 host(s); application clocks: yes (default 877,1380); "
        "locked: -lgc, no memory lock",
        "  mem 877: sm 135..1530 (187 values)",
        "NVIDIA GeForce RTX 4090  7 GPU(s) on 1 host(s); application clocks: no (use --locked); "
        "locked: -lgc, memory 405..10501",
        "  no supported clocks reported",
    ]
    assert shown[0].parts[0] == ("Tesla V100-SXM2-16GB", HEADING)


def test_the_report_prints_a_heading_bold_and_the_rest_plain():
    @click.command()
    def show() -> None:
        report.print_lines(lines([V100]))

    output = CliRunner().invoke(show, color=True).output
    assert output.startswith("\x1b[1mTesla V100-SXM2-16GB\x1b[0m  4 GPU(s)")
    assert "\n  mem 877: sm 135..1530 (187 values)\n" in output
