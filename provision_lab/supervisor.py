"""A node's supervisor: its power supply, a process of this machine in the node's network namespace.

Node.start runs it (node.SUPERVISOR: a fresh interpreter that imports this very checkout). It boots the node,
and boots it again each time the node rebooted itself, then does what `provision lab reboot` does after a boot
(Lab.booted_again): it drives the lab, above the node, which is why it is a module of its own.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

from provision_lab import netns
from provision_lab.cluster import Lab
from provision_lab.model import NodeSpec
from provision_lab.node import Node

def supervise(lab_dir: str, slot: str, spec: str) -> None:
    """A node's power supply (Node.start runs it in the node's network namespace, with this machine's PID and
    mount namespaces, where the cgroup files are): boots the node, and boots it again each time it rebooted
    itself (reboot(2) in its PID namespace: its PID 1 ends as if by SIGHUP), then does what `provision lab
    reboot` does after a boot (Lab.booted_again). Anything else ends the node for good, and this with it: a power
    cut (SIGKILL to every process of the network namespace, this one too), a halt or power-off (SIGINT), a
    failed boot."""
    node = Node(NodeSpec(**json.loads(spec)), netns.LabNet(int(slot)), Path(lab_dir))
    rebooted = False
    while True:
        boot = node.boot()
        if rebooted:
            booted_again(node)
        if boot.wait() != -signal.SIGHUP:
            return
        print(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {node.spec.name} rebooted itself: booting it again", flush=True)
        rebooted = True


def booted_again(node: Node) -> None:
    """After the node rebooted itself, what `provision lab reboot` does once a node is up (Lab.booted_again).
    Whatever goes wrong is only logged: the supervisor must live on, for the node's next reboot."""
    try:
        Lab(node.dir.parents[1]).booted_again(node.spec.name)
    except Exception as exc:  # noqa: BLE001 (the node stays up; the console says what was not done)
        print(f"{node.spec.name}: after its reboot: {type(exc).__name__}: {exc}", flush=True)
