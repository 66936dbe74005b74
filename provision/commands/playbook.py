"""Playbooks: an ordered list of tasks, in YAML.

    tasks:
      - task: gpu-persistence
      - task: template
        name: gpu-tuning-conf
        tags: [gpu]
        src: gpu-tuning.conf.j2
        dest: /etc/provision/gpu-tuning.conf
        when: gpu
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from provision.core.errors import InputError, Problem
from provision.core.localfiles import read_text
from provision.inventory.formats import yaml as yaml_format
from provision.capabilities.host import BLOCKS
from provision.core.settings import did_you_mean, variable
from provision.capabilities.registry import RUN_FLAGS, TASK_TYPES
from provision.capabilities.system.files import template_problems
from provision.core.plan import Task
from provision.core.resources import playbook_path, shipped, templates_dir

if TYPE_CHECKING:  # types only
    from provision.inventory.model import Host


def shipped_playbooks() -> list[str]:
    return sorted(path.stem for path in shipped("playbooks").glob("*.yaml"))


def playbook_file(name_or_path: str | None) -> Path:
    """--playbook: a playbook file, or a shipped one by name. One that is neither is bad input naming the shipped
    ones (the file path the name would have had inside the package helps nobody). A path that is there but no
    regular file (a FIFO, a directory) is load_playbook's to name by its kind."""
    path = playbook_path(name_or_path)
    if path.exists():
        return path
    names = shipped_playbooks()
    given = str(name_or_path)
    what = f"no file {given!r}" if Path(given).suffix in (".yaml", ".yml") or "/" in given else \
        f"{given!r} is neither a file nor a shipped playbook"
    hint = f"shipped playbooks: {', '.join(names)}; or a playbook file's path"
    raise InputError([Problem("command line", "", "--playbook", what, f"{did_you_mean(given, names)} {hint}".strip())])


def load_playbook(path: Path, templates: Path) -> list[Task]:
    file = str(path)
    data = yaml_format.parse(read_text(path, "playbook"), file)  # read and parsed as bounded as an inventory
    entries = data.get("tasks") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise InputError([Problem(file, "", "tasks", "a playbook is a mapping with a 'tasks' list")])
    tasks, problems = [], []
    for number, entry in enumerate(entries, 1):
        where = f"task #{number}"
        if not isinstance(entry, dict) or "task" not in entry:
            problems.append(Problem(file, where, "task", "each entry needs 'task: <type>'",
                                    f"types: {', '.join(TASK_TYPES)}"))
            continue
        params = dict(entry)
        kind = params.pop("task")
        cls = TASK_TYPES.get(kind)
        if cls is None:
            problems.append(Problem(file, where, "task", f"unknown task type {kind!r}",
                                    f"types: {', '.join(TASK_TYPES)}"))
            continue
        tags = params.pop("tags", None)
        task = cls(params, name=params.pop("name", None), tags=tags)
        task.templates = templates
        for key, name in task.template_names():  # found, inside the folder, readable, parsed, no internals
            problems += [Problem(file, where, key, message, hint)
                         for message, hint in template_problems(templates, name)]
        problems += task.check_params(file)
        tasks.append(task)
    names = [t.name for t in tasks]
    for name in {n for n in names if names.count(n) > 1}:
        problems.append(Problem(file, "", "name", f"task name {name!r} is used twice", "give each task a unique name"))
    if problems:
        raise InputError(problems)
    return tasks


def select_tasks(tasks: list[Task], tags: set[str], skip_tags: set[str], playbook: str = "") -> list[Task]:
    """The tasks --tags picks and --skip-tags leaves. A tag no task has is an error, as a --limit that matches
    no host is: a typo would otherwise run nothing, or skip nothing, and exit 0."""
    # This playbook's tags, and every tag a task type has (skipping "files" where no task writes one is fine).
    known = sorted(set().union(*(t.tags for t in tasks), *(cls.tags | {cls.name} for cls in TASK_TYPES.values())))
    problems = [Problem(playbook, "", option, f"no task has the tag {tag!r}",
                        did_you_mean(tag, known) or f"known tags: {', '.join(known)}")
                for option, given in (("--tags", tags), ("--skip-tags", skip_tags)) for tag in sorted(given)
                if tag not in known]
    if problems:
        raise InputError(problems)
    return [t for t in tasks if (not tags or t.tags & tags) and not (t.tags & skip_tags)]


def tag_set(text: str) -> set[str]:
    """--tags and --skip-tags as given: comma-separated."""
    return {t.strip() for t in text.split(",") if t.strip()}


def selected_tasks(playbook: str | None, templates: str | None, tags: str = "",
                   skip_tags: str = "") -> tuple[Path, list[Task], list[Task]]:
    """The playbook's file, every task it holds, and those --tags and --skip-tags select."""
    book = playbook_file(playbook)
    loaded = load_playbook(book, templates_dir(templates))
    return book, loaded, select_tasks(loaded, tag_set(tags), tag_set(skip_tags), str(book))


def with_flag_tasks(tasks: list[Task], flags: frozenset[str]) -> list[Task]:
    """The tasks, and those the run's flags add (RunFlag.adds_task), each once: a run without the flag never
    reports them."""
    for flag in RUN_FLAGS:
        added = TASK_TYPES.get(flag.adds_task) if flag.name in flags else None
        if added is not None and not any(isinstance(task, added) for task in tasks):
            tasks = [*tasks, added()]
    return tasks


NOT_APPLIED = ("custom", "active", "verify")  # no task applies them, by design: custom is free-form, the others verify's


def unapplied_blocks(tasks: list[Task], hosts: list[Host], playbook: str) -> list[str]:
    """One warning per typed inventory block that some selected host sets and no task of the playbook applies
    (before --tags): accepted and validated, yet nothing on the hosts would change for it."""
    used = set().union(*(task.blocks() for task in tasks))
    anywhere = set().union(*(cls.settings_blocks for cls in TASK_TYPES.values()))
    warnings = []
    for block in (b for b in BLOCKS if b not in NOT_APPLIED and b not in used):
        setting = [host.name for host in hosts if getattr(host.settings, block) is not None]
        if setting:
            named = ", ".join(setting[:3]) + (f" and {len(setting) - 3} more" if len(setting) > 3 else "")
            why = (f"no task of {playbook} applies it" if block in anywhere
                   else f"this version of provision has no {block} tasks yet")
            warnings.append(f"warning: the inventory's `{variable(block)}` ({named}) is checked but not applied: {why}")
    return warnings
