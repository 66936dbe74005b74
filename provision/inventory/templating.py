"""Jinja in the values provision reads (`ansible_host: "{{ inventory_hostname }}.mgmt"`), rendered per host as
Ansible renders them: against the host's variables (other roles' too, themselves rendered when asked for),
inventory_hostname, inventory_hostname_short and group_names. A lone expression keeps its type
(`ansible_port: "{{ 2200 + 22 }}"` is the number). Jinja's own filters and tests are there; Ansible's filters
and lookups are not, and one is an error naming the host and key. Rendering runs in Jinja's sandbox.

Bounded where Ansible is not, on purpose (an inventory is input, and a short template can ask for terabytes):
what an operator, a filter, a method, a loop's output or the value itself makes is at most MAX_CHARS characters
(or list items), refused before it is made where its size is known beforehand ('a' * 10**12, 'x'|center(10**9));
an integer ** or * makes at most MAX_INT_BITS bits; rendering one value takes at most MAX_STEPS steps (a loop's
turn, a call, a filter, an operator; a step more per thousand characters made and per value measured), and a
whole inventory's rendering at most MAX_LOAD_STEPS (load.py opens that budget). Output of several pieces is read
back as a Python literal, as Jinja's native mode does, only up to MAX_LITERAL_CHARS. Jinja's lipsum() is left
out."""

from __future__ import annotations

import functools
import re
import string
from ast import literal_eval, parse
from collections import ChainMap
from collections.abc import Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Callable, Iterable, Iterator

import jinja2
from jinja2 import nodes
from jinja2.nativetypes import NativeCodeGenerator, NativeTemplate
from jinja2.sandbox import ImmutableSandboxedEnvironment, SecurityError

MAX_DEPTH = 20  # variables naming variables: deeper than this is a loop
MAX_CHARS = 1_000_000  # what one value renders to: a megabyte of text is far past an address, a path or a block
MAX_INT_BITS = 100_000  # about 30,000 digits: past any number an inventory holds, and quick to compute
MAX_STEPS = 100_000  # one value's rendering: a template an inventory holds takes tens
MAX_LOAD_STEPS = 2_000_000  # a whole inventory's: twenty for each of 100,000 hosts; about 6 s on 2 busy cores
CHARS_PER_STEP = 1000  # a step more for each thousand characters made, and one for each value measured
MAX_LITERAL_CHARS = 10_000  # output longer than this stays text: not parsed back as a Python literal (seconds)


class RenderError(ValueError):
    pass


class Refused(SecurityError):
    """What the bounds refuse: too big a value, too many steps."""


class _Budget:
    def __init__(self, steps: int, said: str):
        self.steps, self.said = steps, said

    def charge(self, steps: int) -> None:
        self.steps -= steps
        if self.steps < 0:
            raise Refused(self.said)


_VALUE: ContextVar[_Budget | None] = ContextVar("provision_render_value", default=None)
_LOAD: ContextVar[_Budget | None] = ContextVar("provision_render_load", default=None)


LOAD_SPENT = f"this inventory's templates took more than {MAX_LOAD_STEPS:,} steps to render in all (provision's limit)"


@contextmanager
def load_budget() -> Iterator[None]:
    """Every render in the block draws on one budget of MAX_LOAD_STEPS (an inventory's load: load.py); spent,
    every render after says LOAD_SPENT."""
    token = _LOAD.set(_Budget(MAX_LOAD_STEPS, LOAD_SPENT))
    try:
        yield
    finally:
        _LOAD.reset(token)


def _charge(made: int = 0) -> None:
    """A step, and one more for each CHARS_PER_STEP characters (or items) it made."""
    _spend(1 + made // CHARS_PER_STEP)


def _spend(steps: int) -> None:
    for budget in (_VALUE.get(), _LOAD.get()):
        if budget is not None:
            budget.charge(steps)


def _size(value: Any, limit: int = MAX_CHARS, charged: bool = True) -> int:
    """Characters (of strings) and items (of lists and mappings) in `value`, each time a value is repeated in it
    counted again, as str() would write it; counted up to just past `limit`, a step for each value looked at
    (where charged). Iterators are not consumed."""
    total, todo, looked = 0, [value], 0
    while todo and total <= limit:
        item = todo.pop()
        looked += 1
        if isinstance(item, (str, bytes)):
            total += len(item)
        elif isinstance(item, int):
            total += 1 + item.bit_length() // 4
        elif isinstance(item, Mapping):
            total += len(item)
            todo += list(item.keys()) + list(item.values())
        elif isinstance(item, (list, tuple, set, frozenset)):
            total += len(item)
            todo += list(item)
        else:
            total += 1
    if charged and looked > 1:
        _spend(looked)
    return total


def _refuse_over(size: int, what: str) -> None:
    if size > MAX_CHARS:
        raise Refused(f"{what} makes more than {MAX_CHARS:,} characters or items (provision's limit)")


def _made(value: Any, what: str) -> Any:
    """`value`, once made, charged for its size and refused past MAX_CHARS."""
    size = _size(value)
    _refuse_over(size, what)
    _charge(size)
    return value


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_binop(operator: str, left: Any, right: Any) -> None:
    """Refuse, before it is computed, an operation whose result would pass the bounds."""
    sized = (str, bytes, list, tuple)
    if operator == "**" and _integer(left) and _integer(right) and right > 0 and abs(left) > 1:
        if abs(left).bit_length() * right > MAX_INT_BITS:
            raise Refused(f"{left} ** {right} makes a number of more than {MAX_INT_BITS:,} bits (provision's limit)")
    elif operator == "*" and _integer(left) and _integer(right):
        if left.bit_length() + right.bit_length() > MAX_INT_BITS:
            raise Refused(f"* makes a number of more than {MAX_INT_BITS:,} bits (provision's limit)")
    elif operator == "*" and (isinstance(left, sized) and _integer(right) or isinstance(right, sized) and
                              _integer(left)):
        items, times = (left, right) if _integer(right) else (right, left)
        _refuse_over(_size(items) * max(times, 0), f"a {type(items).__name__} * {times}")
    elif operator == "+" and isinstance(left, sized) and isinstance(right, sized):
        _refuse_over(_size(left) + _size(right), "+")
    elif operator == "%" and isinstance(left, (str, bytes)):
        _check_widths(_text(left), right if isinstance(right, tuple) else (right,), "%")


# A %-format's field: its width and precision, each digits or * (taken from the arguments).
_PERCENT_FIELD = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(\*|\d+)?(?:\.(\*|\d+))?")


def _check_widths(text: str, arguments: Iterable[Any], what: str) -> None:
    """A format whose fields ask for more than MAX_CHARS of padding or digits ('%0999999999d', '{:999999999}'),
    written in the format or taken from the arguments ('%*d', '{:{w}}')."""
    widths = [w for field in _PERCENT_FIELD.findall(text) for w in field if w]
    try:
        for _, _, spec, _ in string.Formatter().parse(text):
            widths += re.findall(r"\d+", spec or "") + (["*"] if spec and "{" in spec else [])
    except ValueError:  # not a str.format format ('50% {'): only % reads it
        pass
    asked = 0
    for width in widths:
        if width == "*":
            asked = max(asked, *(a for a in arguments if _integer(a)), 0)
        else:
            asked = max(asked, int(width) if len(width) <= 18 else MAX_CHARS + 1)
    if asked > MAX_CHARS:
        raise Refused(f"{what} asks for a field {asked:,} characters wide: more than {MAX_CHARS:,} (provision's limit)")


def _arg(args: tuple, kwargs: dict, index: int, name: str, default: Any = None) -> Any:
    return args[index] if len(args) > index else kwargs.get(name, default)


def _check_text(name: str, value: Any, args: tuple, kwargs: dict) -> None:
    """The str (or bytes) operations, filters and methods, that make more than they are given."""
    if not isinstance(value, (str, bytes)):
        return
    text = _text(value)
    if name in ("center", "ljust", "rjust", "zfill") and _integer(width := _arg(args, kwargs, 0, "width", 0)):
        _refuse_over(width, f"{name}({width})")
    elif name == "expandtabs" and _integer(tabsize := _arg(args, kwargs, 0, "tabsize", 8)):
        _refuse_over(len(text) + text.count("\t") * tabsize, f"expandtabs({tabsize})")
    elif name == "replace":
        old, new = _arg(args, kwargs, 0, "old"), _arg(args, kwargs, 1, "new")
        if isinstance(old, (str, bytes)) and isinstance(new, (str, bytes)):
            times = text.count(_text(old)) if old else len(text) + 1
            count = _arg(args, kwargs, 2, "count")
            if _integer(count) and count >= 0:
                times = min(times, count)
            _refuse_over(len(text) + times * max(len(new) - len(old), 0), "replace")
    elif name == "indent":
        width = _arg(args, kwargs, 0, "width", 4)
        per_line = len(width) if isinstance(width, str) else width if _integer(width) else 0
        _refuse_over(len(text) + (text.count("\n") + 1) * per_line, "indent")
    elif name == "translate":
        table = _arg(args, kwargs, 0, "table")
        if isinstance(table, Mapping):
            longest = max((len(v) for v in table.values() if isinstance(v, str)), default=1)
            _refuse_over(len(text) * longest, "translate")
    elif name in ("format", "%"):
        _check_widths(text, list(args) + list(kwargs.values()), name)


def _text(value: str | bytes) -> str:
    """bytes as text of the same length, to count in."""
    return value.decode("latin-1") if isinstance(value, bytes) else value


def _check_join(separator: Any, items: Any) -> None:
    if isinstance(items, (list, tuple)):
        _refuse_over(_size(items) + _size(separator) * len(items), "join")


def _check_filter(name: str, args: tuple, kwargs: dict) -> None:
    """Jinja's filters that make more than their value holds, from their arguments (args: the value first)."""
    value, rest = (args[0] if args else None), args[1:]
    if name == "center" and _integer(width := _arg(rest, kwargs, 0, "width", 80)):
        _refuse_over(width, f"center({width})")
    elif name in ("indent", "replace", "format"):
        _check_text(name, value, rest, kwargs)
    elif name == "join":
        _check_join(_arg(rest, kwargs, 0, "d", ""), value)
    elif name in ("batch", "slice") and _integer(count := _arg(rest, kwargs, 0, "linecount" if name == "batch"
                                                               else "slices", 0)):
        _refuse_over(count, f"{name}({count})")
    elif name == "tojson" and _integer(indent := _arg(rest, kwargs, 0, "indent", 0)):
        _refuse_over(_size(value) * max(indent, 1), f"tojson(indent={indent})")
    elif name in ("string", "pprint", "tojson", "urlencode", "xmlattr", "escape", "e", "forceescape", "list"):
        _refuse_over(_size(value), f"|{name}")


def _guarded(name: str, function: Callable) -> Callable:
    """A filter, checked before it runs (_check_filter), its result after, each call a step."""
    skip = 1 if hasattr(function, "jinja_pass_arg") else 0  # the context or environment Jinja passes first

    @functools.wraps(function)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        _charge()
        _check_filter(name, args[skip:], kwargs)
        return _made(function(*args, **kwargs), f"the filter {name}")

    return guarded


def _counted(items: Any) -> Iterator[Any]:
    """A for loop's items, a step each (`{% for %}` over range() in range(): 10**10 turns)."""
    for item in items:
        _charge()
        yield item


def _concat(values: Iterable[Any]) -> Any:
    """Jinja's native_concat, bounded: one output kept as its type, several joined as text (read back as a
    Python literal where they are one), refused as soon as they pass MAX_CHARS."""
    pieces, size = [], 0
    for value in values:
        size += _size(value)
        _refuse_over(size, "the output")
        pieces.append(value)
    _charge(size)
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


def _join(values: tuple) -> str:
    """`a ~ b`: refused past MAX_CHARS before it is joined."""
    _refuse_over(sum(_size(value) for value in values), "~")
    return _made("".join(str(value) for value in values), "~")


class _CodeGenerator(NativeCodeGenerator):
    def visit_Concat(self, node: nodes.Concat, frame: Any) -> None:  # `~`: through _join
        self.write("environment.join_bounded((")
        for argument in node.nodes:
            self.visit(argument, frame)
            self.write(", ")
        self.write("))")


class _Environment(ImmutableSandboxedEnvironment):
    """The sandbox, with native types (Jinja's NativeEnvironment, sandboxed), and bounded (see the module)."""

    code_generator_class = _CodeGenerator
    concat = staticmethod(_concat)  # type: ignore[assignment]
    intercepted_binops = frozenset({"*", "**", "+", "%"})
    join_bounded = staticmethod(_join)
    counted = staticmethod(_counted)

    def __init__(self, **options: Any):
        super().__init__(**options)
        self.filters = {name: _guarded(name, function) for name, function in self.filters.items()}
        self.globals.pop("lipsum", None)  # lipsum(10**9): paragraphs of Latin, no inventory's business

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        _charge()
        _check_binop(operator, left, right)
        return _made(super().call_binop(context, operator, left, right), operator)

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # dunders: Jinja's, kwargs free
        _charge()
        bound_to = getattr(__obj, "__self__", None)
        if isinstance(bound_to, (str, bytes)):
            name = getattr(__obj, "__name__", "")
            if name == "join":
                _check_join(bound_to, _arg(args, kwargs, 0, "iterable"))
            else:
                _check_text(name, bound_to, args, kwargs)
        return _made(super().call(__context, __obj, *args, **kwargs), "the call")

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        wrapped = super().wrap_str_format(value)
        if wrapped is None:
            return None

        @functools.wraps(wrapped)
        def bounded(*args: Any, **kwargs: Any) -> str:
            arguments = list(args) + list(kwargs.values())
            if args and isinstance(args[0], Mapping):  # format_map
                arguments += list(args[0].values())
            _check_widths(value.__self__, arguments, "format")
            return _made(wrapped(*args, **kwargs), "format")

        return bounded


_Environment.template_class = NativeTemplate
ENVIRONMENT = _Environment(undefined=jinja2.StrictUndefined)


@functools.lru_cache(maxsize=512)
def _compiled(source: str) -> jinja2.Template:
    """A template, compiled once however many hosts render it, its for loops counted (_counted)."""
    tree = ENVIRONMENT.parse(source)
    for loop in list(tree.find_all(nodes.For)):
        loop.iter = nodes.Call(nodes.EnvironmentAttribute("counted"), [loop.iter], [], None, None,
                               lineno=loop.iter.lineno)
    return ENVIRONMENT.from_string(tree)


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
    """A host's variables for Jinja: a templated one is rendered when a template asks for it, once (the contexts
    of one host share what they rendered: a variable named twice by each of a chain of them is not rendered
    2**20 times)."""

    def __init__(self, variables: dict, depth: int = 0, rendered: dict | None = None):
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
        self.rendered[key] = render(value, HostContext(self.variables, self.depth + 1, self.rendered))
        return self.rendered[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.variables)

    def __len__(self) -> int:
        return len(self.variables)


def render(value: Any, context: Mapping) -> Any:
    """`value` with every template in it rendered; RenderError saying why one could not be."""
    if _VALUE.get() is None:  # a value of the inventory, not a variable one of its templates names
        token = _VALUE.set(_Budget(MAX_STEPS, f"takes more than {MAX_STEPS:,} steps to render (provision's limit)"))
        try:
            rendered = render(value, context)
            _refuse_over(_size(rendered, charged=False), "the value")  # its parts were each bounded: their sum
            return rendered
        except Refused as exc:
            raise RenderError(f"{_shown(value)}: {exc}") from None
        finally:
            _VALUE.reset(token)
    if isinstance(value, dict):
        return {k: render(v, context) for k, v in value.items()}
    if isinstance(value, list):
        return [render(v, context) for v in value]
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
