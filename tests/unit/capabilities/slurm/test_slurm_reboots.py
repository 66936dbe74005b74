"""Reboots handed to Slurm: the scontrol commands, and where a node stands read from `scontrol -o show node`.

The lines are shaped as Slurm 22.05.8 prints them with -o (src/api/node_info.c at slurm-22-05-8-1: State= is the
base state and its flags joined by "+", NextState= only while a reboot is pending, Reason= last with
[user@time]); the state spellings are real ones (aws-parallelcluster-node's tests: MIXED+DRAIN+REBOOT_REQUESTED,
DOWN+DRAIN+REBOOT_ISSUED). tests/lab/test_slurm_reboot.py holds the same reading to the lab's real slurmctld."""

from __future__ import annotations

import os
import subprocess

import pytest

from provision.capabilities.slurm import reboots
from provision.capabilities.slurm.facts import SlurmNodeState


def show_line(name: str, state: str, reason: str = "", address: str = "", next_state: str = "") -> str:
    return (f"NodeName={name} Arch=x86_64 CoresPerSocket=20 CPUAlloc=0 CPUTot=80 CPULoad=0.02 "
            f"AvailableFeatures=(null) ActiveFeatures=(null) Gres=gpu:v100:4 NodeAddr={address or name} "
            f"NodeHostName={name} Version=22.05.8 OS=Linux 6.1.0-40-amd64 #1 SMP PREEMPT_DYNAMIC Debian "
            f"RealMemory=377866 AllocMem=0 FreeMem=371000 Sockets=2 Boards=1 State={state} ThreadsPerCore=2 "
            f"TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A " + (f"NextState={next_state} " if next_state else "")
            + "Partitions=v100 BootTime=2026-11-28T10:00:01 SlurmdStartTime=2026-11-28T10:00:09 "
            "LastBusyTime=2026-11-28T10:05:00 CfgTRES=cpu=80,mem=377866M,billing=80,gres/gpu=4 AllocTRES= "
            "CapWatts=n/a CurrentWatts=0 AveWatts=0 ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s"
            + (f" Reason={reason} [root@2026-11-28T10:06:00]" if reason else ""))


OURS = "provision-reboot: driver 580.159.04 is installed, 570.195.03 is loaded"


@pytest.mark.parametrize("state, reason, phase", [
    ("IDLE", "", reboots.IN_SERVICE),
    ("MIXED", "", reboots.IN_SERVICE),
    ("IDLE+DRAIN", "new PSU, burn-in first", reboots.NOT_OURS),
    ("DOWN+NOT_RESPONDING", "Not responding", reboots.NOT_OURS),
    ("IDLE+REBOOT_REQUESTED", "reboot requested", reboots.NOT_OURS),  # someone else's reboot: theirs to finish
    ("IDLE+DRAIN", OURS, reboots.DRAINED),  # our drain landed, the reboot ask did not
    ("IDLE+DRAIN", "provision-verify: gpus_are_present: 3 of 4", reboots.DRAINED),  # verify's drain: ours too
    ("MIXED+DRAIN+REBOOT_REQUESTED", OURS, reboots.REQUESTED),
    ("DOWN+DRAIN+REBOOT_ISSUED", OURS + " : reboot issued", reboots.ISSUED),
    ("DOWN+DRAIN+NOT_RESPONDING+REBOOT_ISSUED", OURS + " : reboot issued", reboots.ISSUED),
    ("IDLE+DRAIN", OURS + " : reboot issued", reboots.BACK),
    ("DOWN", OURS + " : reboot issued : reboot timed out", reboots.TIMED_OUT),
    ("IDLE", OURS + " : reboot issued", reboots.IN_SERVICE),  # resumed by hand: nothing of ours holds it
])
def test_the_phase_of_a_node_follows_slurmctld_through_a_reboot(state, reason, phase):
    [node] = {s.name: s for s in reboots.parse_nodes(show_line("gpu-1", state, reason)).values()}.values()
    assert node.states == tuple(state.split("+")) and node.reason == reason
    assert reboots.phase_of(node) == phase


def test_nodes_are_found_by_name_and_by_address_and_nothing_else_is_a_node():
    text = "\n".join([show_line("gpu-1", "IDLE", address="10.0.0.11"),
                      show_line("gpu-2", "MIXED+DRAIN+REBOOT_REQUESTED", OURS, "10.0.0.12", next_state="IDLE"),
                      "slurm_load_node error: Unable to contact slurm controller (connect failure)"])
    nodes = reboots.parse_nodes(text)
    assert set(nodes) == {"gpu-1", "10.0.0.11", "gpu-2", "10.0.0.12"}
    assert nodes["10.0.0.12"] is nodes["gpu-2"] and nodes["gpu-2"].reason == OURS
    assert reboots.phase_of(nodes.get("gpu-3")) == reboots.UNKNOWN


def test_a_rollout_holds_only_the_nodes_its_own_reboot_reason_holds():
    def state(states: str, reason: str) -> SlurmNodeState:
        return SlurmNodeState("gpu-1", tuple(states.split("+")), reason)

    assert reboots.in_rollout(state("IDLE+DRAIN", OURS + " : reboot issued"))
    assert reboots.in_rollout(state("MIXED+DRAIN+REBOOT_REQUESTED", OURS))
    assert not reboots.in_rollout(state("IDLE+DRAIN", "provision-verify: nccl_interfaces_are_up_at_speed"))
    assert not reboots.in_rollout(state("IDLE", OURS + " : reboot issued"))
    assert not reboots.in_rollout(None)


def test_the_request_drains_then_asks_the_reboot_with_one_reason_whatever_its_words(tmp_path):
    """The script as sh runs it, with an scontrol that logs its arguments: the reason arrives as one word both
    times, and nothing in it reaches the shell."""
    log = tmp_path / "argv"
    fake = tmp_path / "scontrol"
    fake.write_text(f'#!/bin/sh\nfor a; do printf "%s|" "$a" >> {log}; done; echo >> {log}\n')
    fake.chmod(0o755)
    why = 'driver "580" is installed; $(touch pwned) `id` 570 is loaded'
    argv = reboots.request_argv("gpu-1", why)
    subprocess.run(argv, check=True, env={**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"}, cwd=tmp_path)
    reason = reboots.reason_for(why)
    assert reason.startswith(reboots.REBOOT_REASON_PREFIX + " driver")
    assert log.read_text().splitlines() == [f"update|NodeName=gpu-1|State=DRAIN|Reason={reason}|",
                                            f"reboot|reason={reason}|gpu-1|"]
    assert not (tmp_path / "pwned").exists()


def test_a_long_reason_is_cut_to_what_sinfo_shows_on_one_line():
    reason = reboots.reason_for("x" * 500 + "\n  more")
    assert len(reason) == reboots.REASON_CHARS and "\n" not in reason and reboots.is_ours(reason)


def test_resume_and_drain_again_name_the_node():
    assert reboots.resume_argv("gpu-1") == ["scontrol", "update", "NodeName=gpu-1", "State=RESUME"]
    assert reboots.drain_argv("gpu-1", OURS) == ["scontrol", "update", "NodeName=gpu-1", "State=DRAIN",
                                                 f"Reason={OURS}"]
