"""Which GPUs a host has, against the last good run's record of them.

nvidia-smi numbers GPUs by enumeration: when one falls off the bus for good
(or is pulled), the next boot numbers the rest again, and "GPU3" is another
card. So the tasks bind every per-GPU decision to a GPU's UUID, and each
host keeps the GPU list of its last good run in

    /var/lib/provision/gpu-layout       (PROVISION_GPU_LAYOUT moves it)

one line per GPU: index, UUID, PCI bus id, name. compare() says how the
GPUs seen now differ from it: missing (lost: nvidia-smi names it but cannot
read it; gone: not listed at all), new (a replacement, an added card) or
renumbered. Until the user accepts a changed layout, an `index:` override
keeps meaning the GPU that had that index in the record (capabilities/gpu/tasks.py).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from provision.core import pci
from provision.capabilities.capability import RunFlag
from provision.capabilities.gpu.model import GpuFacts, LostGpu, NvidiaFacts, RecordedGpu

HEADER = "# provision: this host's GPUs at the last good run (index, UUID, PCI bus id, name); see `provision apply --help`"
# The GPUs differ from the record and that is intended: the layout task records the new one, and `index:` overrides
# follow the new numbering.
ACCEPT_GPU_CHANGES = RunFlag(
    "accept_gpu_changes", "--accept-gpu-changes",
    "The GPUs differ from the last good run (a card replaced, removed or added) and that is intended: record the new "
    "layout; `index:` overrides then follow the new numbering.")
LINE = re.compile(r"^(\d+) (GPU-[0-9a-fA-F-]+) ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]) (.*)$")


def record_path() -> str:
    return os.environ.get("PROVISION_GPU_LAYOUT", "/var/lib/provision/gpu-layout")


def parse_record(text: str) -> list[RecordedGpu]:
    """The record's GPUs; a line that is not one (a comment, an edit gone wrong) is skipped."""
    gpus = []
    for line in text.splitlines():
        match = LINE.match(line.strip())
        if match:
            gpus.append(RecordedGpu(int(match[1]), match[2], match[3], match[4]))
    return gpus


def record_text(gpus: list[GpuFacts]) -> str:
    """The record for these GPUs (no trailing newline: remote.write_record_argv adds it)."""
    def printable(name: str) -> str:
        return "".join(c if c.isprintable() else "?" for c in name)

    return "\n".join([HEADER, *(f"{g.index} {g.uuid} {g.bus_id} {printable(g.name)}" for g in gpus)])


def words(gpu: RecordedGpu) -> str:
    return f"GPU{gpu.index} {gpu.uuid} at {gpu.bus_id} ({gpu.name})"


@dataclass
class Missing:
    gpu: RecordedGpu
    lost: LostGpu | None  # nvidia-smi still names it (no handle); None: not listed at all

    @property
    def state(self) -> str:
        return "lost" if self.lost is not None else "gone"

    @property
    def detail(self) -> str:
        """Why it is missing and what it needs, without naming the GPU (say words(self.gpu) first)."""
        if self.lost is not None:
            return f"nvidia-smi says {self.lost.message!r}; it needs a reset or a reboot"
        return ("nvidia-smi no longer lists it (fallen off the bus? see dmesg for Xid 79, reseat the card or check "
                "its riser and power)")

    def __str__(self) -> str:
        return f"{words(self.gpu)} is {self.state}: {self.detail}"


@dataclass
class LayoutChange:
    """How the GPUs seen now differ from the record."""

    missing: list[Missing] = field(default_factory=list)
    new: list[GpuFacts] = field(default_factory=list)  # UUIDs the record does not have
    renumbered: list[tuple[RecordedGpu, GpuFacts]] = field(default_factory=list)  # same UUID, other index or bus

    def __bool__(self) -> bool:
        return bool(self.missing or self.new or self.renumbered)

    def only_missing(self) -> bool:
        """Whether every difference follows from the missing GPUs: none new, and each renumbered one moved down
        by the missing ones enumerated before it, on the same bus (the driver numbers the rest again)."""
        gaps = [m.gpu.index for m in self.missing]
        return not self.new and all(
            pci.address(was.bus_id) == pci.address(now.bus_id) and now.index == was.index - sum(g < was.index for g in gaps)
            for was, now in self.renumbered)

    def lines(self, lost: bool = True) -> list[str]:
        """Each difference in words; lost=False leaves out the GPUs nvidia-smi still names but cannot read."""
        return [*(str(m) for m in self.missing if lost or m.lost is None),
                *(f"new GPU{g.index} {g.uuid} at {g.bus_id} ({g.name}): not in the last good run's record"
                  for g in self.new),
                *(f"{was.uuid} was GPU{was.index} at {was.bus_id}, is now GPU{now.index} at {now.bus_id}"
                  for was, now in self.renumbered)]

    def summary(self) -> str:
        """In one clause, for the messages of the tasks that hold an override back."""
        parts = [f"GPU{m.gpu.index} {m.gpu.uuid} at {m.gpu.bus_id} {'lost' if m.lost else 'gone'}"
                 for m in self.missing]
        parts += [f"new GPU{g.index} {g.uuid}" for g in self.new]
        parts += [f"{was.uuid} GPU{was.index} -> GPU{now.index}" for was, now in self.renumbered]
        return ", ".join(parts)


def compare(recorded: list[RecordedGpu] | None, nvidia: NvidiaFacts) -> LayoutChange | None:
    """None without a record (nothing to compare with); else the change, empty when the layout is as recorded."""
    if recorded is None:
        return None
    change = LayoutChange()
    seen = {g.uuid.lower(): g for g in nvidia.gpus}
    for was in recorded:
        now = seen.get(was.uuid.lower())
        if now is None:
            lost = next((lost for lost in nvidia.lost if (lost.uuid or "").lower() == was.uuid.lower()
                         or pci.address(lost.bus_id) == pci.address(was.bus_id)), None)
            change.missing.append(Missing(was, lost))
        elif now.index != was.index or pci.address(now.bus_id) != pci.address(was.bus_id):
            change.renumbered.append((was, now))
    known = {was.uuid.lower() for was in recorded}
    change.new = [g for g in nvidia.gpus if g.uuid.lower() not in known]
    return change
