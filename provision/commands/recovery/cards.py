"""A card to replace: what failed on it after a reboot, kept on this machine (the control machine) as one small JSON
record per card, under provision's state directory. Written whole or not at all; a card marked again keeps its
first mark and counts how often.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

from provision.core.localfiles import write_atomically
from provision.core.runlog import state_home

SCHEMA = "provision-card/1"


def cards_dir() -> Path:
    return state_home() / "cards"


@dataclass
class Card:
    """One card marked for replacement, and its evidence."""

    serial: str  # the board's serial number; the UUID where the GPU could not be read
    host: str
    slot: str  # its PCI bus id on that host
    uuid: str = ""
    failed: list[str] = field(default_factory=list)  # "check: what verify found", the latest mark's
    first: str = ""  # when it was first marked (UTC, ISO 8601)
    last: str = ""
    times: int = 0  # how often it was marked

    def words(self) -> str:
        return (f"replace the card in slot {self.slot} of {self.host} (serial {self.serial}): "
                f"{'; '.join(self.failed)} (marked {self.times} time{'s' if self.times != 1 else ''} since "
                f"{self.first})")


def path_of(serial: str, folder: Path) -> Path:
    """The record's file: the serial made safe as a file name."""
    return folder / f"{re.sub(r'[^A-Za-z0-9._-]', '_', serial) or 'unknown'}.json"


def read(serial: str, folder: Path | None = None) -> Card | None:
    """The card's record, or None where there is none (or it cannot be read: a new mark starts it again)."""
    try:
        data = json.loads(path_of(serial, folder or cards_dir()).read_text())
        data.pop("schema", None)
        return Card(**data)
    except (OSError, ValueError, TypeError):
        return None


def mark(card: Card, when: str, folder: Path | None = None) -> Card:
    """Record the card's failure at `when`: its first mark kept, the count one more. Raises OSError where the
    record cannot be written."""
    folder = folder or cards_dir()
    before = read(card.serial, folder)
    marked = Card(card.serial, card.host, card.slot, card.uuid, list(card.failed),
                  before.first if before else when, when, (before.times if before else 0) + 1)
    folder.mkdir(parents=True, exist_ok=True)
    write_atomically(path_of(card.serial, folder),
                     (json.dumps({"schema": SCHEMA, **asdict(marked)}, indent=2) + "\n").encode())
    return marked
