"""The one Jinja sandbox provision renders in: the values of an inventory (inventory/templating.py, with native
types) and the files it writes from templates (capabilities/system/files.py, plain text, templates from
--templates DIR included). Jinja's immutable sandbox: no Python internals, no changes to the values it is given.

Bounded where Jinja and Ansible are not, on purpose (a template is input, and a short one can ask for terabytes,
or for ever):
- what an operator, a filter, a method, a `~`, a loop's or a block's output (a macro, `{% set %}...{% endset %}`)
  makes is at most MAX_CHARS characters (or list items), refused before it is made where its size is known
  beforehand ('a' * 10**12, 'x'|center(10**9), '%0999999999d' % 1), and measured once made where it is not;
- an integer ** or * makes at most MAX_INT_BITS bits;
- time is counted in steps: each turn of a loop (a recursive one's too), and a step more for each operation its
  body holds (which each turn runs: a name, an attribute, a test, a call...; not text or constants); each call,
  filter and operator; a step more for each CHARS_PER_STEP characters (or items) made, for each CHARS_PER_STEP
  characters or ITEMS_PER_STEP items a filter or a method is given (range(10**5)|sum: 10,001 steps), and for each
  value measured. Who renders says how many steps it may take: `with budget(steps, said):` around the render
  (budgets nest, and every step is drawn from each one open: the inventory opens one for a whole load and one for
  each value; a file template, one for its render);
- Jinja's lipsum() is left out (lipsum(10**9): paragraphs of Latin); range() is capped by Jinja's sandbox
  (MAX_RANGE, 100,000 items).
A bound passed raises Refused (a jinja2 SecurityError, so a TemplateError), saying which one and its value."""

from __future__ import annotations

import functools
import re
import string
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, ClassVar, TypeVar

from jinja2 import nodes
from jinja2.compiler import CodeGenerator, Frame
from jinja2.runtime import LoopContext
from jinja2.exceptions import SecurityError
from jinja2.sandbox import ImmutableSandboxedEnvironment

MAX_CHARS = 1_000_000  # what one value makes: a megabyte of text is far past an address, a path or a block
MAX_INT_BITS = 100_000  # about 30,000 digits: past any number a template needs, and quick to compute
CHARS_PER_STEP = 1000  # a step more for each thousand characters made or read, and one for each value measured
ITEMS_PER_STEP = 10  # and one for each ten items a filter or method is given: Python walks them 50 times slower


class Refused(SecurityError):
    """What the bounds refuse: too big a value, too many steps."""


class _Budget:
    def __init__(self, steps: int, said: str):
        self.steps, self.said = steps, said

    def charge(self, steps: int) -> None:
        self.steps -= steps
        if self.steps < 0:
            raise Refused(self.said)


_BUDGETS: ContextVar[tuple[_Budget, ...]] = ContextVar("provision_sandbox_budgets", default=())


@contextmanager
def budget(steps: int, said: str) -> Iterator[None]:
    """Every render in the block draws on one budget of `steps`, as well as on those opened around it; spent,
    every step after raises Refused(said)."""
    token = _BUDGETS.set((*_BUDGETS.get(), _Budget(steps, said)))
    try:
        yield
    finally:
        _BUDGETS.reset(token)


def charge(made: int = 0) -> None:
    """A step, and one more for each CHARS_PER_STEP characters (or items) it made."""
    _spend(1 + made // CHARS_PER_STEP)


def _charge_reading(value: Any) -> None:
    """A step, and one more for each CHARS_PER_STEP characters or ITEMS_PER_STEP items of `value` (what a filter or
    a method is given, to walk), where its length is known without asking it (an Undefined answers len() with its
    error)."""
    if isinstance(value, (str, bytes)):
        _spend(1 + len(value) // CHARS_PER_STEP)
    elif isinstance(value, (list, tuple, dict, set, frozenset, range)):
        _spend(1 + len(value) // ITEMS_PER_STEP)
    else:
        _spend(1)


def _spend(steps: int) -> None:
    for each in reversed(_BUDGETS.get()):  # the innermost first: its words say the narrower limit
        each.charge(steps)


def size(value: Any, limit: int = MAX_CHARS, charged: bool = True) -> int:
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


def refuse_over(count: int, what: str) -> None:
    if count > MAX_CHARS:
        raise Refused(f"{what} makes more than {MAX_CHARS:,} characters or items (provision's limit)")


Made = TypeVar("Made")


def _made(value: Made, what: str) -> Made:
    """`value`, once made, charged for its size and refused past MAX_CHARS."""
    count = size(value)
    refuse_over(count, what)
    charge(count)
    return value


def gathered(values: Iterable[Any]) -> list[Any]:
    """The pieces of an output (a block's, a macro's, a loop's), refused as soon as they pass MAX_CHARS, and
    charged for their size."""
    pieces, count = [], 0
    for value in values:
        count += size(value)
        refuse_over(count, "the output")
        pieces.append(value)
    charge(count)
    return pieces


def _joined(values: Iterable[str]) -> str:
    """Jinja's concat ("".join), bounded (gathered)."""
    return "".join(gathered(values))


def _join(values: tuple[Any, ...]) -> str:
    """`a ~ b`: refused past MAX_CHARS before it is joined."""
    refuse_over(sum(size(value) for value in values), "~")
    return _made("".join(str(value) for value in values), "~")


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
        refuse_over(size(items) * max(times, 0), f"a {type(items).__name__} * {times}")
    elif operator == "+" and isinstance(left, sized) and isinstance(right, sized):
        refuse_over(size(left) + size(right), "+")
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


def _arg(args: tuple[Any, ...], kwargs: dict[str, Any], index: int, name: str, default: Any = None) -> Any:
    return args[index] if len(args) > index else kwargs.get(name, default)


def _check_text(name: str, value: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """The str (or bytes) operations, filters and methods, that make more than they are given."""
    if not isinstance(value, (str, bytes)):
        return
    text = _text(value)
    if name in ("center", "ljust", "rjust", "zfill") and _integer(width := _arg(args, kwargs, 0, "width", 0)):
        refuse_over(width, f"{name}({width})")
    elif name == "expandtabs" and _integer(tabsize := _arg(args, kwargs, 0, "tabsize", 8)):
        refuse_over(len(text) + text.count("\t") * tabsize, f"expandtabs({tabsize})")
    elif name == "replace":
        old, new = _arg(args, kwargs, 0, "old"), _arg(args, kwargs, 1, "new")
        if isinstance(old, (str, bytes)) and isinstance(new, (str, bytes)):
            times = text.count(_text(old)) if old else len(text) + 1
            count = _arg(args, kwargs, 2, "count")
            if _integer(count) and count >= 0:
                times = min(times, count)
            refuse_over(len(text) + times * max(len(new) - len(old), 0), "replace")
    elif name == "indent":
        width = _arg(args, kwargs, 0, "width", 4)
        per_line = len(width) if isinstance(width, str) else width if _integer(width) else 0
        refuse_over(len(text) + (text.count("\n") + 1) * per_line, "indent")
    elif name == "translate":
        table = _arg(args, kwargs, 0, "table")
        if isinstance(table, Mapping):
            longest = max((len(v) for v in table.values() if isinstance(v, str)), default=1)
            refuse_over(len(text) * longest, "translate")
    elif name in ("format", "%"):
        _check_widths(text, list(args) + list(kwargs.values()), name)


def _text(value: str | bytes) -> str:
    """bytes as text of the same length, to count in."""
    return value.decode("latin-1") if isinstance(value, bytes) else value


def _check_join(separator: Any, items: Any) -> None:
    if isinstance(items, (list, tuple)):
        refuse_over(size(items) + size(separator) * len(items), "join")


def _check_filter(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Jinja's filters that make more than their value holds, from their arguments (args: the value first)."""
    value, rest = (args[0] if args else None), args[1:]
    if name == "center" and _integer(width := _arg(rest, kwargs, 0, "width", 80)):
        refuse_over(width, f"center({width})")
    elif name in ("indent", "replace", "format"):
        _check_text(name, value, rest, kwargs)
    elif name == "join":
        _check_join(_arg(rest, kwargs, 0, "d", ""), value)
    elif name in ("batch", "slice") and _integer(count := _arg(rest, kwargs, 0, "linecount" if name == "batch"
                                                               else "slices", 0)):
        refuse_over(count, f"{name}({count})")
    elif name == "tojson" and _integer(indent := _arg(rest, kwargs, 0, "indent", 0)):
        refuse_over(size(value) * max(indent, 1), f"tojson(indent={indent})")
    elif name in ("string", "pprint", "tojson", "urlencode", "xmlattr", "escape", "e", "forceescape", "list"):
        refuse_over(size(value), f"|{name}")


def _guarded(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    """A filter, checked before it runs (_check_filter), its result after, each call a step (and more for what it
    is given: _charge_reading)."""
    skip = 1 if hasattr(function, "jinja_pass_arg") else 0  # the context or environment Jinja passes first

    @functools.wraps(function)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        _charge_reading(args[skip] if len(args) > skip else None)
        _check_filter(name, args[skip:], kwargs)
        return _made(function(*args, **kwargs), f"the filter {name}")

    return guarded


class _Counted:
    """A for loop's items, each turn `weight` steps (`{% for %}` over range() in range(): 10**10 turns); the loop
    a recursive one calls again (loop(children)) counts its turns the same."""

    def __init__(self, items: Iterable[Any], weight: int = 1):
        self.items, self.weight = iter(items), weight

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        item = next(self.items)
        _spend(self.weight)
        return item


_FREE = (nodes.Output, nodes.TemplateData, nodes.Const)  # text and constants: written, not computed, each turn


def counting_loops(tree: nodes.Template) -> nodes.Template:
    """The template's tree, each for loop's items counted (_Counted): a step a turn, and one more for each operation
    its body (and its `if`) holds, which each turn runs (a 1 MiB template's loop can hold 100,000 of them)."""
    for loop in list(tree.find_all(nodes.For)):
        body = [*loop.body, *([loop.test] if loop.test else [])]
        held = sum(not isinstance(part, _FREE) for node in body for part in (node, *node.find_all(nodes.Node)))
        loop.iter = nodes.Call(nodes.EnvironmentAttribute("counted"), [loop.iter, nodes.Const(1 + held)], [], None,
                               None, lineno=loop.iter.lineno)
    return tree


class BoundedCodeGenerator(CodeGenerator):
    """Jinja's code generator with `~` through the environment's join_bounded (_join). A mixin as much as a class:
    the native one is `class (BoundedCodeGenerator, NativeCodeGenerator)`."""

    def visit_Concat(self, node: nodes.Concat, frame: Frame) -> None:
        self.write("environment.join_bounded((")
        for argument in node.nodes:
            self.visit(argument, frame)
            self.write(", ")
        self.write("))")


class BoundedSandbox(ImmutableSandboxedEnvironment):
    """Jinja's immutable sandbox, bounded (see the module): every filter guarded (own_filters too), operators,
    calls and str.format checked, `~` and outputs measured, loops counted in every template it parses (from a
    string or through a loader), lipsum() left out."""

    code_generator_class = BoundedCodeGenerator
    concat = staticmethod(_joined)
    intercepted_binops = frozenset({"*", "**", "+", "%"})
    join_bounded = staticmethod(_join)
    counted = _Counted
    # A subclass's filters, beside Jinja's: guarded as they are.
    own_filters: ClassVar[dict[str, Callable[..., Any]]] = {}

    def __init__(self, **options: Any):
        super().__init__(**options)
        self.filters = {name: _guarded(name, function) for name, function in {**self.filters,
                                                                              **self.own_filters}.items()}
        self.globals.pop("lipsum", None)

    def _parse(self, source: str, name: str | None, filename: str | None) -> nodes.Template:
        return counting_loops(super()._parse(source, name, filename))

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        charge()
        _check_binop(operator, left, right)
        return _made(super().call_binop(context, operator, left, right), operator)

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # dunders: Jinja's, kwargs free
        bound_to = getattr(__obj, "__self__", None)
        _charge_reading(bound_to)  # a method's object: 'text'.count('x'), items.index(0)
        if isinstance(bound_to, (str, bytes)):
            name = getattr(__obj, "__name__", "")
            if name == "join":
                _check_join(bound_to, _arg(args, kwargs, 0, "iterable"))
            else:
                _check_text(name, bound_to, args, kwargs)
        elif isinstance(__obj, LoopContext) and args:  # loop(children) in a recursive loop: its turns counted too
            args = (_Counted(args[0], getattr(__obj._iterable, "weight", 1)), *args[1:])
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
            formatted: str = wrapped(*args, **kwargs)
            return _made(formatted, "format")

        return bounded
