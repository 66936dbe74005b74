"""The task contract: plan(facts, settings) -> Plan is pure; the engine applies Plan.changes.

Results are reported per host, per task and per target (a GPU, a file, the
host): ok, changed, failed or skipped, with before -> after.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Generic, Protocol, TypeVar

from provision.core.errors import Problem
from provision.core.facts import Reads
from provision.core.resources import templates_dir

if TYPE_CHECKING:
    from provision.core.cluster import Cluster
    from provision.capabilities.host import HostFacts
    from provision.core.facts import UnitRef
    from provision.inventory.model import Host

OK, CHANGED, FAILED, SKIPPED = "ok", "changed", "failed", "skipped"
BlockT = TypeVar("BlockT")  # a settings block's model (NcclSettings, ...): what a BlockTask plans with


@dataclass
class FileWrite:
    """A whole file, written atomically with mode and owner; the old version is kept as a backup."""

    path: str
    content: str
    mode: str = "0644"
    owner: str = "root"
    group: str = "root"
    sensitive: bool = False  # never show or log its content (keys, passwords)
    base64: bool = False  # content is the base64 text of the file's bytes (a binary key)


class Verify(Protocol):
    """A change's re-read check: given the host's fresh facts, None when the change is in place, else what is
    wrong. A protocol, not a Callable: mypy cannot infer a lambda that binds its loop's values as defaults
    (`lambda f, uuid=gpu.uuid: ...`) against a Callable, and takes it as one of these."""

    def __call__(self, facts: HostFacts, /) -> str | None: ...


@dataclass
class Change:
    """One thing to change on one target, and how."""

    target: str  # "GPU0", a path, or "host"
    what: str  # "power limit"
    before: str
    after: str
    commands: list[list[str]] = field(default_factory=list)  # privileged argv lists, run in order
    write: FileWrite | None = None
    after_write: list[list[str]] = field(default_factory=list)  # e.g. systemctl daemon-reload
    diff: str = ""  # unified diff for --diff (empty for sensitive files)
    # The re-read check: given fresh facts, is the change really in place? None when it is, else what is wrong.
    verify: Verify | None = None
    cause: str = ""  # a change that follows from another check's failure: verify files it under that one
    # What the commands' words mean for the user and what to do (a setter's "not supported"): given what they
    # printed, or their error; None when there is nothing to add.
    explain: Callable[[str], str | None] | None = None
    # Another change of the same task whose commands carry this one's too (one nvidia-smi call for every GPU):
    # this one runs nothing itself, that one's error is its error, and its own verify still judges it.
    runs_with: Change | None = None
    # What the host must run before the commands (apt-get update before an install): privileged argv lists that
    # the engine runs once per host per run, however many changes declare them, right before the first change
    # that needs them (core/apply.py). Their failure is each declaring change's error; such a change runs nothing.
    prepare: list[list[str]] = field(default_factory=list)


@dataclass
class Item:
    """The result for one target of one task."""

    target: str
    status: str
    what: str = ""
    before: str = ""
    after: str = ""
    message: str = ""
    diff: str = ""
    cause: str = ""  # a refusal that follows from another check's failure: that check reports it (verify)


@dataclass
class Plan:
    changes: list[Change] = field(default_factory=list)
    unchanged: list[Item] = field(default_factory=list)  # already right: reported as ok
    refused: list[Item] = field(default_factory=list)  # targets left alone on purpose, reported as failed
    problems: list[str] = field(default_factory=list)  # input errors found against facts (out of range, ...)
    skipped: str = ""  # the whole task does not apply here, and why
    failed: str = ""  # the host cannot be brought to the wanted state (no driver, ...)
    failed_check: str = ""  # the verify check that reports why it failed (as_intended leaves it to that one)


class Task:
    """Subclasses set name/tags and implement plan_where_set() (a BlockTask: plan_with()); plan() guards the blocks."""

    name: str = ""  # the class's, or the playbook entry's own (__init__)
    tags: frozenset[str] = frozenset()
    # What the plan reads that other tasks may change, and what this task's changes change, as fact names: a
    # HostFacts field, dotted for a part of it ("nvidia.power_limit"), "*" for anything. Tasks in a row where none
    # plans from what another changes are planned on one read, applied in ONE command, and the host is read again
    # once after it (core/run.py). The files a task reads (reads().paths) and writes count without being named.
    # Undeclared: "*" both ways, so the host is read again before and after the task (nothing joins a batch after
    # a task that alters "*").
    plans_from: ClassVar[frozenset[str]] = frozenset({"*"})
    alters: frozenset[str] = frozenset({"*"})  # a wrapper task takes its wrapped task's (gpu/adhoc.py)
    settings_blocks: frozenset[str] = frozenset()  # the inventory blocks it applies (besides `when:`)
    templates: Path | None = None  # the templates folder (--templates, else shipped): set by load_playbook
    cluster: "Cluster | None" = None  # the whole inventory and the facts read: set by the engine before planning
    # Its plan reads other hosts' facts as this run leaves them: every host of the run applies the tasks before it
    # first, and cluster.facts is brought up to date then (core/stages.py).
    waits_for_peers: ClassVar[bool] = False

    def __init__(self, params: dict[str, Any] | None = None, name: str | None = None, tags: list[str] | None = None):
        self.params = params or {}
        if name:
            self.name = name
        if tags is not None:
            self.tags = frozenset(tags) | {self.name}
        else:
            self.tags = frozenset(type(self).tags) | {self.name}

    def planned_from(self) -> frozenset[str]:
        """plans_from, for this task as configured (a template that reads facts plans from them all)."""
        return self.plans_from

    def blocks(self) -> frozenset[str]:
        """The inventory blocks this task applies: its class's, and the one its `when:` names."""
        when = self.params.get("when")
        return self.settings_blocks | ({when} if isinstance(when, str) and when else set())

    def unset_block(self, host: "Host") -> str | None:
        """The first of the blocks this task applies that host does not set; None when it sets them all."""
        return next((name for name in sorted(self.blocks()) if getattr(host.settings, name, None) is None), None)

    def applies(self, host: "Host") -> bool:
        """Whether host sets every block this task applies (else plan() skips it, and it needs nothing read)."""
        return self.unset_block(host) is None

    def file_paths(self, host: "Host") -> list[str]:
        """Files whose current state the plan needs (gathered in the one facts batch)."""
        return []

    def peer_hosts(self, host: "Host", everyone: list["Host"]) -> list["Host"]:
        """Other hosts whose facts this task's plan for host needs (read even when --limit leaves them out)."""
        return []

    def unit_names(self, host: "Host") -> list["UnitRef"]:
        """systemd units whose enabled state the plan needs (also gathered in the one batch)."""
        return []

    def package_names(self, host: "Host") -> list[str]:
        """Debian packages whose installed version the plan needs (also gathered in the one batch)."""
        return []

    def fact_sections(self, host: "Host") -> list[str]:
        """The on-request sections of the batch the plan needs (FactSection.on_request: apply reads them only
        for a task that asks)."""
        return []

    def reads(self, host: "Host") -> Reads:
        """All the plan needs read beyond the fact sections: its files, units, packages and on-request sections,
        in one batch."""
        return Reads(tuple(self.file_paths(host)), tuple(self.unit_names(host)), tuple(self.package_names(host)),
                     tuple(self.fact_sections(host)))

    def template_folder(self) -> Path:
        """Where its templates are read: the run's folder (load_playbook sets it), else the shipped one."""
        return self.templates or templates_dir()

    def template_names(self) -> list[tuple[str, str]]:
        """(playbook key, template file name) of each template it renders: checked to exist at load."""
        return []

    def plan(self, host: "Host", facts: "HostFacts") -> Plan:
        """The task's plan for host: skipped, with not_set()'s reason, where a block it applies is not set there;
        else plan_where_set()'s. The one guard of every task's blocks: a subclass implements the hook."""
        unset = self.unset_block(host)
        return Plan(skipped=self.not_set(unset)) if unset is not None else self.plan_where_set(host, facts)

    def not_set(self, block: str) -> str:
        """Why the task is skipped on a host that does not set `block` (the reason the report shows)."""
        return f"{block} not set"

    def plan_where_set(self, host: "Host", facts: "HostFacts") -> Plan:
        """The plan for a host that sets every block this task applies."""
        raise NotImplementedError

    def check_params(self, file: str) -> list[Problem]:
        """Static validation of the playbook entry; run before any host is touched. A task that takes
        parameters overrides it; the others take none."""
        return [Problem(file, f"task {self.name}", key, "unknown parameter", f"{self.name} takes none")
                for key in sorted(self.params)]


class BlockTask(Task, Generic[BlockT]):
    """A task of one settings block, the one its settings_blocks names: plan_with() gets the host's block, typed
    BlockT, and runs only where the host sets it. tests/unit/core/test_plan_guard.py holds each subclass's BlockT to
    that block's field in HostSettings."""

    def plan_where_set(self, host: "Host", facts: "HostFacts") -> Plan:
        (name,) = self.settings_blocks
        block: BlockT = getattr(host.settings, name)  # set: plan() skipped the host otherwise
        return self.plan_with(host, facts, block)

    def plan_with(self, host: "Host", facts: "HostFacts", block: BlockT) -> Plan:
        """The plan for a host that sets this task's block."""
        raise NotImplementedError
