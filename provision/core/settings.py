"""What the inventory's typed settings blocks share: Block (each capability's settings model is one, in its
folder's settings.py; capabilities/host.py gathers them, with the free-form custom block), their fields' common
types, and pydantic's errors as Problems.

Every block refuses unknown keys and takes YAML values as written (strict:
"200" is not a number, 1 is not true, 580.65 is not a version string). A key
left out is None: provision leaves that setting alone. "default" restores the
driver's default where a setting allows it.

parse_host_settings() (capabilities/host.py) is the one entry point: it returns problems in our
Problem format (file, where, dotted key, what is allowed, hint), never a raw
pydantic ValidationError.
"""

from __future__ import annotations

import difflib
import inspect
import re
from typing import Annotated, Any, ClassVar, Literal, Union, get_args, get_origin

from pydantic import (AfterValidator, BaseModel, BeforeValidator, ConfigDict, Discriminator, Field, Tag,
                      ValidationError, ValidationInfo, field_validator)
from pydantic_core import ErrorDetails, PydanticCustomError

from provision.core.errors import Problem

# An inventory serves many roles: provision's variables carry its name, as an Ansible role's do (a role's `gpu:`
# flag or `slurm:` mapping is never read as provision's). One variable per block, not one `provision:` mapping:
# each block is then refined level by level on its own, and `ansible-inventory --list` shows each by name.
PREFIX = "provision_"


def variable(block: str) -> str:
    """The inventory variable of a settings block: provision_gpu for gpu."""
    return PREFIX + block


def refuse(message: str, hint: str = "") -> PydanticCustomError:
    """The error our validators raise: the message and hint reach the Problem as written."""
    return PydanticCustomError("provision", "{message}", {"message": message, "hint": hint})


def setting(default: Any = None, allowed: str = "", hint: str = "", **constraints: Any) -> Any:
    """A field whose `allowed` text (range or choices) and hint are shown when its value is refused."""
    return Field(default, description=allowed, json_schema_extra={"hint": hint} if hint else None, **constraints)


QUOTED_NUMBER = re.compile(r"^\s*[+-]?\d+(\.\d+)?\s*$")  # "200", "150.5": YAML reads them as numbers unquoted


def or_words(value_type: Any, *words: str, number: str = "") -> Any:
    """value_type, or one of `words` (like "default"). Strings go to the words, anything else to value_type,
    so an error speaks of one of them, not both. With `number` ("a number of watts"), a quoted number is
    refused as that, not the string: `power_limit: "200"` is a number written as text, not a misspelt word."""
    def _quoted_number(value: Any) -> Any:
        if number and isinstance(value, str) and value not in words and QUOTED_NUMBER.match(value):
            raise refuse(f"got {value!r}: {number}, not the string {value!r}",
                         f"write {value.strip()} without quotes: YAML reads a quoted number as text")
        return value

    return Annotated[
        Annotated[Union[Annotated[value_type, Tag("[value]")], Annotated[Literal[words], Tag("[word]")]],
                  Discriminator(lambda v: "[word]" if isinstance(v, str) else "[value]")],
        BeforeValidator(_quoted_number),
    ]


UNSAFE_IN_VALUES = re.compile(r"['\"\\`$\s]")
SHELL_WORD = re.compile(r"^[A-Za-z0-9_@%+=:,./-]+$")  # goes into a script unquoted-safe: no quoting needed
PositiveInt = Annotated[int, Field(gt=0)]
Port = Annotated[int, Field(ge=1, le=65535)]
# A path the inventory names goes into file names on the node, scripts, unit files and slurm.conf: absolute, in
# words a shell takes unquoted, with no "." or ".." part (the file is where it says, not somewhere above it).
SAFE_PATH = re.compile(r"^(?:/(?!\.\.?(?:/|$))[A-Za-z0-9_@%+=:,.-]+)+$")
PATH_RULE = "an absolute path: letters, digits and _ @ % + = : , . - between the slashes, no . or .. part"


def _safe_path(value: str) -> str:
    if not SAFE_PATH.match(value):
        raise refuse(f"got {_short(value)}: not {PATH_RULE}", "e.g. /etc/nccl.conf")
    return value


AbsolutePath = Annotated[str, AfterValidator(_safe_path)]

# A command a script runs, first on its line: a name on PATH or an absolute path as above; never an assignment
# (a=b runs what follows it) nor an option (-c).
COMMAND_NAME = re.compile(r"^[A-Za-z0-9_@%+:,.][A-Za-z0-9_@%+:,.-]*$")
COMMAND_RULE = "a command on PATH (letters, digits and _ @ % + : , . -, not starting with -) or " + PATH_RULE


def _command(value: str) -> str:
    if not (COMMAND_NAME.match(value) and value not in (".", "..") or SAFE_PATH.match(value)):
        raise refuse(f"got {_short(value)}: not {COMMAND_RULE}", "e.g. torchrun, or /opt/venv/bin/torchrun")
    return value


Command = Annotated[str, AfterValidator(_command)]


def _numbers_as_text(value: Any) -> Any:
    """`OMP_NUM_THREADS: 8` is natural YAML, and an environment holds text anyway: numbers become text."""
    if not isinstance(value, dict):
        return value
    return {k: str(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v for k, v in value.items()}


EnvVars = Annotated[dict[str, str], BeforeValidator(_numbers_as_text)]


class Block(BaseModel):
    """A settings block, or a mapping inside one.

    An inventory still written with a block's name from before provision's namespace (`gpu:` for `provision_gpu`)
    is told to rename it, but another role may own a variable of that name: a Slurm role's `slurm: {partition:
    batch}` is its own. A mapping there is taken for provision's block only when it holds a telling key, one no
    other role would plausibly write (inventory/validate.py). A field named in several words (`power_limit`) is
    telling, one word (`partition`) is not; a block declares its exceptions: `telling_fields`, one-word fields that
    are still provision's alone (the gpu block's `persistence`), and `generic_fields`, several-word fields any role
    might write (the slurm block's `cluster_name`)."""

    model_config = ConfigDict(extra="forbid", strict=True)
    telling_fields: ClassVar[frozenset[str]] = frozenset()
    generic_fields: ClassVar[frozenset[str]] = frozenset()

    @field_validator("*")
    @classmethod
    def _one_line_of_text(cls, value: Any, info: ValidationInfo) -> Any:
        """Settings end up in files and command lines: no control character (newline, escape) in any text,
        except in the free-form `custom` block (templates may want several lines)."""
        if info.field_name != "custom" and _has_control_character(value):
            raise refuse("has a control character (a newline, a carriage return, an escape, ...)",
                         "write one line of printable text")
        return value


def _has_control_character(value: Any) -> bool:
    if isinstance(value, str):
        return not value.isprintable()
    if isinstance(value, dict):
        return any(_has_control_character(k) or _has_control_character(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return any(_has_control_character(v) for v in value)
    return False  # numbers, booleans, nested blocks (which check their own fields)


# --- settings as the inventory writes them -------------------------------------------------------------

def yaml_words(value: Any) -> str:
    """A setting as the inventory writes it, YAML flow style: 200, {mem: 877, sm: 1005}, {sm: [210, 2520]}."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {yaml_words(v)}" for k, v in value.items()
                               if v is not None and not (k == "nearest" and v is False)) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(yaml_words(v) for v in value) + "]"
    return number_or_word(value)


def number_or_word(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


# --- pydantic errors -> Problems -----------------------------------------------------------------------

def validation_problems(exc: ValidationError, model: type[BaseModel], file: str, where: str,
                        partial: bool = False) -> list[Problem]:
    """Translate pydantic's errors for `model` into Problems, one per key (the first error said about it)."""
    problems: dict[str, Problem] = {}
    for error in exc.errors():
        path = [p for p in error["loc"] if not (isinstance(p, str) and p.startswith("["))]  # or_words tags
        # A merge may still complete a mapping, but not a list entry: missing there is final.
        if partial and error["type"] == "missing" and not any(isinstance(p, int) for p in path):
            continue
        problem = _problem(error, path, model, file, where)
        problems.setdefault(problem.key, problem)
    return list(problems.values())


def _problem(error: ErrorDetails, path: list[str | int], model: type[BaseModel], file: str, where: str) -> Problem:
    key, field, parent = _locate(model, path)
    kind, ctx = error["type"], error.get("ctx") or {}
    if kind == "provision":
        return Problem(file, where, key, ctx["message"], ctx.get("hint", ""))
    if kind == "extra_forbidden":
        known = list(parent.model_fields) if parent else []
        return Problem(file, where, key, f"unknown key {path[-1]!r}",
                       did_you_mean(str(path[-1]), known) or f"known keys: {', '.join(known)}")
    allowed = field.description or "" if field is not None else ""
    hint = (field.json_schema_extra or {}).get("hint", "") if field is not None else ""
    if kind == "missing":
        return Problem(file, where, key, f"required, missing; allowed: {allowed}", hint)
    if kind == "literal_error" and isinstance(error["input"], str):
        hint = did_you_mean(error["input"], re.findall(r"'([^']*)'", ctx.get("expected", ""))) or hint
    what = f"key {error['input']!r}" if "[key]" in error["loc"] else _short(error["input"])
    message = error["msg"][0].lower() + error["msg"][1:]
    if kind in ("model_type", "dict_type"):
        message = "expected a mapping"  # not pydantic's "or instance of GpuSettings"
    if kind == "string_pattern_mismatch":
        message = "not allowed here"  # the allowed text says it in words; the regex would not help
    return Problem(file, where, key, f"got {what}: {message}" + (f"; allowed: {allowed}" if allowed else ""), hint)


def _locate(model: type[BaseModel], path: list[str | int]) -> tuple[str, Any, type[BaseModel] | None]:
    """Follow an error path through the models: (dotted key, the last field passed, the model holding the last part)."""
    key, field, parent = "", None, None
    annotation: Any = model  # then each field's annotation, as pydantic gives it
    for part in path:
        if isinstance(part, int):
            key += f"[{part}]"
            continue
        parent = _model_in(annotation)
        found = parent.model_fields.get(part) if parent else None
        if found is None and parent is None and not _has_dict(annotation):
            continue  # the name of a union member, like 'int' in `int | float`
        field, annotation = (found, found.annotation) if found else (field, None)
        key += f".{part}" if key else str(part)
    return key, field, parent


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The model class inside an annotation like `list[GpuOverride]` or `ClockSettings | "default" | None`."""
    if inspect.isclass(annotation) and issubclass(annotation, BaseModel):
        return annotation
    return next((m for m in map(_model_in, get_args(annotation)) if m is not None), None)


def _has_dict(annotation: Any) -> bool:
    return annotation is dict or get_origin(annotation) is dict or any(map(_has_dict, get_args(annotation)))


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def did_you_mean(name: str, known: list[str], cutoff: float = 0.6) -> str:
    """'did you mean X?' for a likely typo of one of `known` (any case), else ''. A character of `name` that is not
    ASCII is named, with where it is and what X has there: a lookalike (Cyrillic і for i) looks like no typo."""
    import unicodedata

    by_lower = {k.lower(): k for k in known}
    close = difflib.get_close_matches(name.lower(), list(by_lower), n=1, cutoff=cutoff)
    if not close:
        return ""
    suggestion = by_lower[close[0]]
    if name.isascii():
        return f"did you mean {suggestion!r}?"

    def folded(text: str) -> list[str]:  # one character for one: positions stay those of the text
        return [c.lower() if len(c.lower()) == 1 else c for c in text]

    differs = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, folded(name), folded(suggestion),
                                                       autojunk=False).get_opcodes():
        for i in range(i1, i2) if tag != "equal" else ():
            if not name[i].isascii():
                there = suggestion[j1 + i - i1] if i2 - i1 == j2 - j1 else suggestion[j1:j2]
                character = f"U+{ord(name[i]):04X} {unicodedata.name(name[i], '')}".rstrip()
                differs.append(f"{character} at position {i + 1}, " + (f"not {there!r}" if there else
                                                                       f"not in {suggestion!r}"))
    return f"did you mean {suggestion!r}?" + (f" ({name!r} has {'; '.join(differs)})" if differs else "")
