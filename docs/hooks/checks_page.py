"""The checks reference, from the check modules: every `check_*` function verify runs, named as verify's report
names it, with what it reads and the operator's next step from its docstring (`Reads:` and `Next step:` lines)."""

from __future__ import annotations

import importlib
import inspect
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from types import ModuleType

from markdown_text import escape, sentence

LABELS = {"Reads:": "reads", "Next step:": "next_step"}
LABEL = re.compile(r"^(Reads:|Next step:)\s*")


@dataclass(frozen=True)
class Check:
    name: str  # as verify's report shows it: the function's name without check_, [TASK] for a task's check
    module: str
    about: str  # the docstring before its Reads: line, if any
    reads: str
    next_step: str


def checks(module_names: Iterable[str]) -> list[Check]:
    """Every check of the modules, in the registry's order and each module's own."""
    return [check_of(function, module.__name__) for module in map(importlib.import_module, module_names)
            for function in check_functions(module)]


def check_functions(module: ModuleType) -> list[Callable]:
    return [f for name, f in vars(module).items()
            if name.startswith("check_") and inspect.isfunction(f) and f.__module__ == module.__name__]


def check_of(function: Callable, module: str) -> Check:
    name = function.__name__.removeprefix("check_")
    if "task" in inspect.signature(function).parameters:
        name += "[TASK]"  # run once per playbook task, named after it
    about, said = docstring_parts(inspect.getdoc(function) or "")
    missing = [label for label, key in LABELS.items() if not said.get(key)]
    if missing:
        raise LookupError(f"{module}.{function.__name__}: its docstring needs {' and '.join(missing)} lines "
                          "(what it reads, the operator's next step when it fails)")
    return Check(name, module, about, said["reads"], said["next_step"])


def docstring_parts(doc: str) -> tuple[str, dict[str, str]]:
    """(the text before the labelled lines, {"reads": ..., "next_step": ...}); a labelled part runs on over the
    lines after it, to the next label or a blank line."""
    about: list[str] = []
    said: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in doc.splitlines():
        label = LABEL.match(line)
        if label:
            current = said.setdefault(LABELS[label.group(1)], [])
            line = line[label.end():]
        elif not line.strip():
            current = None
        (current if current is not None else about).append(line.strip())
    return " ".join(" ".join(about).split()), {key: " ".join(" ".join(lines).split()) for key, lines in said.items()}


def capability(module: str) -> str:
    """provision.capabilities.gpu.checks_nvlink -> gpu; provision.verify.as_intended -> verify."""
    parts = module.split(".")
    return parts[2] if parts[1] == "capabilities" else parts[1]


def markdown(module_names: Iterable[str], settings: Iterable[str] = ()) -> str:
    """The page's generated part; each of `settings` (provision_gpu.count) the text names links to its entry on
    the settings page."""
    linked = setting_links(settings)
    out: list[str] = []
    group = None
    for check in checks(module_names):
        if capability(check.module) != group:
            group = capability(check.module)
            out += [f"## {group}", ""]
        out += [f"### `{check.name}` {{ #{check.name.removesuffix('[TASK]')} }}", ""]
        if check.about:
            out += [linked(escape(check.about)), ""]
        out += [f"**Reads:** {linked(escape(sentence(check.reads)))}", "",
                f"**Next step:** {linked(escape(sentence(check.next_step)))}", "",
                f"Source: `{check.module}`", ""]
    return "\n".join(out)


def setting_links(settings: Iterable[str]) -> Callable[[str], str]:
    """Escaped text -> the same with each setting named outside code linked: the longest name first, a whole name
    only (provision_nccl.require_nic_within, not provision_nccl and text after it)."""
    names = sorted(settings, key=len, reverse=True)
    if not names:
        return lambda text: text
    by_escaped = {escape(name): name for name in names}
    pattern = re.compile("|".join(map(re.escape, by_escaped)) + r"(?![\w\\])")
    return lambda text: pattern.sub(
        lambda m: f"[`{by_escaped[m.group()]}`](settings.md#{by_escaped[m.group()]})", text)
