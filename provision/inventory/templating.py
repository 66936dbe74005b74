"""Jinja in the values provision reads (`ansible_host: "{{ inventory_hostname }}.mgmt"`), rendered per host as
Ansible renders them: against the host's variables (other roles' too, themselves rendered when asked for),
inventory_hostname, inventory_hostname_short and group_names. A lone expression keeps its type
(`ansible_port: "{{ 2200 + 22 }}"` is the number). Jinja's own filters and tests are there; Ansible's filters
and lookups are not, and one is an error naming the host and key. Rendering runs in Jinja's sandbox."""

from __future__ import annotations

from collections import ChainMap
from collections.abc import Mapping
from typing import Any, Iterator

import jinja2
from jinja2.nativetypes import NativeCodeGenerator, NativeTemplate, native_concat
from jinja2.sandbox import ImmutableSandboxedEnvironment

MAX_DEPTH = 20  # variables naming variables: deeper than this is a loop


class _Environment(ImmutableSandboxedEnvironment):
    """The sandbox, with native types: Jinja's NativeEnvironment, sandboxed."""

    code_generator_class = NativeCodeGenerator
    concat = staticmethod(native_concat)  # type: ignore[assignment]


_Environment.template_class = NativeTemplate
ENVIRONMENT = _Environment(undefined=jinja2.StrictUndefined)


class RenderError(ValueError):
    pass


def is_templated(value: Any) -> bool:
    if isinstance(value, str):
        return "{{" in value or "{%" in value
    if isinstance(value, dict):
        return any(is_templated(v) for v in value.values())
    if isinstance(value, list):
        return any(is_templated(v) for v in value)
    return False


def without_templates(variables: dict) -> dict:
    """The values that need no host to be known: what one level can check where it is written."""
    kept: dict = {}
    for key, value in variables.items():
        if isinstance(value, dict):
            kept[key] = without_templates(value)
        elif not is_templated(value):
            kept[key] = value
    return kept


class HostContext(Mapping):
    """A host's variables for Jinja: a templated one is rendered when a template asks for it."""

    def __init__(self, variables: dict, depth: int = 0):
        self.variables, self.depth = variables, depth

    def __getitem__(self, key: str) -> Any:
        value = self.variables[key]
        if not is_templated(value):
            return value
        if self.depth >= MAX_DEPTH:
            raise RenderError(f"{key} leads back to itself (variables naming variables, {MAX_DEPTH} deep)")
        return render(value, HostContext(self.variables, self.depth + 1))

    def __iter__(self) -> Iterator[str]:
        return iter(self.variables)

    def __len__(self) -> int:
        return len(self.variables)


def render(value: Any, context: Mapping) -> Any:
    """`value` with every template in it rendered; RenderError saying why one could not be."""
    if isinstance(value, dict):
        return {k: render(v, context) for k, v in value.items()}
    if isinstance(value, list):
        return [render(v, context) for v in value]
    if not is_templated(value):
        return value
    try:
        template = ENVIRONMENT.from_string(value)
        # Shared: Jinja looks each name up when the template asks for it (render() would copy the mapping,
        # rendering every variable of the host, and loop on the one being rendered).
        frame = template.new_context(ChainMap(context, ENVIRONMENT.globals), shared=True)  # type: ignore[arg-type]
        result = native_concat(template.root_render_func(frame))
        if isinstance(result, jinja2.Undefined):  # a lone {{ name }} gives Undefined itself, not its error
            result._fail_with_undefined_error()
        return result
    except jinja2.UndefinedError as exc:
        said = exc.message or ""
        if "'lookup' is undefined" in said or "'query' is undefined" in said:
            said += " (Ansible's lookups are not provision's: write the value itself)"
        raise RenderError(f"{value!r}: {said}") from None
    except jinja2.TemplateSyntaxError as exc:
        said = exc.message or ""
        if "No filter named" in said or "No test named" in said:
            said += " (Ansible's filters are not provision's: write the value itself)"
        raise RenderError(f"{value!r}: {said}") from None
    except (jinja2.TemplateError, TypeError, ValueError, ArithmeticError) as exc:
        raise RenderError(f"{value!r}: {exc}") from None
