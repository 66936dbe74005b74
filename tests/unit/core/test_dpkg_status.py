"""core/dpkg.py's awk read of dpkg's status database against dpkg-query's own answer (the oracle)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from provision.core import dpkg
from provision.core.facts import parse_held, parse_packages

pytestmark = pytest.mark.skipif(not shutil.which("dpkg-query"), reason="needs dpkg-query, the oracle")

FORMAT = "X ${Package} ${Version} ${db:Status-Abbrev}\n"

MADE_UP = """\
Package: nvidia-driver-580
Status: install ok installed
Architecture: amd64
Maintainer: Ubuntu Developers <ubuntu-devel-discuss@lists.ubuntu.com>
Version: 580.173.02-0ubuntu1
Description: held back? no

Package: nvidia-utils-580
Status: hold ok installed
Architecture: amd64
Maintainer: Ubuntu Developers <ubuntu-devel-discuss@lists.ubuntu.com>
Version: 580.173.02-0ubuntu1
Description: held

Package: nvidia-driver-570
Status: deinstall ok config-files
Architecture: amd64
Maintainer: Ubuntu Developers <ubuntu-devel-discuss@lists.ubuntu.com>
Version: 570.86.15-0ubuntu1
Config-Version: 570.86.15-0ubuntu1
Description: removed, its configuration left

Package: nvidia-kernel-common-580
Status: install reinstreq half-installed
Architecture: amd64
Maintainer: Ubuntu Developers <ubuntu-devel-discuss@lists.ubuntu.com>
Version: 580.173.02-0ubuntu1
Description: broken half way

Package: libnvidia-compute-580
Status: install ok unpacked
Architecture: i386
Maintainer: Ubuntu Developers <ubuntu-devel-discuss@lists.ubuntu.com>
Multi-Arch: same
Version: 580.173.02-0ubuntu1
Description: unpacked, another architecture

Package: libnvidia-compute-580
Status: install ok installed
Architecture: amd64
Maintainer: Ubuntu Developers <ubuntu-devel-discuss@lists.ubuntu.com>
Multi-Arch: same
Version: 580.173.02-0ubuntu1
Description: the same name, two architectures

Package: slurmd
Status: purge ok not-installed
Architecture: amd64
Maintainer: Ubuntu Developers <ubuntu-devel-discuss@lists.ubuntu.com>
Description: gone
"""


def lines(text: str) -> set[tuple[str, ...]]:
    """Each line as (name, version, want+status), leaving out what dpkg knows only as a name (status "n":
    virtual packages dpkg-query lists and the status file has no entry for); parsers read none of them."""
    found = set()
    for line in text.splitlines():
        words = line.split(" ")
        name, version, abbrev = words[1], words[2], (words[3] if len(words) > 3 else "")
        if abbrev[1:2] != "n":
            found.add((name, version, abbrev[:2]))
    return found


def both(patterns: list[str], admindir: str = dpkg.ADMINDIR) -> tuple[set, set]:
    ours = subprocess.run(["sh", "-c", dpkg.status_snippet(patterns, "X ", admindir)], capture_output=True,
                          text=True, check=True).stdout
    theirs = subprocess.run(["dpkg-query", f"--admindir={admindir}", "-W", f"--showformat={FORMAT}", *patterns],
                            capture_output=True, text=True).stdout
    return lines(ours), lines(theirs)


@pytest.mark.parametrize("patterns", [["*"], ["lib*", "python3*", "g++*", "dpkg"], ["no-such-package"]])
def test_it_says_what_dpkg_query_says_of_this_machine(patterns):
    ours, theirs = both(patterns)
    assert ours == theirs


@pytest.fixture
def admindir(tmp_path):
    (tmp_path / "updates").mkdir()
    (tmp_path / "info").mkdir()
    (tmp_path / "status").write_text(MADE_UP)
    return tmp_path


def test_held_removed_broken_and_multiarch_packages_read_as_dpkg_query_reads_them(admindir):
    ours, theirs = both(["nvidia-*", "libnvidia-*", "slurmd"], str(admindir))
    assert ours == theirs and ("nvidia-utils-580", "580.173.02-0ubuntu1", "hi") in ours


def test_an_interrupted_dpkg_run_is_left_to_dpkg_query(admindir):
    # dpkg's journal: an entry there supersedes the status file's (here: the driver removed).
    (admindir / "updates" / "0000").write_text(
        "Package: nvidia-driver-580\nStatus: deinstall ok config-files\nArchitecture: amd64\n"
        "Maintainer: Ubuntu Developers <ubuntu-devel-discuss@lists.ubuntu.com>\nVersion: 580.173.02-0ubuntu1\n")
    ours, theirs = both(["nvidia-driver-580"], str(admindir))
    assert ours == theirs == {("nvidia-driver-580", "580.173.02-0ubuntu1", "rc")}


def test_the_packages_section_feeds_its_parsers(admindir):
    names = ["nvidia-utils-580", "slurmd", "munge"]
    snippet = f"echo asked {' '.join(names)}; {dpkg.status_snippet(names, admindir=str(admindir))}"
    out = subprocess.run(["sh", "-c", snippet], capture_output=True, text=True).stdout
    assert parse_packages(out) == {"nvidia-utils-580": "580.173.02-0ubuntu1", "slurmd": None, "munge": None}
    assert parse_held(out) == ["nvidia-utils-580"]


def test_a_name_that_is_no_package_name_is_asked_of_dpkg_query_quoted():
    snippet = dpkg.status_snippet(["x'; touch /tmp/pwned-by-dpkg; '"])
    assert "awk" not in snippet and "'x'\"'\"'; touch" in snippet
