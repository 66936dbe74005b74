"""A lab's directory and its state file: what was made (its slot, image, layers, nodes) and the faults injected
since; which slot a lab holds; the lock that lets one lab command at a time change labs on this machine.

state.json is written before anything is made (so a crash can be undone) and removed last by `down`.
"""

from __future__ import annotations

import fcntl
import json
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from provision_lab import netns
from provision_lab.layout import DEFAULT_DIR, LOCK
from provision_lab.model import NodeSpec
from provision_lab.netns import LabNet
from provision_lab.node import Node
from provision_lab.system import LabError


class LabDir:
    """One lab's directory (one lab per directory): its state file, where its client files are, its slot."""

    def __init__(self, lab_dir: Path | str = DEFAULT_DIR):
        self.dir = Path(lab_dir).resolve()
        self.state_file = self.dir / "state.json"

    def state(self) -> dict[str, Any] | None:
        try:
            return json.loads(self.state_file.read_text())
        except FileNotFoundError:
            return None
        except ValueError:
            return {"phase": "broken", "slot": None, "nodes": []}

    def save(self, state: dict[str, Any]) -> None:
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=2) + "\n")
        tmp.rename(self.state_file)

    def running_state(self) -> dict[str, Any]:
        state = self.state()
        if not state or state.get("phase") != "up":
            raise LabError(f"no lab is up in {self.dir}: `provision lab up{self.dir_option()}` first")
        return state

    def nodes(self, state: dict[str, Any]) -> list[Node]:
        net = LabNet(state["slot"])
        return [Node(NodeSpec(**n), net, self.dir) for n in state["nodes"]]

    def node(self, name: str) -> tuple[dict[str, Any], Node]:
        state = self.running_state()
        nodes = {n.spec.name: n for n in self.nodes(state)}
        if name not in nodes:
            raise LabError(f"no node {name!r} in this lab; nodes: {', '.join(nodes)}", 2)
        return state, nodes[name]

    def dir_option(self) -> str:
        """The --dir option a command needs to name this lab ("" for the default lab)."""
        return "" if self.dir == DEFAULT_DIR else f" --dir {self.dir}"

    @property
    def inventory_path(self) -> Path:
        return self.dir / "inventory.yaml"

    @property
    def ssh_config_path(self) -> Path:
        return self.dir / "ssh_config"

    # --- slots -----------------------------------------------------------------------------------

    def free_slot(self) -> int:
        """Slot 0 belongs to the default lab; any other lab takes the first slot nothing uses."""
        if self.dir == DEFAULT_DIR:
            return 0
        used = netns.used_slots()
        for slot in range(1, netns.MAX_SLOTS):
            if slot not in used:
                return slot
        raise LabError(f"all {netns.MAX_SLOTS - 1} lab slots are in use: `provision lab down --dir ...` one", 2)

    def slots_with_traces(self) -> set[int]:
        """Slots holding something of this lab: from the state file, the bridge alias, the default's slot 0."""
        state = self.state() or {}
        slots = {state["slot"]} if isinstance(state.get("slot"), int) else set()
        used = netns.used_slots()
        slots |= {slot for slot, owner in used.items() if owner == str(self.dir)}
        if self.dir == DEFAULT_DIR and 0 in used:
            slots.add(0)
        return slots


@contextmanager
def machine_lock():
    """One lab command at a time changes labs on this machine (LOCK)."""
    LOCK.parent.mkdir(parents=True, exist_ok=True)
    with open(LOCK, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield
