"""What a run is given: its options (RunOptions), what the capabilities add to it (Extensions), and the events a
progress display follows (Event)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from provision.core.apply import Step
from provision.core.facts import FactRegistry
from provision.core.plan import CHANGED, FAILED
from provision.core.results import NOT_STARTED, UNREACHABLE

if TYPE_CHECKING:  # the types a run is given (the capabilities' facts, the inventory's hosts): never imported
    from provision.capabilities.host import HostFacts
    from provision.inventory.model import Host


@dataclass(frozen=True)
class Event:
    """Where a run is, for a progress display (output/progress.py)."""

    phase: str  # "read", then the host's word after its changes (ok, changed, would change, failed, unreachable,
    # not started); "applied" with a task: the task the host started
    done: int
    total: int
    host: str
    task: str = ""  # the task this host started (apply phase); "" when the host finished the phase


def progress_word(label: str, status: str, check: bool) -> str:
    """What a host's progress line says once it is done with a phase: reading says "read" (or why it could not
    be read); after phase 2 the host's own word: ok, changed ("would change" under --check), failed, ..."""
    if label == "read" and status not in (UNREACHABLE, NOT_STARTED, FAILED):
        return label
    return "would change" if status == CHANGED and check else status


@dataclass(frozen=True)
class Extensions:
    """What the capabilities add to a run (capabilities/registry.py gives them): the facts batch's sections,
    steps that go with a host's first changes, and the reasons a host waits for a reboot."""

    facts: FactRegistry
    # Steps (core/apply.py Step) a run that may change the host runs with its first changes, given its facts: a
    # cache of what every later read would ask nvidia-smi again. Best effort: a failure is a notice.
    upkeep: Callable[[HostFacts], list[Step]] = lambda facts: []
    reboot_pending: Callable[[Host, HostFacts], list[str]] = lambda host, facts: []


@dataclass
class RunOptions:
    check: bool = False
    forks: int = 16
    lock_wait: float = 60.0  # seconds to wait for another run's lock on a host
    sudo_password: str | None = field(default=None, repr=False)
    command: str = "apply"
    progress: Callable[[Event], None] = lambda event: None  # where the run is (provision/output/progress.py)
    notice: Callable[[str], None] = lambda message: None  # said even on a pipe or with --json (on stderr)
    keep_backups: int = 3  # backups FILE.<time>~ kept per managed file
    # Settings made once a host's facts are read (the ad-hoc commands); None: the inventory's.
    adjust_host: Callable[[Host, HostFacts], Host] | None = None
    reading: str = "apply"  # which fact sections: apply's, or also those facts or verify read (core/facts.py)
    local: bool = False  # every host is this machine (--local): no other host's facts can be read
