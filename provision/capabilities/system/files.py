"""A file rendered from a jinja2 template and written atomically, with mode, owner and a backup.

Templates may come from the user (--templates DIR), so they are confined: each is read only from inside its
directory's real path (a symlink out of it is refused), only as a regular file of at most MAX_TEMPLATE_BYTES
(through the one bounded reader, core/localfiles.py), and rendered in provision's one sandbox (core/sandbox.py:
no Python internals, no changes to shared values, what each operator, filter, call and block makes bounded, loops
counted), in at most MAX_FILE_STEPS steps, to a file of at most MAX_RENDERED characters."""

from __future__ import annotations

import difflib
import functools
import os
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jinja2
import jinja2.meta
from jinja2 import nodes
from jinja2.loaders import split_template_path

from provision.core.errors import InputError, Problem
from provision.core.localfiles import read_text
from provision.core.plan import Change, FileWrite, Item, OK, Plan, Task
from provision.core.sandbox import BoundedSandbox, Refused, budget

if TYPE_CHECKING:  # types only
    from provision.capabilities.host import HostFacts
    from provision.core.facts import FileFacts
    from provision.inventory.model import Host

MAX_TEMPLATE_BYTES = 1 << 20  # a template's own size (the shipped ones are under 6 KiB)
MAX_RENDERED = 16 << 20  # characters one file may render to (each value on the way: the sandbox's MAX_CHARS)
# Steps (core/sandbox.py) one file's render may take: the shipped gres.conf.j2 takes 3,920,000 for 20,000 nodes of 8
# GPUs (a loop's turn a step for each operation of its body: 20 a GPU), slurm.conf.j2 460,000 for 20,000 nodes.
# 5,000,000 steps of the costliest kind found (sandboxed attribute reads) are about 7 s on 2 busy cores; of empty
# loops, 2 s.
MAX_FILE_STEPS = 5_000_000
FILE_SPENT = f"takes more than {MAX_FILE_STEPS:,} steps to render (provision's limit)"
BOUNDED_HINT = "provision bounds what a template makes and how long it takes: is a loop running away?"
UNSAFE_HINT = ("templates run in jinja2's sandbox: they read host, settings and facts, never a Python internal, "
               "a name starting with __")


class TemplateRefused(jinja2.exceptions.SecurityError):
    """A template provision will not read or render: outside its directory, not a regular file, too large, or
    doing what the sandbox forbids. A TemplateError, so every caller that reports a template's error reports it."""

    def __init__(self, message: str, hint: str = ""):
        super().__init__(message)
        self.hint = hint


def template_file(directory: str, name: str) -> str:
    """The real path of template `name` in `directory`, refused (TemplateRefused) where it resolves outside the
    directory's real path (a symlink to /etc/shadow); TemplateNotFound where absent."""
    pieces = split_template_path(name)  # refuses ".." (TemplateNotFound), as jinja's own loader does
    root = os.path.realpath(directory)
    real = os.path.realpath(os.path.join(directory, *pieces))
    if os.path.commonpath([root, real]) != root:
        raise TemplateRefused(f"template {name!r} resolves to {real}, outside the templates directory {root}",
                              "a template must be a file inside --templates DIR; copy it in instead of linking out")
    try:
        os.stat(real)  # its kind: read_template's reader judges it
    except FileNotFoundError:
        raise jinja2.TemplateNotFound(name, f"template {name!r} not found in {directory}") from None
    except OSError as exc:  # a link loop, a folder we may not enter
        raise TemplateRefused(f"template {name!r} ({real}) cannot be read: {exc.strerror}") from None
    return real


def read_template(directory: str, name: str) -> tuple[str, str]:
    """(text, real path) of a template checked by template_file, read by the one bounded reader (core/localfiles.py:
    judged by its kind before it is opened and again once open, opened without blocking, at most
    MAX_TEMPLATE_BYTES, UTF-8), without following a link swapped in since the check."""
    real = template_file(directory, name)
    try:
        return read_text(real, "template", MAX_TEMPLATE_BYTES, follow=False), real
    except InputError as exc:
        problem = exc.problems[0]
        raise TemplateRefused(f"template {name!r} ({real}): {problem.message}", problem.hint) from None


class ConfinedLoader(jinja2.FileSystemLoader):
    """jinja's file loader, for every template a render loads (one included by a computed name too), through
    read_template: never a file outside the directory, a special file or an oversized one."""

    def get_source(self, environment: jinja2.Environment, template: str) -> tuple[str, str, Callable[[], bool]]:
        text, real = read_template(self.searchpath[0], template)
        mtime = os.path.getmtime(real)

        def uptodate() -> bool:
            try:
                return os.path.getmtime(real) == mtime
            except OSError:
                return False

        return text, real, uptodate


def _shquote(value: object) -> str:
    """A value in a shell script: one word."""
    return shlex.quote(str(value))


class TemplateSandbox(BoundedSandbox):
    """The one sandbox (core/sandbox.py), plain text, with the shquote filter (guarded as Jinja's are)."""

    own_filters = {"shquote": _shquote}


# What a template's own code may raise on bad values ({{ 1/0 }}, a huge float): its error, not provision's.
RENDER_ERRORS = (ArithmeticError, TypeError, ValueError, LookupError, RecursionError, MemoryError)


def render(templates: Path, src: str, context: dict[str, Any]) -> str:
    """The template rendered; any failure of the template's is a jinja2.TemplateError, a bound passed included:
    output over MAX_RENDERED (checked as it is produced, so a template that loops writing never fills the control
    machine), more than MAX_FILE_STEPS steps, or what the sandbox refuses (a TemplateRefused saying which)."""
    parts, size = [], 0
    try:
        with budget(MAX_FILE_STEPS, FILE_SPENT):
            for part in _environment(str(templates)).get_template(src).generate(**context):
                size += len(part)
                if size > MAX_RENDERED:
                    raise TemplateRefused(f"renders over {MAX_RENDERED >> 20} MiB", "is a loop running away?")
                parts.append(part)
    except Refused as exc:
        raise TemplateRefused(str(exc), BOUNDED_HINT) from None
    except jinja2.TemplateError:
        raise
    except RENDER_ERRORS as exc:  # TemplateNotFound is a LookupError too: kept as itself, above
        raise TemplateRefused(f"{type(exc).__name__}: {exc}") from exc
    return "".join(parts)


def template_error(src: str, exc: jinja2.TemplateError) -> str:
    """A template's failure as a plan problem: the template named, the sandbox's refusal said as one."""
    hint = exc.hint if isinstance(exc, TemplateRefused) else ""
    if isinstance(exc, jinja2.exceptions.SecurityError) and not isinstance(exc, TemplateRefused):
        hint = UNSAFE_HINT
    return f"template {src}: {exc}" + (f" (hint: {hint})" if hint else "")


@functools.lru_cache(maxsize=16)
def _environment(templates: str) -> jinja2.Environment:
    """One environment per templates directory, so each template is compiled once per run, not once per host
    and task (jinja caches compiled templates per environment, and checks the file's mtime before reusing one)."""
    return TemplateSandbox(
        loader=ConfinedLoader(templates),
        undefined=jinja2.StrictUndefined,  # a missing variable is an error, not an empty string
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def template_problems(templates: Path, name: str) -> list[tuple[str, str]]:
    """(message, hint) for each reason the template, or one it includes, imports or extends by a constant name,
    cannot be used: checked when the playbook loads, before any host is contacted. A name computed at render
    time meets the same checks then, in ConfinedLoader."""
    env = _environment(str(templates))
    problems: list[tuple[str, str]] = []
    seen: set[str] = set()
    pending = [name]
    while pending:
        current = pending.pop()
        if current in seen:
            continue
        seen.add(current)
        via = "" if current == name else f" (used by {name})"
        try:
            text, _ = read_template(str(templates), current)
            tree = env.parse(text, current)
        except jinja2.TemplateNotFound:
            problems.append((f"template {current!r} not found in {templates}{via}",
                             "use --templates DIR to point at your own"))
            continue
        except TemplateRefused as exc:
            problems.append((f"{exc}{via}", exc.hint))
            continue
        except jinja2.TemplateSyntaxError as exc:
            problems.append((f"template {current!r} line {exc.lineno}: {exc.message}{via}", ""))
            continue
        problems += [(f"template {current!r} line {line}: uses {attr!r}{via}", UNSAFE_HINT)
                     for line, attr in _internals(tree)]
        pending += [n for n in jinja2.meta.find_referenced_templates(tree) if isinstance(n, str)]
    return problems


def _internals(tree: nodes.Template) -> list[tuple[int, str]]:
    """(line, name) of each Python internal the template reaches by a constant name (x.__init__, x['__class__'],
    x|attr('__globals__')): the sandbox refuses them at render time; found here, the run stops before any host."""
    found = []
    for node in tree.find_all((nodes.Getattr, nodes.Getitem, nodes.Filter)):
        if isinstance(node, nodes.Getattr):
            names = [node.attr]
        elif isinstance(node, nodes.Getitem):
            names = [node.arg.value] if isinstance(node.arg, nodes.Const) else []
        elif isinstance(node, nodes.Filter) and node.name == "attr":
            names = [a.value for a in node.args if isinstance(a, nodes.Const)]
        else:
            names = []
        found += [(node.lineno, n) for n in names if isinstance(n, str) and n.startswith("__")]
    return found


@functools.lru_cache(maxsize=64)
def reads_facts(templates: Path, src: str) -> bool:
    """Whether the template may read `facts` (jinja2's own analysis): one that includes, imports or extends
    another may reach them through it, so it counts as reading them (as does one that cannot be read: its
    render then reports why)."""
    env = _environment(str(templates))
    try:
        tree = env.parse(read_template(str(templates), src)[0])
    except jinja2.TemplateError:
        return True
    return "facts" in jinja2.meta.find_undeclared_variables(tree) or any(jinja2.meta.find_referenced_templates(tree))


def unified_diff(path: str, old: str, new: str) -> str:
    return "".join(difflib.unified_diff(
        old.splitlines(keepends=True), new.splitlines(keepends=True),
        fromfile=f"{path} (now)", tofile=f"{path} (wanted)",
    ))


def plan_file(want: FileWrite, current: FileFacts | None) -> tuple[Change | None, Item | None]:
    """Compare a wanted file with FileFacts; return the change, or the ok item. Its before and after say what
    differs in words that read as apply's "before -> after" and as verify's found and expected."""
    have = current.text if current else None
    if not (current and current.exists):
        before, after = ["absent"], ["written"]
    else:
        before, after = [], []
        if have != want.content:
            before.append(f"content differs ({_changed_lines(have or '', want.content)})")
            after.append("content as the inventory renders it")
        if int(current.mode or "0", 8) != int(want.mode, 8):
            before.append(f"mode {current.mode}")
            after.append(f"mode {want.mode.lstrip('0') or '0'}")
        if (current.owner, current.group) != (want.owner, want.group):
            before.append(f"owner {current.owner}:{current.group}")
            after.append(f"owner {want.owner}:{want.group}")
    if not before:
        return None, Item(want.path, OK, "file", after="up to date")
    diff = "" if want.sensitive else unified_diff(want.path, have or "", want.content)
    change = Change(
        target=want.path, what="file", before=", ".join(before), after=", ".join(after),
        write=want, diff=diff,
        verify=lambda facts, w=want: _check_file(facts, w),
    )
    return change, None


def _changed_lines(old: str, new: str) -> str:
    """"+2 -1 lines": how many lines the new content adds and drops (counts only: a secret's lines stay unsaid)."""
    plus = minus = 0
    for line in list(difflib.unified_diff(old.splitlines(), new.splitlines(), n=0, lineterm=""))[2:]:
        plus += line.startswith("+")
        minus += line.startswith("-")
    return f"+{plus} -{minus} line{'' if plus + minus == 1 else 's'}"


def plan_rendered(plan: Plan, templates: Path, files: list[tuple[str, str, str]], context: dict[str, Any],
                  facts: HostFacts) -> None:
    """Render each (path, template, mode) with context into plan: a change where the file differs, ok where not,
    a problem where the template fails."""
    for path, template, mode in files:
        try:
            content = render(templates, template, context)
        except jinja2.TemplateError as exc:
            plan.problems.append(template_error(template, exc))
            continue
        plan_written(plan, FileWrite(path, content, mode=mode), facts)


def plan_written(plan: Plan, want: FileWrite, facts: HostFacts) -> None:
    """The wanted file into plan: a change where it differs, ok where not."""
    change, item = plan_file(want, facts.files.get(want.path))
    plan.changes += [change] if change else []
    plan.unchanged += [item] if item else []


def _check_file(facts: HostFacts, want: FileWrite) -> str | None:
    current = facts.files.get(want.path)
    if current is None or not current.exists:
        return f"{want.path} is missing after writing it"
    if current.text != want.content:
        return f"{want.path} content differs after writing it"
    return None


class TemplateFile(Task):
    """Playbook params: src (template name), dest (absolute path), mode, owner, group, when (a settings block),
    systemd_reload (true for unit files: `systemctl daemon-reload` after a change, where systemd runs)."""

    name = "template"
    tags = frozenset({"files"})
    plans_from = frozenset()  # its own file; and every fact where the template reads facts (planned_from)
    alters = frozenset()  # its file only (a unit file written changes no unit's enabled state)
    PARAMS = ("src", "dest", "mode", "owner", "group", "when", "systemd_reload")

    def template_names(self) -> list[tuple[str, str]]:
        src = self.params.get("src")
        return [("src", src)] if isinstance(src, str) else []

    def check_params(self, file: str) -> list[Problem]:
        problems = []
        for key in ("src", "dest"):
            if not isinstance(self.params.get(key), str):
                problems.append(Problem(file, f"task {self.name}", key, "is required (a string)"))
        dest = self.params.get("dest", "/")
        if isinstance(dest, str) and not dest.startswith("/"):
            problems.append(Problem(file, f"task {self.name}", "dest", f"must be an absolute path, got {dest!r}"))
        mode = str(self.params.get("mode", "0644"))
        if not (mode.isdigit() and set(mode) <= set("01234567") and len(mode) in (3, 4)):
            problems.append(Problem(file, f"task {self.name}", "mode", f"must be octal like 0644, got {mode!r}"))
        unknown = set(self.params) - set(self.PARAMS)
        for key in sorted(unknown):
            problems.append(Problem(file, f"task {self.name}", key, "unknown parameter",
                                    f"allowed: {', '.join(self.PARAMS)}"))
        return problems

    def file_paths(self, host: Host) -> list[str]:
        return [self.params["dest"]] if self.applies(host) else []

    def planned_from(self) -> frozenset[str]:
        # A template of the user's may render any fact, as it is when the task is planned.
        return frozenset({"*"}) if self.templates and reads_facts(self.templates, self.params["src"]) else self.plans_from

    def plan_where_set(self, host: Host, facts: HostFacts) -> Plan:
        plan = Plan()
        context = {"host": host, "settings": host.settings, "facts": facts}
        try:
            content = render(self.template_folder(), self.params["src"], context)
        except jinja2.TemplateError as exc:
            plan.problems.append(template_error(self.params["src"], exc))
            return plan
        want = FileWrite(
            path=self.params["dest"], content=content,
            mode=str(self.params.get("mode", "0644")).zfill(4),
            owner=self.params.get("owner", "root"), group=self.params.get("group", "root"),
        )
        change, item = plan_file(want, facts.files.get(want.path))
        if change:
            if self.params.get("systemd_reload") and facts.system.systemd_running:
                change.after_write.append(["systemctl", "daemon-reload"])
            plan.changes.append(change)
        elif item:  # plan_file gives one of the two
            plan.unchanged.append(item)
        return plan
