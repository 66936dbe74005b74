"""core/debversion.py against dpkg itself: `dpkg --compare-versions` on this machine is the oracle, for versions
hypothesis makes up and for real kernel, driver and package versions. Skipped where dpkg is not installed."""

from __future__ import annotations

import itertools
import shutil
import subprocess

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from provision.core import debversion

DPKG = shutil.which("dpkg")
needs_dpkg = pytest.mark.skipif(DPKG is None, reason="dpkg is not installed: no oracle to compare with")

# Real versions: Debian's and Ubuntu's kernel releases (/boot/vmlinuz-X), the NVIDIA driver and CUDA packages of
# tests/fixtures/real/h200-modes/stack.txt and NVIDIA's repositories, DCGM with its epoch, the toolkit, and the
# shapes dpkg's own ordering rules are about (~ before the end, letters before other characters).
REAL = [
    "6.1.0-40-amd64", "6.1.0-9-amd64", "6.1.0-18-cloud-amd64", "6.1.0-40-rt-amd64", "6.12.38+deb13-amd64",
    "6.8.0-45-generic", "6.8.0-100-generic", "6.8.0-45-lowlatency", "6.8.0-1015-nvidia", "6.5.0-1024-nvidia-64k",
    "5.15.0-122-generic", "6.5.0-060500rc5-generic", "6.5.0-060500-generic", "6.12.38-amd64", "6.18.44-fc-v657-gpu", "4.17.11-200.fc28.x86_64",
    "580.159.04-0ubuntu1", "580.95.05-0ubuntu1", "580.95.05-0ubuntu0.24.04.2", "570.195.03-0ubuntu0.22.04.1",
    "580.159.04-1", "535.274.02-0ubuntu1", "1:580.159.04-1", "1:4.2.3-1", "1:3.3.6", "1:4.2.3-2", "1:4.2.30-1",
    "1.17.8-1", "1.17.7-1", "1.17.8~rc.1-1", "1.18.0-1", "2.28.3-1+cuda13.0", "2.28.3-1+cuda12.9",
    "9.14.0.64-1", "13.0.85-1", "1.17.0-3build2", "1.0~rc1", "1.0", "1.0a", "1.0+b1", "1.0-1~bpo12+1", "0:1.0",
]


def dpkg_compare(left: str, right: str) -> int:
    """-1, 0 or 1 as dpkg says (two questions: lt, then eq)."""
    assert DPKG is not None
    for relation, answer in (("lt", -1), ("eq", 0)):
        if subprocess.run([DPKG, "--compare-versions", left, relation, right], check=False).returncode == 0:
            return answer
    return 1


# Versions dpkg takes without a warning: an upstream version that starts with a digit, from the characters it
# allows (hyphens only with a revision after them), an optional epoch and revision. A small alphabet makes equal
# runs and near misses common, which is where the rules differ.
_UPSTREAM_CHARS = st.sampled_from("0129ab.+~")
_REVISION_CHARS = st.sampled_from("019ab.+~")


@st.composite
def versions(draw: st.DrawFn) -> str:
    epoch = draw(st.sampled_from(["", "", "0:", "1:", "2:"]))
    upstream = draw(st.sampled_from("0159")) + draw(st.text(_UPSTREAM_CHARS, max_size=8))
    revision = draw(st.one_of(st.just(""), st.text(_REVISION_CHARS, min_size=1, max_size=5)))
    if revision:
        upstream += draw(st.sampled_from(["", "", "-1", "-a"]))  # a hyphen inside: the last one splits
        return f"{epoch}{upstream}-{revision}"
    return f"{epoch}{upstream}"


@needs_dpkg
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(versions(), versions())
@example("1.0~rc1", "1.0")
@example("1.0", "1.0~")
@example("1.0a", "1.0+")
@example("1.0", "1.0a")
@example("1:0.1", "9.9")
@example("1.001", "1.1")
@example("1.0-1", "1.0-1~")
@example("6.8.0-100-generic", "6.8.0-45-generic")
def test_compare_agrees_with_dpkg(left: str, right: str) -> None:
    assert debversion.compare(left, right) == dpkg_compare(left, right), (left, right)


@needs_dpkg
def test_real_versions_order_as_dpkg_orders_them() -> None:
    for left, right in itertools.combinations(REAL, 2):
        assert debversion.compare(left, right) == dpkg_compare(left, right), (left, right)


def test_the_rules_dpkg_documents() -> None:
    """deb-version(7)'s examples, without dpkg: ~ before everything, letters before the rest, numbers as numbers."""
    ordered = ["1.0~~", "1.0~~a", "1.0~", "1.0", "1.0a", "1.0+", "1.0+b1", "1.0.1", "1.1", "1.10", "1:0.1"]
    assert sorted(reversed(ordered), key=debversion.key) == ordered
    assert debversion.compare("1.001", "1.1") == 0
    assert debversion.compare("0:1.0", "1.0") == 0


def test_kernels_newest_by_release() -> None:
    """6.8.0-100 is after 6.8.0-45 (as numbers); -generic after -45's shorter release; Debian's ABI bumps."""
    assert debversion.newest(["6.8.0-45-generic", "6.8.0-100-generic", "6.8.0-9-generic"]) == "6.8.0-100-generic"
    assert debversion.newest(["6.1.0-9-amd64", "6.1.0-40-amd64", "6.1.0-18-amd64"]) == "6.1.0-40-amd64"
    assert debversion.newest([]) is None


@pytest.mark.parametrize(("version", "parts"), [
    ("580.159.04-0ubuntu1", (0, "580.159.04", "0ubuntu1")),
    ("1:4.2.3-1", (1, "4.2.3", "1")),
    ("1:3.3.6", (1, "3.3.6", "")),
    ("6.1.0-40-amd64", (0, "6.1.0-40", "amd64")),
    ("2.28.3-1+cuda13.0", (0, "2.28.3", "1+cuda13.0")),
    ("1.17.8", (0, "1.17.8", "")),
])
def test_parse_splits_as_dpkg(version: str, parts: tuple[int, str, str]) -> None:
    found = debversion.parse(version)
    assert (found.epoch, found.upstream, found.revision) == parts
    assert debversion.upstream(version) == parts[1]
