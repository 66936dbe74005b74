"""The reset step's script (commands/recovery/gpureset.py), run by sh against stand-in commands that log their
arguments: holders stopped, the reset, holders started again in reverse, the reset's exit kept."""

from __future__ import annotations

import subprocess
from pathlib import Path

from builders.facts import facts

from provision.capabilities.dcgm.facts import DcgmFacts
from provision.capabilities.system.daemons import DaemonProcess
from provision.commands.recovery.gpureset import holders, reset_script


def busy_node(systemd: bool = True):
    node = facts(systemd=systemd, persistenced="/usr/bin/nvidia-persistenced",
                 dcgm=DcgmFacts(hostengine="4.2.3"), daemons={"nv-fabricmanage": [DaemonProcess(812, "root", None)]})
    node.nvidia.persistenced_running = True
    return node


def run(script: str, tmp_path: Path, reset_rc: int = 0) -> tuple[int, list[str], str]:
    log = tmp_path / "calls"
    for name, rc in (("nvidia-smi", reset_rc), ("systemctl", 0), ("nv-hostengine", 0),
                     ("nv-fabricmanager", 0), ("nvidia-persistenced", 0)):
        tool = tmp_path / name
        tool.write_text(f"#!/bin/sh\necho \"{name} $*\" >> {log}\nexit {rc}\n")
        tool.chmod(0o755)
    done = subprocess.run(["sh", "-c", script], capture_output=True, text=True,
                          env={"PATH": f"{tmp_path}:/usr/bin:/bin"})
    return done.returncode, log.read_text().splitlines() if log.exists() else [], done.stdout


def test_the_holders_the_facts_show_are_stopped_around_the_reset_and_started_in_reverse(tmp_path) -> None:
    held = holders(busy_node())
    assert [h.name for h in held] == ["DCGM's host engine", "the fabric manager", "nvidia-persistenced"]
    rc, calls, said = run(reset_script(("00000000:18:00.0", "00000000:2A:00.0"), held), tmp_path)
    assert rc == 0
    assert calls == ["systemctl stop nvidia-dcgm.service", "systemctl stop nvidia-fabricmanager.service",
                     "systemctl stop nvidia-persistenced.service",
                     "nvidia-smi -r -i 00000000:18:00.0,00000000:2A:00.0",
                     "systemctl start nvidia-persistenced.service", "systemctl start nvidia-fabricmanager.service",
                     "systemctl start nvidia-dcgm.service"]
    assert said.splitlines()[0] == "stopped DCGM's host engine"


def test_a_failed_reset_still_starts_what_it_stopped_and_exits_as_the_reset_did(tmp_path) -> None:
    rc, calls, _ = run(reset_script((), holders(busy_node())), tmp_path, reset_rc=255)
    assert rc == 255
    assert "nvidia-smi -r" in calls and calls[-1] == "systemctl start nvidia-dcgm.service"


def test_without_systemd_each_daemon_is_stopped_and_started_by_its_own_program(tmp_path) -> None:
    held = holders(busy_node(systemd=False))
    assert [h.start for h in held] == ["nv-hostengine", "nv-fabricmanager -c /usr/share/nvidia/nvswitch/fabricmanager.cfg",
                                       "/usr/bin/nvidia-persistenced"]
    assert held[0].stop == "nv-hostengine --term" and held[1].stop == "kill 812"


def test_a_node_where_nothing_holds_the_gpus_only_resets(tmp_path) -> None:
    assert holders(facts()) == []
    rc, calls, _ = run(reset_script(("00000000:18:00.0",), []), tmp_path)
    assert (rc, calls) == (0, ["nvidia-smi -r -i 00000000:18:00.0"])
