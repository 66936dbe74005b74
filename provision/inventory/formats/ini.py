"""The INI inventory, as Ansible reads it (its `ini` inventory plugin), into the document shape the YAML reader
gives (all: {hosts, children, vars}), so that one builder (build.py) makes hosts of both.

    loose-host                           # before any section: in the group "ungrouped"
    [gpu]                                # hosts of the group gpu
    node[01:04] ansible_user=ubuntu      # a range (zero-padded as written), then host variables
    blade[a:c]:2222                      # letters; :PORT is ansible_port
    odd[1:9:4]                           # a stride: odd1 odd5 odd9
    [gpu:vars]                           # variables of the group
    gpu={'power_limit': 200}
    [cluster:children]                   # groups in the group
    gpu

Values are typed as Ansible types them: a Python literal where the text is one (5, 1.5, True, [1, 2],
{'a': 1}, 'quoted'), else the text itself ("yes" stays a string: INI has no YAML booleans). Host lines are
split as a shell splits them (quotes group words; # starts a comment). The differential test
(tests/unit/inventory/test_inventory_ini.py) holds this against `ansible-inventory --list`.

Where provision differs on purpose: the ranges of one file may name at most MAX_RANGE_HOSTS hosts in all, counted
before any is made (Ansible makes every name `n[0000000:9999999]` asks for, for minutes and gigabytes).
"""

from __future__ import annotations

import ast
import itertools
import math
import re
import shlex
import string
import warnings
from pathlib import Path
from typing import Any, Iterable

from provision.core.errors import InputError, Problem
from provision.core.localfiles import read_text

SECTION = re.compile(r"^\[([^:\]\s]+)(?::(\w+))?\]\s*(?:[#;].*)?$")
HOST_AND_PORT = re.compile(r"^((?:[^:\[\]]|\[[^\]]*\])+)(?::(\d+))?$")  # a range's colons are inside brackets
RANGE = re.compile(r"\[([^\]]*)\]")
BRACKETED = re.compile(r"^\[([0-9A-Fa-f:.]+)\](?::(\d+))?$")  # [2001:db8::5]:2222, or a range: [1:9:2]
YAML_FILES = "YAML is read from a file named .yml, .yaml or .json, or without extension"  # as Ansible's yaml plugin
MAX_RANGE_HOSTS = 100_000  # the hosts one file's ranges may name, all lines together: loaded in about 7 s


class IniError(ValueError):
    """A line this reader cannot take: its number and why."""

    def __init__(self, line: int, message: str, hint: str = ""):
        super().__init__(message)
        self.line, self.message, self.hint = line, message, hint


def read(path: str | Path) -> dict[str, Any]:
    """The document of an INI inventory file; InputError naming the line for anything Ansible would refuse."""
    return parse_file(read_text(path, "inventory"), str(path))


def parse_file(text: str, file: str) -> dict[str, Any]:
    """The document of an INI inventory's text; InputError naming `file` and the line."""
    try:
        return parse(text)
    except IniError as exc:
        raise InputError([Problem(file, f"line {exc.line}" if exc.line else "", "", exc.message, exc.hint)]) from None


def parse(text: str) -> dict[str, Any]:
    groups = _Groups()
    current, kind = "ungrouped", "hosts"
    ranged = 0  # the hosts the ranges above named
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        header = SECTION.match(line)
        if header or line.startswith("[") and not BRACKETED.match(line.split()[0]):  # [2001:db8::5]:22 is a host
            if header is None:
                raise IniError(number, f"invalid section header: {line}", "[group], [group:vars] or [group:children]")
            current, kind = header.group(1), header.group(2) or "hosts"
            if kind not in ("hosts", "vars", "children"):
                raise IniError(number, f"invalid section type {kind!r} in {line}", "[group:vars] or [group:children]")
            groups.section(current, kind, number)
        elif kind == "hosts":
            found = host_line(line, number, MAX_RANGE_HOSTS - ranged)
            ranged += len(found) if RANGE.search(line) else 0
            for name, variables in found:
                groups.body(current).setdefault("hosts", {}).setdefault(name, {}).update(variables)
        elif kind == "vars":
            key, value = variable_line(line, number)
            groups.body(current).setdefault("vars", {})[key] = value
        else:
            words = line.split()  # never empty: blank lines were skipped
            if len(words) > 1 and not words[1].startswith(("#", ";")):
                raise IniError(number, f"a [{current}:children] line names one group: {line}")
            groups.child(current, words[0], number)
    return groups.document()


class _Groups:
    """The groups of one INI file and their children, each child added to its parent when Ansible's ini plugin
    adds it: at the [parent:children] line if the child's own section came before, else ("pending") once its
    [child] or [child:children] section comes (a [child:vars] section does not count). So a parent's children are
    in the order their sections appear, not the order of the list, and `group[0]` and --graph follow that.
    A group that only a [parent:children] line or a [group:vars] section names is an error, as in Ansible."""

    def __init__(self) -> None:
        self.groups: dict[str, dict[str, Any]] = {}  # name -> {"hosts": {...}, "vars": {...}, "children": {...}}
        self.defined = {"all", "ungrouped"}  # the groups Ansible's inventory holds: these two from the start
        self.pending: dict[str, tuple[str, int, list[str]]] = {}  # group -> (section kind, line, parents waiting)

    def body(self, name: str) -> dict[str, Any]:
        return self.groups.setdefault(name, {})

    def section(self, name: str, kind: str, number: int) -> None:
        self.body(name)
        if name not in self.defined:
            if kind == "vars" and name not in self.pending:
                self.pending[name] = ("vars", number, [])
            self.defined.add(name)
        if name in self.pending and kind != "vars":
            if self.pending[name][0] == "children":
                self._adopt(name)
            else:
                del self.pending[name]

    def child(self, parent: str, child: str, number: int) -> None:
        if child in self.defined:
            self._add(parent, child)
        elif child in self.pending:
            self.pending[child][2].append(parent)
        else:
            self.pending[child] = ("children", number, [parent])

    def _adopt(self, name: str) -> None:
        """The parents that waited for `name` take it, in the order they named it (_add_pending_children; its
        step to a parent still pending never runs: a parent's own [parent:children] header has defined it)."""
        for parent in self.pending.pop(name)[2]:
            self._add(parent, name)

    def _add(self, parent: str, child: str) -> None:
        self.body(parent).setdefault("children", {})[child] = None  # a reference: its own section says the rest

    def document(self) -> dict[str, Any]:
        for name, (kind, number, parents) in self.pending.items():
            if kind == "vars":
                raise IniError(number, f"[{name}:vars] is for a group that no section defines",
                               f"add a [{name}] section with its hosts (or [{name}:children]), as Ansible requires")
            raise IniError(number, f"[{parents[-1]}:children] names the group {name!r}, which no section defines",
                           f"add a [{name}] section with its hosts (or [{name}:children]), as Ansible requires")
        # Flat, in the order the groups' sections first appear: the builder makes a group with no parent a child of
        # all once every source is read, as Ansible does, in that order, and finds groups that contain each other.
        groups = self.groups
        return {"all": groups.pop("all", {}), **groups}


def host_line(line: str, number: int, most: int = MAX_RANGE_HOSTS) -> list[tuple[str, dict[str, Any]]]:
    """The hosts a line names (its range expanded, to at most `most` hosts) and their variables (ansible_port
    from NAME:PORT)."""
    try:
        words = shlex.split(line, comments=True)
    except ValueError as exc:
        raise IniError(number, f"cannot split the line: {exc}", "close the quote") from None
    if not words:
        return []
    pattern, assignments = words[0], words[1:]
    variables: dict[str, Any] = {}
    for word in assignments:
        key, equals, value = word.partition("=")
        if not equals or not key:
            raise IniError(number, f"expected key=value host variables, found {word!r}",
                           "each variable on a host line is NAME=VALUE")
        variables[key] = typed(value)
    if pattern.endswith(":"):  # Ansible's ini plugin: the colon is kept for a port
        raise IniError(number, f"cannot read the host {pattern!r}", f"NAME, NAME:PORT, or a range: node[01:04]; {YAML_FILES}")
    names, port = host_pattern(pattern, number, most)
    if "---" in names:
        raise IniError(number, "'---' is not a host: it starts a YAML document", YAML_FILES)
    if port is not None:  # NAME:PORT first: an ansible_port= on the same line overrides it, as in Ansible
        variables = {"ansible_port": port, **variables}
    return [(host, dict(variables)) for host in names]


def host_pattern(pattern: str, number: int, most: int = MAX_RANGE_HOSTS) -> tuple[list[str], int | None]:
    """The hosts one host pattern names, its ranges expanded (to at most `most` hosts), and the port written after
    it (NAME:PORT), as both Ansible's yaml plugin (a key under hosts:) and its ini plugin (a host line's first
    word) read one (_expand_hostpattern). A pattern that is not NAME[:PORT] is a name as written, as there."""
    address = BRACKETED.match(pattern)
    if address and ("::" in address[1] or address[1].count(":") == 7):  # IPv6, as parse_address: a range has neither
        return [address[1]], int(address[2]) if address[2] is not None else None
    found = HOST_AND_PORT.match(pattern)
    name, port = found.groups() if found else (pattern, None)
    return expand(name, number, most), int(port) if port is not None else None


def variable_line(line: str, number: int) -> tuple[str, Any]:
    key, equals, value = line.partition("=")
    if not equals or not key.strip():
        raise IniError(number, f"expected key=value, found {line!r}", "a [group:vars] line is NAME=VALUE")
    return key.strip(), typed(value.strip())


def typed(value: str) -> Any:
    """A Python literal where the text is one, else the text (as Ansible's INI reader types values)."""
    try:
        with warnings.catch_warnings():  # "invalid escape sequence" and the like: the text is kept as written
            warnings.simplefilter("ignore")
            return ast.literal_eval(value)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return value


def expand(pattern: str, number: int, most: int = MAX_RANGE_HOSTS) -> list[str]:
    """node[01:03] -> node01 node02 node03; [a:c] letters; [1:9:4] a stride; several ranges multiply. IniError
    where they would make more than `most` hosts, counted before any is made."""
    parts = [_range(match.group(1), number) for match in RANGE.finditer(pattern)]
    count = math.prod(count for count, _ in parts)
    if count > most:
        said = "" if most == MAX_RANGE_HOSTS else f", and this file's ranges above name {MAX_RANGE_HOSTS - most:,}"
        raise IniError(number, f"{pattern!r} expands to {count:,} hosts{said}: more than {MAX_RANGE_HOSTS:,} "
                       "(provision's limit)", "check the range's bounds: node[001:128] is 128 hosts")
    if count == 0:  # an empty range: the others are not made either
        return []
    texts = RANGE.split(pattern)[::2]  # the text around the ranges: one more than the ranges
    return ["".join(itertools.chain.from_iterable(zip(texts, (*middles, ""))))
            for middles in itertools.product(*(middles for _, middles in parts))]


def _range(inside: str, number: int) -> tuple[int, Iterable[str]]:
    """How many middles one range stands for, and the middles, made only when asked for."""
    bounds = inside.split(":")
    if len(bounds) not in (2, 3):
        raise IniError(number, f"a host range is [BEGIN:END] or [BEGIN:END:STEP], found [{inside}]")
    begin, end = bounds[0] or "0", bounds[1]
    step = bounds[2] if len(bounds) == 3 else "1"
    if not end:
        raise IniError(number, f"a host range needs its end: [{inside}]")
    try:
        if not step.isdigit() or int(step) < 1:
            raise IniError(number, f"a host range's step is a whole number > 0, found {step!r}")
        if begin in string.ascii_letters and end in string.ascii_letters:
            first, last = string.ascii_letters.index(begin), string.ascii_letters.index(end)
            if first > last:
                raise IniError(number, f"a host range runs from low to high, found [{inside}]")
            letters = string.ascii_letters[first:last + 1:int(step)]
            return len(letters), letters
        if begin.isdigit() and end.isdigit():
            width = len(begin) if begin.startswith("0") and len(begin) > 1 else 0
            if width and len(end) != width:
                raise IniError(number, f"a zero-padded range has the same width at both ends, found [{inside}]")
            low, high, stride = int(begin), int(end), int(step)
            numbers = range(low, high + 1, stride)  # its len() is an overflow past 2**63: counted here
            return max(0, (high - low) // stride + 1), (str(i).zfill(width) for i in numbers)
    except IniError:
        raise
    except ValueError:  # int() of more than 4300 digits (sys.get_int_max_str_digits)
        raise IniError(number, f"a host range's number has more than 4,300 digits: [{inside[:40]}...]") from None
    raise IniError(number, f"a host range is of numbers or of single letters, found [{inside}]")
