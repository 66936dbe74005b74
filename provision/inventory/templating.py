"""Jinja in the values provision reads (`ansible_host: "{{ inventory_hostname }}.mgmt"`), rendered per host as
Ansible renders them: against the host's variables (other roles' too, themselves rendered when asked for),
inventory_hostname, inventory_hostname_short and group_names. A lone expression keeps its type
(`ansible_port: "{{ 2200 + 22 }}"` is the number). Jinja's own filters and tests are there; Ansible's filters
and lookups are not, and one is an error naming the host and key.

Rendered in provision's one sandbox (core/sandbox.py, which says what it bounds: sizes, integers, steps), bounded
where Ansible is not, on purpose: an inventory is input, and a short template can ask for terabytes. Here, per
inventory: rendering one value takes at most MAX_STEPS steps, and a whole inventory's rendering at most
MAX_LOAD_STEPS (load.py opens that budget); what a value renders to is at most the sandbox's MAX_CHARS characters
(or items); output of several pieces is read back as a Python literal, as Jinja's native mode does, only up to
MAX_LITERAL_CHARS."""

from __future__ import annotations

import functools
from ast import literal_eval, parse
from collections import ChainMap
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import jinja2
from jinja2.nativetypes import NativeCodeGenerator, NativeTemplate

from provision.core.sandbox import BoundedCodeGenerator, BoundedSandbox, Refused, budget, gathered, refuse_over, size

MAX_DEPTH = 20  # variables naming variables: deeper than this is a loop
MAX_STEPS = 100_000  # one value's rendering: a template an inventory holds takes tens
MAX_LOAD_STEPS = 2_000_000  # a whole inventory's: twenty for each of 100,000 hosts; about 6 s on 2 busy cores
MAX_LITERAL_CHARS = 10_000  # output longer than this stays text: not parsed back as a Python literal (seconds)


class RenderError(ValueError):
    pass


LOAD_SPENT = f"this inventory's templates took more than {MAX_LOAD_STEPS:,} steps to render in all (provision's limit)"
VALUE_SPENT = f"takes more than {MAX_STEPS:,} steps to render (provision's limit)"


@contextmanager
def load_budget() -> Iterator[None]:
    """Every render in the block draws on one budget of MAX_LOAD_STEPS (an inventory's load: load.py); spent,
    every render after says LOAD_SPENT."""
    with budget(MAX_LOAD_STEPS, LOAD_SPENT):
        yield


def _concat(values: Iterable[Any]) -> Any:
    """Jinja's native_concat, bounded: one output kept as its type, several joined as text (read back as a
    Python literal where they are one), refused as soon as they pass MAX_CHARS (core/sandbox.py gathered)."""
    pieces = gathered(values)
    if not pieces:
        return None
    if len(pieces) == 1 and not isinstance(pieces[0], str):
        return pieces[0]
    raw = "".join(str(piece) for piece in pieces)
    if len(raw) > MAX_LITERAL_CHARS:
        return raw
    try:
        return literal_eval(parse(raw, mode="eval"))  # parse: keeps leading spaces, as Jinja's native_concat
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return raw


class _CodeGenerator(BoundedCodeGenerator, NativeCodeGenerator):
    """Native types, `~` bounded."""


class _Environment(BoundedSandbox):
    """The sandbox with native types (Jinja's NativeEnvironment, sandboxed)."""

    code_generator_class = _CodeGenerator
    concat = staticmethod(_concat)  # type: ignore[assignment]


_Environment.template_class = NativeTemplate
ENVIRONMENT = _Environment(undefined=jinja2.StrictUndefined)


@functools.lru_cache(maxsize=512)
def _compiled(source: str) -> jinja2.Template:
    """A template, compiled once however many hosts render it (its for loops counted: the sandbox's parse)."""
    return ENVIRONMENT.from_string(source)


def is_templated(value: Any) -> bool:
    if isinstance(value, str):
        return "{{" in value or "{%" in value
    if isinstance(value, dict):
        return any(is_templated(v) for v in value.values())
    if isinstance(value, list):
        return any(is_templated(v) for v in value)
    return False


def without_templates(variables: dict[str, Any]) -> dict[str, Any]:
    """The values that need no host to be known: what one level can check where it is written."""
    kept: dict[str, Any] = {}
    for key, value in variables.items():
        if isinstance(value, dict):
            kept[key] = without_templates(value)
        elif not is_templated(value):
            kept[key] = value
    return kept


class HostContext(Mapping[str, Any]):
    """A host's variables for Jinja: a templated one is rendered when a template asks for it, once (the contexts
    of one host share what they rendered: a variable named twice by each of a chain of them is not rendered
    2**20 times)."""

    def __init__(self, variables: dict[str, Any], depth: int = 0, rendered: dict[str, Any] | None = None):
        self.variables, self.depth = variables, depth
        self.rendered = {} if rendered is None else rendered

    def __getitem__(self, key: str) -> Any:
        if key in self.rendered:
            return self.rendered[key]
        value = self.variables[key]
        if not is_templated(value):  # a walk through all of it: once
            self.rendered[key] = value
            return value
        if self.depth >= MAX_DEPTH:
            raise RenderError(f"{key} leads back to itself (variables naming variables, {MAX_DEPTH} deep)")
        self.rendered[key] = _render(value, HostContext(self.variables, self.depth + 1, self.rendered))
        return self.rendered[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.variables)

    def __len__(self) -> int:
        return len(self.variables)


def render(value: Any, context: Mapping[str, Any]) -> Any:
    """`value` with every template in it rendered, in MAX_STEPS; RenderError saying why one could not be."""
    try:
        with budget(MAX_STEPS, VALUE_SPENT):
            rendered = _render(value, context)
        refuse_over(size(rendered, charged=False), "the value")  # its parts were each bounded: their sum
        return rendered
    except Refused as exc:
        raise RenderError(f"{_shown(value)}: {exc}") from None


def _render(value: Any, context: Mapping[str, Any]) -> Any:
    """render(), within the budget of the value that asked for this one (a variable one of its templates names)."""
    if isinstance(value, dict):
        return {k: _render(v, context) for k, v in value.items()}
    if isinstance(value, list):
        return [_render(v, context) for v in value]
    if not is_templated(value):
        return value
    try:
        template = _compiled(value)
        # Shared: Jinja looks each name up when the template asks for it (render() would copy the mapping,
        # rendering every variable of the host, and loop on the one being rendered).
        frame = template.new_context(ChainMap(context, ENVIRONMENT.globals), shared=True)  # type: ignore[arg-type]
        result = _concat(template.root_render_func(frame))
        if isinstance(result, jinja2.Undefined):  # a lone {{ name }} gives Undefined itself, not its error
            result._fail_with_undefined_error()
        return result
    except Refused:
        raise
    except jinja2.UndefinedError as exc:
        said = exc.message or ""
        if "'lookup' is undefined" in said or "'query' is undefined" in said:
            said += " (Ansible's lookups are not provision's: write the value itself)"
        raise RenderError(f"{_shown(value)}: {said}") from None
    except jinja2.TemplateSyntaxError as exc:
        said = exc.message or ""
        if "No filter named" in said or "No test named" in said:
            said += " (Ansible's filters are not provision's: write the value itself)"
        raise RenderError(f"{_shown(value)}: {said}") from None
    except RecursionError:
        raise RenderError(f"{_shown(value)}: nested too deeply (a macro calling itself?)") from None
    except MemoryError:
        raise RenderError(f"{_shown(value)}: makes more than this machine's memory holds") from None
    except (jinja2.TemplateError, TypeError, ValueError, ArithmeticError) as exc:
        raise RenderError(f"{_shown(value)}: {exc}") from None


def _shown(value: Any) -> str:
    """The template, quoted, cut where it is long (a problem is one line)."""
    text = repr(value)
    return text if len(text) <= 120 else text[:100] + "...'"
