"""The settings reference, from the models: every field of every block of HostSettings, nested blocks walked,
with its type, what it allows, its default and an example, as Markdown. Nothing here is written by hand: a
field added to a model is on the page at the next build."""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass
from types import NoneType, UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import yaml
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from markdown_text import escape, sentence
from provision.core.settings import PREFIX, yaml_words

NO_EXAMPLE = object()
LIST_ITEM = "[]"  # a path's part for "each entry of the list": provision_gpu.overrides[].index


@dataclass(frozen=True)
class Setting:
    """One field as the page shows it: its path from the inventory variable, and what the model says of it."""

    path: tuple[str, ...]  # ("provision_gpu", "overrides[]", "index")
    type: str
    allowed: str
    hint: str
    default: str
    example: str  # YAML, under the inventory variable; "" for a block, whose keys each have theirs
    about: str = ""  # the docstring of the block model it holds, if that model has its own
    sees: str = ""  # the path of the setting whose fields this one shares (a model met before)

    @property
    def name(self) -> str:
        return ".".join(self.path).replace("." + LIST_ITEM, LIST_ITEM)

    @property
    def anchor(self) -> str:
        """The page's anchor: settings.md#provision_gpu.power_limit, #provision_gpu.overrides.index."""
        return ".".join(part for part in self.path if part != LIST_ITEM)


def settings(root: type[BaseModel]) -> list[Setting]:
    """Every setting of `root` (HostSettings), in the models' order: a block, then its fields, depth first. A
    model met a second time (the clocks of an override) is not walked again: its entry names the first."""
    walked: dict[type[BaseModel], tuple[str, ...]] = {}
    found: list[Setting] = []

    def walk(model: type[BaseModel], path: tuple[str, ...]) -> None:
        for name, field in model.model_fields.items():
            here = path + (name,) if path else (PREFIX + name,)
            inner, listed = model_in(field.annotation)
            first = walked.get(inner) if inner else None
            about = inspect.cleandoc(vars(inner).get("__doc__") or "") if inner else ""
            found.append(setting_of(field, here, about, ".".join(first) if first else ""))
            if inner is not None and first is None:
                walked[inner] = here
                walk(inner, here + ((LIST_ITEM,) if listed else ()))

    walk(root, ())
    return found


def setting_of(field: FieldInfo, path: tuple[str, ...], about: str = "", sees: str = "") -> Setting:
    extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
    holds_block = model_in(field.annotation)[0] is not None
    value = example(field, ".".join(path)) if field.examples or not holds_block else NO_EXAMPLE
    return Setting(path, type_words(field.annotation), field.description or "", str(extra.get("hint", "")),
                   default_words(field.default), "" if value is NO_EXAMPLE else example_yaml(path, value), about,
                   sees)


def model_in(annotation: Any) -> tuple[type[BaseModel] | None, bool]:
    """The block model inside an annotation, and whether it is a list's entries (overrides: list[GpuOverride])."""
    if inspect.isclass(annotation) and issubclass(annotation, BaseModel):
        return annotation, False
    for arg in get_args(annotation):
        inner, listed = model_in(arg)
        if inner is not None:
            return inner, listed or get_origin(annotation) is list
    return None, False


def type_words(annotation: Any) -> str:
    """A type as a reader of YAML knows it: integer, number, text, true or false, a list, a mapping."""
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Annotated:
        return type_words(args[0])
    if origin in (Union, UnionType):
        words = [type_words(a) for a in args if a is not NoneType]
        if "number" in words and "integer" in words:  # int | float: YAML's numbers, one word
            words.remove("integer")
        return " or ".join(dict.fromkeys(words))
    if origin is Literal:
        return f'"{args[0]}"' if len(args) == 1 else "one of " + ", ".join(map(str, args))
    if origin is list:
        return f"a list of {plural(type_words(args[0]))}" if args else "a list"
    if origin is tuple:
        return "[" + ", ".join(type_words(a) for a in args) + "]"
    if origin is dict or annotation is dict:
        return "a mapping" + (f" of {type_words(args[0])} to {type_words(args[1])}" if args else "")
    if inspect.isclass(annotation) and issubclass(annotation, BaseModel):
        return "a mapping"
    return SCALARS.get(annotation, getattr(annotation, "__name__", str(annotation)))


SCALARS: dict[Any, str] = {bool: "true or false", int: "integer", float: "number", str: "text"}


def plural(words: str) -> str:
    return {"text": "texts", "integer": "integers", "number": "numbers", "a mapping": "mappings"}.get(words, words)


def default_words(default: Any) -> str:
    """The default as the inventory would write it; "required" or "not set" (left alone) in words."""
    if default is PydanticUndefined:
        return "required"
    if default is None:
        return "not set"
    return f"`{yaml_words(default)}`"


def example(field: FieldInfo, name: str) -> Any:
    """The model's own example (pydantic's `examples`), else one the type makes plain: the other boolean, another
    choice, the default. A setting with neither is refused: its model must give one."""
    if field.examples:
        return field.examples[0]
    annotation, default = optional_part(field.annotation), field.default
    if annotation is bool:
        return not default if isinstance(default, bool) else True
    if get_origin(annotation) is Literal:
        return next((a for a in get_args(annotation) if a != default), default)
    if default not in (None, PydanticUndefined) and default != [] and default != {}:
        return default
    raise LookupError(f"{name}: no example; give its setting(...) one: examples=[VALUE]")


def optional_part(annotation: Any) -> Any:
    """X of `X | None`."""
    if get_origin(annotation) in (Union, UnionType):
        args = [a for a in get_args(annotation) if a is not NoneType]
        return args[0] if len(args) == 1 else annotation
    return annotation


def example_yaml(path: tuple[str, ...], value: Any) -> str:
    """An example as the inventory writes it, nested under its variable."""
    for part in reversed(path):
        value = [value] if part == LIST_ITEM else {part: value}
    return yaml.dump(value, Dumper=ExampleDumper, sort_keys=False, width=100).rstrip()


class ExampleDumper(yaml.SafeDumper):
    """Mappings as blocks, the way inventories are written; a list of plain values on one line: [1410, 1980]."""

    def represent_plain_list(self, data: list) -> yaml.SequenceNode:
        flat = all(not isinstance(item, (list, dict)) for item in data)
        return self.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flat)


    def represent_version_like(self, data: str) -> yaml.ScalarNode:
        """Text of digits and dots in quotes ("580.159.04", "22"), as the settings ask: YAML reads 580.65 or 22
        unquoted as a number."""
        quoted = VERSION_LIKE.fullmatch(data) is not None
        return self.represent_scalar("tag:yaml.org,2002:str", data, style='"' if quoted else None)


VERSION_LIKE = re.compile(r"[\d.]+")
ExampleDumper.add_representer(list, ExampleDumper.represent_plain_list)
ExampleDumper.add_representer(str, ExampleDumper.represent_version_like)


def markdown(root: type[BaseModel]) -> str:
    """The page's generated part: one section per block, one entry per setting."""
    out: list[str] = []
    for setting in settings(root):
        depth = 2 if len(setting.path) == 1 else 3
        out += [f"{'#' * depth} `{setting.name}` {{ #{setting.anchor} }}", ""]
        out += ["| Type | Allowed | Default |", "| --- | --- | --- |",
                f"| {escape(setting.type)} | {escape(setting.allowed)} | {setting.default} |", ""]
        out += [escape(sentence(text)) + "\n" for text in (setting.about, setting.hint) if text]
        if setting.sees:
            out += [f"Its keys are those of `{setting.sees}`.", ""]
        out += ["```yaml", setting.example, "```", ""] if setting.example else []
    return "\n".join(out)

