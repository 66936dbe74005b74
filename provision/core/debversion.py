"""Debian package versions compared as dpkg compares them (deb-version(7), dpkg's lib/dpkg/version.c).

A version is [epoch:]upstream[-revision]: the epoch is the digits before the first colon (0 when there is none),
the revision everything after the last hyphen ("" when there is none). Two versions compare by epoch as numbers,
then upstream, then revision, each of those two by the same rule: alternately a run of non-digits, compared
character by character where `~` sorts before everything (the end of the run included), letters before
non-letters, the rest by their code; then a run of digits, compared as a number (empty is 0). So 1.0~rc1 comes
before 1.0, 1.0 before 1.0a, 1.0a before 1.0+b1, 6.8.0-100 after 6.8.0-45, and 1:1.0 after 580.159.04.

Kernel releases (6.1.0-40-amd64, 6.8.0-45-generic) are ordered with it too: GRUB's 10_linux orders the
/boot/vmlinuz-* it finds by `dpkg --compare-versions` (version_find_latest in grub-mkconfig_lib), so the newest
release is the top menu entry.

Written here rather than imported: python-debian (debian.debian_support) and python-apt (apt_pkg) are GPL, and
provision is Apache-2.0. tests/unit/core/test_debversion.py holds this to `dpkg --compare-versions` itself.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

# Debian policy 5.6.12: an epoch is an unsigned integer; the upstream version starts with a digit (dpkg only
# warns otherwise, and compares it all the same).
EPOCH = re.compile(r"^(\d+):")


@dataclass(frozen=True)
class DebVersion:
    """A version's three parts: "1:4.2.3-1" is (1, "4.2.3", "1")."""

    epoch: int
    upstream: str
    revision: str


def parse(version: str) -> DebVersion:
    """A version's epoch, upstream version and Debian revision, split as dpkg splits them."""
    text = version.strip()
    match = EPOCH.match(text)
    epoch = int(match[1]) if match else 0
    rest = text[match.end():] if match else text
    upstream, hyphen, revision = rest.rpartition("-")
    return DebVersion(epoch, upstream, revision) if hyphen else DebVersion(epoch, rest, "")


def upstream(version: str) -> str:
    """580.159.04-0ubuntu0.22.04.1 -> 580.159.04, 1:4.2.3-1 -> 4.2.3: without the epoch and the Debian revision."""
    return parse(version).upstream


def _digit(char: str) -> bool:
    return "0" <= char <= "9"  # ASCII digits only, as dpkg's c_isdigit


def _order(char: str) -> int:
    """A character's weight in a non-digit run: `~` first (before the run's end, 0), then letters, then the rest."""
    if char == "~":
        return -1
    if char.isascii() and char.isalpha():
        return ord(char)
    return ord(char) + 256


def _compare_part(left: str, right: str) -> int:
    """-1, 0 or 1: an upstream version or a revision against another, as dpkg's verrevcmp."""
    i = j = 0
    while i < len(left) or j < len(right):
        # A run of non-digits, character by character; the end of a run weighs 0 (after `~`, before all else).
        while (i < len(left) and not _digit(left[i])) or (j < len(right) and not _digit(right[j])):
            a = _order(left[i]) if i < len(left) and not _digit(left[i]) else 0
            b = _order(right[j]) if j < len(right) and not _digit(right[j]) else 0
            if a != b:
                return -1 if a < b else 1
            i, j = i + 1, j + 1
        # A run of digits, as a number (leading zeros do not count; an empty run is 0).
        start_i, start_j = i, j
        while i < len(left) and _digit(left[i]):
            i += 1
        while j < len(right) and _digit(right[j]):
            j += 1
        a_num, b_num = int(left[start_i:i] or 0), int(right[start_j:j] or 0)
        if a_num != b_num:
            return -1 if a_num < b_num else 1
    return 0


def compare(left: str, right: str) -> int:
    """-1, 0 or 1 as LEFT sorts before, the same as, or after RIGHT (`dpkg --compare-versions LEFT lt|eq|gt RIGHT`)."""
    a, b = parse(left), parse(right)
    if a.epoch != b.epoch:
        return -1 if a.epoch < b.epoch else 1
    return _compare_part(a.upstream, b.upstream) or _compare_part(a.revision, b.revision)


key = functools.cmp_to_key(compare)
"""A sort key: sorted(versions, key=debversion.key), max(releases, key=debversion.key)."""


def newest(versions: list[str]) -> str | None:
    """The highest of these versions as dpkg orders them; None when there are none."""
    return max(versions, key=key) if versions else None
