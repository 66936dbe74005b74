"""What an operator reads: a no-op at 16 hosts fits a screen, findings are not buried, columns hold, progress
is a live bar on a terminal and plain lines on a pipe."""

from __future__ import annotations

import io
import re

import pytest

from provision.output import report
from provision.core.run import Event
from provision.output.progress import Progress
from provision.core.results import UNREACHABLE, HostResult, TaskResult
from provision.core.plan import CHANGED, FAILED, OK, SKIPPED, Item

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
TASKS = ("gpu-layout", "gpu-persistence", "gpu-power-limit", "gpu-clocks", "gpu-locked-clocks", "gpu-boot-conf",
         "gpu-boot-script", "gpu-boot-unit-file", "gpu-boot-unit")


def converged(host: str) -> HostResult:
    tasks = [TaskResult(name, OK, [Item(f"GPU{i}", OK, "power limit", after="200.00 W") for i in range(4)])
             for name in TASKS]
    tasks[4] = TaskResult("gpu-locked-clocks", SKIPPED, message="provision_gpu.locked_clocks not set")
    return HostResult(host, OK, tasks, commands=1, seconds=0.21)


def printed(capsys, results, check=False, verbose=False, columns=100) -> list[str]:
    with pytest.MonkeyPatch.context() as env:
        env.setenv("COLUMNS", str(columns))  # a terminal this wide (100: what a pipe gets)
        report.print_results(results, check, show_diff=False, verbose=verbose)
    return ANSI.sub("", capsys.readouterr().out).splitlines()


def test_a_no_op_at_16_hosts_is_one_line_per_host_and_the_totals(capsys):
    lines = printed(capsys, [converged(f"lab-v100-{n}") for n in range(1, 17)])
    assert len(lines) <= 20
    assert lines[0] == "lab-v100-1   ok=8 changed=0 failed=0 skipped=1  (1 command, 0.21 s)"
    assert lines[-1] == "16 hosts: 16 ok"
    assert len(printed(capsys, [converged("a")], verbose=True)) > 30  # -v: every task and GPU


def test_findings_are_shown_under_their_host_and_again_in_the_attention_list(capsys):
    results = [converged(f"node{n:02}") for n in range(1, 17)]
    results[3].tasks[2] = TaskResult("gpu-power-limit", CHANGED, [
        Item("GPU2", CHANGED, "power limit", "250.00 W", "200.00 W", "would change")])
    results[3].status = CHANGED
    results[7].tasks[0] = TaskResult("gpu-layout", FAILED, [Item("host", FAILED, "GPU layout", message=(
        "GPU3 GPU-5c1d at 00000000:41:00.0 (NVIDIA GeForce RTX 4090) is gone: nvidia-smi no longer lists it"))],
        "1 GPU(s) differ from the last good run on this host")
    results[7].status = FAILED
    results[11] = HostResult("node12", UNREACHABLE, message="connection refused on 192.0.2.12:22")
    lines = printed(capsys, results, check=True)
    assert len(lines) <= 16 + 4 + 1 + 1 + 4  # the layout finding wraps onto a second line, under its text
    assert lines[lines.index("    failed       gpu-layout: 1 GPU(s) differ from the last good run on this host") + 1] \
        .startswith("    failed       gpu-layout host: GPU layout: GPU3 GPU-5c1d at 00000000:41:00.0 (NVIDIA")
    assert all(len(line) <= 100 for line in lines)
    wrapped = lines.index("    failed       gpu-layout: 1 GPU(s) differ from the last good run on this host") + 2
    assert lines[wrapped].startswith(" " * 17) and lines[wrapped].strip()
    assert lines[4] == "    would change gpu-power-limit GPU2: power limit: 250.00 W -> 200.00 W"
    assert "    failed       gpu-layout: 1 GPU(s) differ from the last good run on this host" in lines
    assert "node12  UNREACHABLE  connection refused on 192.0.2.12:22" in lines
    tail = lines[lines.index("Needs attention:"):]
    assert tail == ["Needs attention:",
                    "  node04  would change: gpu-power-limit",
                    "  node08  failed: gpu-layout: 1 GPU(s) differ from the last good run on this host",
                    "  node12  unreachable: connection refused on 192.0.2.12:22"]
    assert "16 hosts: 13 ok, 1 would change, 1 failed, 1 unreachable  (check mode: nothing was changed)" in lines


def test_long_paths_and_names_never_push_the_status_column(capsys):
    long_path = "/etc/systemd/system/nvidia-persistenced.service.d/" + "x" * 80 + ".conf"
    result = HostResult("node1", CHANGED, [
        TaskResult("a-task-with-a-rather-long-name", CHANGED, [Item(long_path, CHANGED, "file", "absent", "written")]),
        TaskResult("gpu-power-limit", CHANGED, [Item("GPU0", CHANGED, "power limit", "300.00 W", "200.00 W")])])
    details = [line for line in printed(capsys, [result]) if line.startswith("    ")]
    starts = [line for line in details if line[4] != " "]  # the rest: wrapped under the text, at column 17
    assert [line[4:17] for line in starts] == ["changed      "] * 2
    assert all(line.startswith(" " * 17) and line[17] != " " for line in details if line not in starts)
    assert any(long_path in line for line in details)  # a path is never cut


def test_progress_is_a_live_bar_on_a_terminal_and_plain_lines_on_a_pipe():
    events = [Event("read", 1, 2, "node1"), Event("applied", 0, 2, "node1", "gpu-clocks"),
              Event("applied", 1, 2, "node1")]
    pipe = io.StringIO()
    plain = Progress(pipe, live=False)
    for event in events:
        plain(event)
    plain.notice("node2: waiting up to 60 s for the host lock")
    assert pipe.getvalue().splitlines() == ["[1/2] node1 read", "[1/2] node1 applied",
                                            "node2: waiting up to 60 s for the host lock"]
    tty = io.StringIO()
    live = Progress(tty, live=True)
    for event in events:
        live(event)
    live.close()
    frames = tty.getvalue().split("\r\x1b[K")
    assert frames[2] == "[..........] 0/2 applying node1: gpu-clocks".replace("..........", "." * 20)
    assert frames[-1] == "" and "\n" not in tty.getvalue()  # redrawn in place, cleared at the end
    quiet = io.StringIO()
    Progress(quiet, live=False, enabled=False)(events[0])
    assert quiet.getvalue() == ""


def test_facts_shows_the_clocks_the_way_they_are_set():
    from builders.gpus import gpu
    from provision.capabilities.gpu.shown import clocks_set
    assert clocks_set(gpu(0, "V100", app_clock_mem=877, app_clock_sm=1005)) == "app 877,1005"
    assert clocks_set(gpu(0, "RTX 4090", locked={"sm": "210,2520"})) == "locked sm 210,2520"
    assert clocks_set(gpu(0, "RTX 3090")) == "default"
    assert clocks_set(gpu(0, "RTX 3090", locked={"sm": "default"})) == "default"


def test_the_reboots_say_which_went_through_slurm_and_why_a_node_stayed_drained(capsys):
    from provision.commands.reboot_outcome import NOT_RESUMED, REBOOTED, RebootOutcome
    from provision.output.report import print_reboots

    print_reboots([RebootOutcome("gpu-1", ["pending"], REBOOTED, via="slurm", batch=1, sent=0.1, down=36.5, back=40.5,
                                 loaded_after="570.195.03"),
                   RebootOutcome("gpu-2", ["pending"], REBOOTED, batch=2, sent=41.0, back=60.0, loaded_after="570.195.03"),
                   RebootOutcome("gpu-3", ["pending"], NOT_RESUMED, "left drained in Slurm: verify failed: x: y",
                                 via="slurm")], 1)
    lines = capsys.readouterr().out.splitlines()
    assert lines[2] == ("  gpu-1  rebooted  batch 1: through Slurm, sent +0.1 s, down +36.5 s, back +40.5 s (40.4 s); "
                        "driver loaded: 570.195.03")
    assert lines[3] == "  gpu-2  rebooted  batch 2: sent +41.0 s, back +60.0 s (19.0 s); driver loaded: 570.195.03"
    assert lines[4] == "  gpu-3  not resumed  left drained in Slurm: verify failed: x: y"
