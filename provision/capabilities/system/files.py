"""A file rendered from a jinja2 template and written atomically, with mode, owner and a backup."""

from __future__ import annotations

import difflib
import functools
import shlex
from pathlib import Path

import jinja2
import jinja2.meta

from provision.core.errors import Problem
from provision.core.plan import Change, FileWrite, Item, OK, Plan, Task


def render(templates: Path, src: str, context: dict) -> str:
    return _environment(str(templates)).get_template(src).render(**context)


@functools.lru_cache(maxsize=16)
def _environment(templates: str) -> jinja2.Environment:
    """One environment per templates directory, so each template is compiled once per run, not once per host
    and task (jinja caches compiled templates per environment, and checks the file's mtime before reusing one)."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(templates),
        undefined=jinja2.StrictUndefined,  # a missing variable is an error, not an empty string
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["shquote"] = lambda value: shlex.quote(str(value))  # a value in a shell script: one word
    return env


@functools.lru_cache(maxsize=64)
def reads_facts(templates: Path, src: str) -> bool:
    """Whether the template may read `facts` (jinja2's own analysis): one that includes, imports or extends
    another may reach them through it, so it counts as reading them."""
    env = _environment(str(templates))
    tree = env.parse((templates / src).read_text())
    return "facts" in jinja2.meta.find_undeclared_variables(tree) or any(jinja2.meta.find_referenced_templates(tree))


def unified_diff(path: str, old: str, new: str) -> str:
    return "".join(difflib.unified_diff(
        old.splitlines(keepends=True), new.splitlines(keepends=True),
        fromfile=f"{path} (now)", tofile=f"{path} (wanted)",
    ))


def plan_file(want: FileWrite, current) -> tuple[Change | None, Item | None]:
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


def plan_rendered(plan: Plan, templates: Path, files: list[tuple[str, str, str]], context: dict, facts) -> None:
    """Render each (path, template, mode) with context into plan: a change where the file differs, ok where not,
    a problem where the template fails."""
    for path, template, mode in files:
        try:
            content = render(templates, template, context)
        except jinja2.TemplateError as exc:
            plan.problems.append(f"template {template}: {exc}")
            continue
        plan_written(plan, FileWrite(path, content, mode=mode), facts)


def plan_written(plan: Plan, want: FileWrite, facts) -> None:
    """The wanted file into plan: a change where it differs, ok where not."""
    change, item = plan_file(want, facts.files.get(want.path))
    plan.changes += [change] if change else []
    plan.unchanged += [item] if item else []


def _check_file(facts, want: FileWrite) -> str | None:
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

    def template_names(self):
        src = self.params.get("src")
        return [("src", src)] if isinstance(src, str) else []

    def check_params(self, file):
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

    def applies(self, host) -> bool:
        when = self.params.get("when")
        return not when or getattr(host.settings, when, None) is not None

    def file_paths(self, host):
        return [self.params["dest"]] if self.applies(host) else []

    def planned_from(self):
        # A template of the user's may render any fact, as it is when the task is planned.
        return frozenset({"*"}) if self.templates and reads_facts(self.templates, self.params["src"]) else self.plans_from

    def plan(self, host, facts):
        plan = Plan()
        if not self.applies(host):
            plan.skipped = f"{self.params['when']} not set"
            return plan
        context = {"host": host, "settings": host.settings, "facts": facts}
        try:
            content = render(self.templates, self.params["src"], context)
        except jinja2.TemplateError as exc:
            plan.problems.append(f"template {self.params['src']}: {exc}")
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
        else:
            plan.unchanged.append(item)
        return plan
