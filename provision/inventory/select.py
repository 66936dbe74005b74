"""--limit: Ansible's host patterns over an inventory, read as ansible-core reads them.

    a,b  a:b          either (colons separate only where there is no comma, and not in fe80::1, host:22, x[1:3])
    a:&b  a:!b        and also in b / but not in b (plain patterns first, then each &, then each !;
                      with only & and ! patterns, from all hosts)
    web*  h?  ~re     fnmatch globs, or a regular expression matched at the start of the name (re.match)
    g[0] g[-1] g[1:3] g[1:]   hosts of what the pattern matches, by index (in Ansible's order, end included)
    @file             one pattern a line (an Ansible .retry file)
    all  *            every host

Each pattern matches group names (all of a group's hosts, its children's included) and host names. The oracle is
ansible-core itself, run as a subprocess by the tests (never imported: it is GPL). Where Ansible only warns that a
pattern matches nothing, provision refuses: a typo should not quietly change which machines are touched.

Provision also refuses what Ansible reads as a wider set than was written, each time the same reason: a limit
that went wrong (an unset shell variable, a bracket lost) must not become every host.
    ~[  a:b]          Ansible's splitting skips an unclosed [ or a stray ] where colons separate: '~[' became
                      '~' (every host), '~n2|[' '~n2|' (every host). Every character of the limit is accounted
                      for here: what is not a pattern nor a separator (colons, whitespace) is refused.
    ~  !~  &~         no regular expression after ~: it matches every name (what `--limit "~$PAT"` gives
                      when PAT is empty). Every host is `all`.
    ''  ,  :  ' '     an empty limit, or one of separators only: no pattern, which Ansible reads as no limit
                      (every host; `--limit "$HOSTS"` with HOSTS unset). Leaving out --limit is every host.
    @FILE (empty)     a limit file with no pattern in it (an empty .retry file: nothing failed) is no limit to
                      Ansible, so `--limit @site.retry` would rerun every host.
A regular expression is checked by Python's re (Ansible's engine: what it refuses, provision refuses), then
matched by the `regex` module in its re-compatible mode (VERSION0), which takes a time bound (re has none): a
pattern that backtracks without end ((a|aa)+$ against aaa...b) is refused after REGEX_SECONDS, not left to hang
the run. (Only what regex reads beyond re, [[:alpha:]] or a{e<=1}, would match otherwise than in Ansible.)"""

from __future__ import annotations

import fnmatch
import os
import re
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from provision.core.errors import InputError, Problem
from provision.core.localfiles import read_text
from provision.core.settings import did_you_mean

if TYPE_CHECKING:
    from provision.inventory.model import Host, Inventory

LOCALHOST = ("localhost", "127.0.0.1", "::1")  # Ansible makes these up when absent; --local is provision's way
_HOST_CHARS = ".?*["  # a pattern with these matches host names even where it matched a group (as in Ansible)

# Where there is no comma: runs of anything but whitespace, colons and brackets, or whole [..] expressions.
_COLON_SEPARATED = re.compile(r"(?:[^\s:\[\]]|\[[^\]]*\])+")
# A subscript at the end: [i] (i may be negative), [i:j], [i:] (and the old [i-j] that Ansible still applies).
_SUBSCRIPT = re.compile(r"(?P<expr>.+)\[(?:(?P<index>-?[0-9]+)|(?P<first>[0-9]+)[:-](?P<last>[0-9]*))\]")
# What Ansible accepts inside a host name as a range: [1:3], [a:c], with an optional :step.
_RANGE = r"\[(?:[0-9]+:[0-9]+|[a-z]:[a-z])(?::[0-9]+)?\]"
_LABEL = re.compile(rf"(?:\w|{_RANGE})(?:[\w-]|{_RANGE})*", re.IGNORECASE)
_IPV6_PART = r"(?:[0-9a-f]{1,4}|\[[0-9a-f]+:[0-9a-f]+(?::[0-9]+)?\])"
_IPV6_PARTS = re.compile(_IPV6_PART, re.IGNORECASE)
_IPV6_FULL = re.compile(rf"{_IPV6_PART}(?::{_IPV6_PART}){{7}}", re.IGNORECASE)
_IPV6_SHORT = re.compile(rf"(?P<head>{_IPV6_PART}(?::{_IPV6_PART})*)?::(?P<tail>{_IPV6_PART}(?::{_IPV6_PART})*)?",
                         re.IGNORECASE)
# The IPv4-in-IPv6 spellings Ansible knows (::1.2.3.4, ::ffff:1.2.3.4, 0:0:0:0:0:0:1.2.3.4, 0:0:0:0:0:ffff:1.2.3.4).
_IPV6_V4 = re.compile(rf"(?:::(?:ffff:)?|(?:0:){{6}}|(?:0:){{5}}ffff:){_IPV6_PART}(?:\.{_IPV6_PART}){{3}}",
                      re.IGNORECASE)
_BRACKETED_PORT = re.compile(r"\[(.+)\]:[0-9]+")
_PORT = re.compile(r"((?:[^:\[\]]|\[[^\]]*\])*):[0-9]+")

Subscript = tuple[int, int | None]  # first, last (None: only the host at first; -1: to the end)
REGEX_SECONDS = 1.0  # for one ~regex over every group and host name together (10,000 names: 0.07 s)
BRACKET_HINT = ("close it: gpu[0], n[1:3], ~n[12]; "
                "a pattern between commas keeps its brackets and colons as written (~n],db)")


class LimitError(ValueError):
    """A limit that cannot be read as patterns: what is wrong (naming the limit), and what to write instead."""

    def __init__(self, message: str, hint: str):
        super().__init__(message)
        self.hint = hint


def select(inventory: Inventory, limit: str | None) -> list[Host]:
    """The hosts `limit` chooses, in file order (all of them for None: no --limit)."""
    if limit is None:
        return list(inventory.hosts.values())
    if not limit.strip():  # Ansible reads it as no limit: every host, where `--limit "$HOSTS"` met an unset variable
        raise _error(inventory, f"{limit!r} names no host", "leave out --limit to select every host, or write all")
    try:
        patterns = _read_files(inventory, split_patterns(limit))
    except LimitError as e:
        raise _error(inventory, str(e), e.hint) from None
    if not patterns:  # Ansible: no pattern, no limit; but something was written, and it was not `all`
        raise _error(inventory, f"{limit!r} holds no pattern, only separators",
                     "leave out --limit to select every host, or write all")
    chosen: set[str] = set()
    for pattern in _in_ansible_order(patterns):
        if pattern[0] == "&":
            chosen &= _matching(inventory, pattern[1:], limit)
        elif pattern[0] == "!":
            chosen -= _matching(inventory, pattern[1:], limit)
        else:  # a host's own name is that host, whatever it would match as a pattern
            chosen |= {pattern} if pattern in inventory.hosts else _matching(inventory, pattern, limit)
    if not chosen:
        raise _error(inventory, f"{limit!r} selects no host", _known_names(inventory))
    return [h for name, h in inventory.hosts.items() if name in chosen]


# --- reading the limit ---

def split_patterns(limit: str) -> list[str]:
    """The patterns of a limit: split at commas, else at colons and whitespace unless it is one address.
    LimitError where a bracket is left open or closes none."""
    if "," in limit:
        parts = limit.split(",")
    elif _is_address(limit):
        parts = [limit]
    else:
        parts = _colon_separated(limit)
    return [p.strip() for p in parts if p.strip()]


def _colon_separated(limit: str) -> list[str]:
    """Ansible's findall, every character accounted for: between the patterns only separators (colons and
    whitespace). findall skips an unclosed [ or a stray ] too, and the pattern left is wider than the one written."""
    parts, end = [], 0
    for m in _COLON_SEPARATED.finditer(limit):
        _only_separators(limit, end, m.start())
        parts.append(m.group())
        end = m.end()
    _only_separators(limit, end, len(limit))
    return parts


def _only_separators(limit: str, start: int, end: int) -> None:
    for i in range(start, end):  # the pattern expression takes everything but whitespace, colons and brackets
        if limit[i] == "[":
            raise LimitError(f"{limit!r}: the '[' at position {i + 1} is not closed", BRACKET_HINT)
        if limit[i] == "]":
            raise LimitError(f"{limit!r}: the ']' at position {i + 1} closes no '['", BRACKET_HINT)


def _is_address(text: str) -> bool:
    """A host name, IPv4 or IPv6 address (ranges allowed), with or without a port: its colons are its own."""
    for port in (_BRACKETED_PORT, _PORT):  # [addr]:22 then host:22, each in turn, as Ansible strips them
        if m := port.fullmatch(text):
            text = m.group(1)
    return _is_hostname(text) or _is_ipv6(text)


def _is_hostname(text: str) -> bool:
    # ranges hold no dot, so the labels are the dot-separated parts; none may end in - or _
    return all(_LABEL.fullmatch(label) and not label.endswith(("-", "_")) for label in text.split("."))


def _is_ipv6(text: str) -> bool:
    if _IPV6_FULL.fullmatch(text) or _IPV6_V4.fullmatch(text):
        return True
    if not (m := _IPV6_SHORT.fullmatch(text)):
        return False
    head, tail = (len(_IPV6_PARTS.findall(m.group(side) or "")) for side in ("head", "tail"))
    return head <= 6 and tail <= 6 and head + tail <= 7  # "::" stands for at least one part


def _read_files(inventory: Inventory, patterns: list[str]) -> list[str]:
    """@FILE: its lines are patterns (not split further), as in an Ansible .retry file."""
    read: list[str] = []
    for pattern in patterns:
        if pattern[0] != "@":
            read.append(pattern)
        elif not (lines := _limit_file(inventory, pattern[1:])):  # Ansible reads it as no limit: every host
            raise LimitError(f"limit file {pattern[1:]!r} holds no pattern (it is empty, or blank lines only)",
                             "an empty .retry file means nothing failed: there is nothing to run again; leave "
                             "out --limit to select every host")
        else:
            read += lines
    return read


def _limit_file(inventory: Inventory, path: str) -> list[str]:
    hint = "@FILE names a file of host patterns, one a line (e.g. an Ansible .retry file), from the current directory"
    if not os.path.exists(path):
        raise _error(inventory, f"limit file {path!r} not found", hint)
    if not os.path.isfile(path):
        raise _error(inventory, f"limit file {path!r} is not a file", hint)
    try:  # a regular file (isfile: a FIFO is not one), of at most files.MAX_FILE_BYTES
        lines = read_text(path, "limit file").split("\n")
    except InputError as e:
        raise _error(inventory, f"limit file {path!r} cannot be read: {e.problems[0].message}", hint) from None
    return [line.strip() for line in lines if line.strip()]


def _in_ansible_order(patterns: list[str]) -> list[str]:
    """Plain patterns (united), then each &, then each !, wherever written; only & and ! start from all."""
    plain = [p for p in patterns if p[0] not in "&!"] or ["all"]
    return plain + [p for p in patterns if p[0] == "&"] + [p for p in patterns if p[0] == "!"]


# --- matching one pattern ---

def _matching(inventory: Inventory, pattern: str, limit: str) -> set[str]:
    if not pattern:
        raise _error(inventory, f"{limit!r} has a lone & or !", "write &NAME or !NAME, e.g. gpu:!v100")
    if pattern == "~":
        raise _error(inventory, f"{limit!r}: a ~ with no regular expression after it matches every name",
                     "write all for every host; after ~ comes a regular expression (~gpu[0-9]+)")
    expr, subscript = _split_subscript(pattern)
    found, any_group = _enumerate(inventory, expr)
    if not found and not any_group:  # a group with no hosts is a match: Ansible says nothing either
        raise _error(inventory, f"{pattern!r} matches no host or group", _hint(inventory, pattern, limit))
    try:
        return set(_pick(found, subscript))
    except IndexError:
        raise _error(inventory, f"{pattern!r}: {expr!r} has {len(found)} hosts, none at that index",
                     f"the first is {expr}[0], the last {expr}[-1]") from None


def _split_subscript(pattern: str) -> tuple[str, Subscript | None]:
    m = _SUBSCRIPT.fullmatch(pattern)
    if pattern[0] == "~" or not m:  # a regex's brackets are its own
        return pattern, None
    if m["index"] is not None:
        return m["expr"], (int(m["index"]), None)
    return m["expr"], (int(m["first"]), int(m["last"]) if m["last"] else -1)


def _pick(hosts: list[str], subscript: Subscript | None) -> list[str]:
    """hosts[first], or hosts first..last with last included; Ansible reads a last of 0 as none ([2:0] is [2])."""
    if not hosts or subscript is None:
        return hosts
    first, last = subscript
    if not last:
        return [hosts[first]]
    return hosts[first:] if last == -1 else hosts[first:last + 1]


def _enumerate(inventory: Inventory, expr: str) -> tuple[list[str], bool]:
    """Hosts of the groups the expression matches, then hosts it matches by name, in Ansible's order and
    with Ansible's repeats (a subscript counts them); and whether any group matched."""
    matches = _matcher(inventory, expr)
    groups = [g for g in _group_names(inventory) if matches(g)]
    found = [h for g in groups for h in _group_hosts(inventory, g)]
    if not groups or expr[0] == "~" or any(c in expr for c in _HOST_CHARS):
        found += [h for h in inventory.hosts if matches(h)]
    return found, bool(groups)


def _matcher(inventory: Inventory, expr: str) -> Callable[[str], bool]:
    if expr[0] != "~":
        return lambda name: fnmatch.fnmatchcase(name, expr)
    import regex  # only for a ~regex: the other commands and limits do not pay for its import

    hint = "after ~ comes a Python regular expression, matched at the start of each name"
    try:
        re.compile(expr[1:])  # what Ansible's engine refuses, refused
        bounded = regex.compile(expr[1:], regex.VERSION0)  # VERSION0: re's behaviour
    except (re.error, regex.error) as e:
        raise _error(inventory, f"{expr!r} is not a valid regular expression: {e}", hint) from None
    deadline = time.monotonic() + REGEX_SECONDS  # for every name together

    def matches(name: str) -> bool:
        try:
            left = deadline - time.monotonic()
            if left <= 0:  # regex takes no timeout of 0
                raise TimeoutError
            return bounded.match(name, timeout=left) is not None
        except TimeoutError:
            raise _error(inventory, f"{expr!r}: matching stopped at its bound of {REGEX_SECONDS:g} s: the expression "
                         "backtracks without end",
                         "a repeat inside a repeat, (a+)+ or (a|aa)+, tries every way to split a name: write it "
                         "once (a+), or use a glob (gpu*)") from None
    return matches


# --- groups as Ansible orders them ---

def _group_names(inventory: Inventory) -> list[str]:
    return ["all", "ungrouped", *(g for g in inventory.groups if g not in ("all", "ungrouped"))]


def _children(inventory: Inventory, group: str) -> list[str]:
    if group == "ungrouped":
        return []
    children = inventory.groups[group].children
    return ["ungrouped", *(c for c in children if c != "ungrouped")] if group == "all" else children


def _own_hosts(inventory: Inventory, group: str) -> list[str]:
    if group == "ungrouped":  # Ansible's: hosts in no group but all (and ungrouped, where written)
        return [name for name, h in inventory.hosts.items() if set(h.groups) <= {"all", "ungrouped"}]
    return inventory.groups[group].hosts


def _group_hosts(inventory: Inventory, group: str) -> list[str]:
    """A group's hosts in Ansible's order, which its subscripts index: its own, then its children's, then
    theirs, level by level, each host once. (Within a level below the children Ansible's order follows a set
    and may change between runs; here it follows the parents' order.)"""
    hosts: dict[str, None] = {}
    level, seen = [group], {group}
    while level:
        below = []
        for g in level:
            hosts.update(dict.fromkeys(_own_hosts(inventory, g)))
            below += [c for c in _children(inventory, g) if c not in seen]
            seen.update(below)
        level = below
    return list(hosts)


# --- errors ---

def _error(inventory: Inventory, message: str, hint: str) -> InputError:
    return InputError([Problem(inventory.path, "", "limit", message, hint)])


def _hint(inventory: Inventory, pattern: str, limit: str) -> str:
    if "[:" in pattern:
        return "Ansible reads [:N] as a glob's set of characters, not a subscript: the first two hosts are [0:1]"
    if ":" in pattern:  # kept whole: after a comma, or the whole limit read as one address (NAME:PORT)
        return "colons separate patterns only in a limit that has no commas and is not one address like " \
               "host:22; write commas (a,!b,&c)"
    if pattern in LOCALHOST:
        return "to run on this machine, use --local"
    hint = did_you_mean(pattern, [*inventory.hosts, *inventory.groups]) or _known_names(inventory)
    if ":" in limit and any(":" in name for name in inventory.hosts):
        hint += "; a limit without commas is split at colons: write commas to keep a name like fe80::1 whole"
    return hint


def _known_names(inventory: Inventory) -> str:
    def first(names):
        names = list(names)
        return ", ".join(names[:20]) + (f" (+{len(names) - 20} more)" if len(names) > 20 else "")
    return f"groups: {first(inventory.groups)}; hosts: {first(inventory.hosts)}"
