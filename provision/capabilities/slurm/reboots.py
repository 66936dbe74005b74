"""Reboots that Slurm schedules: the scontrol commands that hand a node's reboot to slurmctld, and where a node
stands in one, read from `scontrol -o show node`. Pure: no I/O (commands/slurm_reboot.py runs them).

A node is drained with provision's reason, then `scontrol reboot reason=...` is asked, without ASAP or nextstate
(scontrol(1) of 22.05: "explicitly drain the nodes beforehand" is its other way to keep jobs off). slurmctld
reboots it through RebootProgram once its jobs have ended (_queue_reboot_msg: base state IDLE, drained or
not). Either option would return the node to service unverified, in Slurm 22.05's node_mgr.c:
validate_node_specs clears DRAIN at the first registration after the boot whenever a next state was given
(ASAP gives RESUME), and nextstate=DOWN leaves a DOWN node that our ReturnToService=2 returns at its next
registration (slurmd restarted, slurmctld reconfigured). Drained without a next state it comes back
IDLE+DRAIN, its reason ending " : reboot issued", and stays out of service until provision resumes it.
"""

from __future__ import annotations

import re

from provision.capabilities.slurm.facts import DRAIN_REASON_PREFIX, SlurmNodeState, parse_slurm_node

REBOOT_REASON_PREFIX = "provision-reboot:"  # a reboot provision handed to Slurm: only provision resumes the node
REASON_CHARS = 200  # as verify's drains (commands/drain.py): sinfo -R shows it on one line

# slurmctld's words appended to the reason (set_node_reboot_reason, node_mgr.c)
ISSUED_WORDS, TIMED_OUT_WORDS = "reboot issued", "reboot timed out"

# Where a node stands, as Slurm says it.
IN_SERVICE = "in service"  # no reboot of provision's; up and taking jobs
NOT_OURS = "out of service, not by provision"  # someone else's drain or down: never asked, never resumed
DRAINED = "drained by provision"  # ours, no reboot asked (or the ask was lost): ask (again)
REQUESTED = "reboot requested"  # REBOOT_REQUESTED: slurmctld waits for its jobs to end
ISSUED = "rebooting"  # REBOOT_ISSUED: RebootProgram was sent, the node has not registered since
BACK = "back, drained"  # rebooted and registered, still drained: waits for provision's verify
TIMED_OUT = "reboot timed out"  # not registered within ResumeTimeout: slurmctld set it DOWN
UNKNOWN = "not in Slurm"  # slurmctld lists no such node

SHOW_NODES = ["scontrol", "-o", "show", "node"]  # every node, one line each

# $1 the NodeName, $2 the reason: positional, so that no word of the reason reaches a shell unquoted.
REQUEST_SCRIPT = 'scontrol update NodeName="$1" State=DRAIN Reason="$2" && scontrol reboot reason="$2" "$1"'


def is_ours(reason: str) -> bool:
    """A reason provision set (a reboot it handed to Slurm, a drain verify set): the only ones it may undo."""
    return reason.startswith((REBOOT_REASON_PREFIX, DRAIN_REASON_PREFIX))


def reason_for(why: str) -> str:
    return " ".join(f"{REBOOT_REASON_PREFIX} {why}".split())[:REASON_CHARS]


def request_argv(node: str, why: str) -> list[str]:
    """Drain NODE with provision's reason and ask slurmctld to reboot it once its jobs have ended (module doc)."""
    return ["sh", "-c", REQUEST_SCRIPT, "scontrol-reboot", node, reason_for(why)]


def resume_argv(node: str) -> list[str]:
    return ["scontrol", "update", f"NodeName={node}", "State=RESUME"]


def drain_argv(node: str, reason: str) -> list[str]:
    """Drain again with the same reason: a node whose reboot timed out is DOWN, which ReturnToService=2 would
    return to service at its late registration."""
    return ["scontrol", "update", f"NodeName={node}", "State=DRAIN", f"Reason={reason}"]


def parse_nodes(text: str) -> dict[str, SlurmNodeState]:
    """`scontrol -o show node`: each node's state, under its NodeName and its NodeAddr (an inventory host is
    found by its address, as --via slurm finds it, or its name)."""
    nodes: dict[str, SlurmNodeState] = {}
    for line in text.splitlines():
        state = parse_slurm_node(line) if line.startswith("NodeName=") else None
        if state is None or state.error:
            continue
        nodes[state.name] = state
        address = re.search(r"(?:^| )NodeAddr=(\S+)", line)
        if address:
            nodes.setdefault(address.group(1), state)
    return nodes


def in_rollout(state: SlurmNodeState | None) -> bool:
    """A node a reboot provision handed to Slurm still holds out of service (or will): a later run picks it up."""
    return bool(state and state.reason.startswith(REBOOT_REASON_PREFIX)
                and phase_of(state) in (DRAINED, REQUESTED, ISSUED, BACK, TIMED_OUT))


def phase_of(state: SlurmNodeState | None) -> str:
    """Where the node stands in a reboot provision handed to Slurm (the constants above)."""
    if state is None or not state.name:
        return UNKNOWN
    flags = set(state.states)
    if not is_ours(state.reason):  # someone else's drain, down or pending reboot
        return NOT_OURS if state.out_of_service or {"REBOOT_REQUESTED", "REBOOT_ISSUED"} & flags else IN_SERVICE
    if "REBOOT_ISSUED" in flags:
        return ISSUED
    if "REBOOT_REQUESTED" in flags:
        return REQUESTED
    if TIMED_OUT_WORDS in state.reason:
        return TIMED_OUT
    if not state.out_of_service:
        return IN_SERVICE  # resumed by hand with the reason left: nothing of ours holds it
    return BACK if ISSUED_WORDS in state.reason else DRAINED
