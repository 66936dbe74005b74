"""--limit as Ansible reads it (select.py): hand cases, then the same and generated limits held against
`ansible all --list-hosts --limit LIMIT` itself (ansible-core, a test-only tool run as a subprocess, never
imported: it is GPL, provision is Apache-2.0). Where Ansible warns that a pattern matches nothing
(ANSIBLE_HOST_PATTERN_MISMATCH=error makes it refuse), provision refuses too."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from provision.core.errors import InputError
from provision.inventory.load import load_inventory
from provision.inventory.model import Inventory
from provision.inventory.select import select, split_patterns

ANSIBLE = shutil.which("ansible", path=str(Path(sys.executable).parent)) or shutil.which("ansible")
needs_ansible = pytest.mark.skipif(ANSIBLE is None, reason="ansible not installed (pip install '.[test]' installs it)")

# Ansible's order of gpu's hosts: its own, then v100's, then a100's (g2 once): g1 g2 fe80::1 v1 v2 a1.
# Of all's: gpu's own, slurm's, spare's (none), then v100's and a100's: g1 g2 fe80::1 head 10.0.0.1 v1 v2 a1.
CLUSTER = """
    all:
      children:
        gpu:
          hosts: {g1: , g2: , "fe80::1": }
          children:
            v100:
              hosts: {v1: , v2: , g2: }
            a100:
              hosts: {a1: }
        slurm:
          hosts: {g2: , head: , "10.0.0.1": }
        spare:
    """
ALL = ["g1", "g2", "fe80::1", "v1", "v2", "a1", "head", "10.0.0.1"]  # file order, as select returns them
LOOSE = """
    all:
      hosts: {x: , y: , z: }
    """

# What each side answers when it refuses, by kind.
NO_MATCH, NO_HOST, NO_INDEX, BAD_REGEX, NO_FILE = "matches nothing", "no host", "no such index", "bad regex", "no file"
ANSIBLE_REFUSALS = {"Could not match supplied host pattern": NO_MATCH, "leaves us with no hosts": NO_HOST,
                    "No hosts matched the subscripted pattern": NO_INDEX, "Invalid host list pattern": BAD_REGEX,
                    "Unable to find limit file": NO_FILE}
PROVISION_REFUSALS = {"matches no host or group": NO_MATCH, "selects no host": NO_HOST,
                      "none at that index": NO_INDEX, "not a valid regular expression": BAD_REGEX,
                      "not found": NO_FILE}


def write(directory: Path, text: str) -> Path:
    path = directory / "inventory.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def chosen(inventory: Inventory, limit: str) -> set[str] | str:
    """The host names provision's --limit chooses, or the kind of its refusal."""
    try:
        return {h.name for h in select(inventory, limit)}
    except InputError as e:
        return next(kind for words, kind in PROVISION_REFUSALS.items() if words in str(e))


def ansible_chooses(path: Path, limit: str) -> set[str] | str:
    """The host names Ansible's --limit chooses from the inventory file, or the kind of its refusal."""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(path.parent), "ANSIBLE_LOCAL_TEMP": str(path.parent / "tmp"),
           "LC_ALL": "C.UTF-8", "ANSIBLE_INVENTORY_UNPARSED_FAILED": "1", "ANSIBLE_HOST_PATTERN_MISMATCH": "error"}
    run = subprocess.run([ANSIBLE, "all", "-i", str(path), "--list-hosts", "--limit", limit], capture_output=True,
                         text=True, env=env, cwd=path.parent)
    if run.returncode == 0:  # "  hosts (N):" then one name a line
        lines = run.stdout.splitlines()
        start = next(i for i, line in enumerate(lines) if line.strip().startswith("hosts ("))
        return {line.strip() for line in lines[start + 1:] if line.strip()}
    refusals = [kind for words, kind in ANSIBLE_REFUSALS.items() if words in run.stderr]
    assert refusals, run.stderr
    return refusals[0]


@pytest.fixture
def cluster(tmp_path) -> Inventory:
    return load_inventory(write(tmp_path, CLUSTER))


# --- splitting ---

@pytest.mark.parametrize("limit, patterns", [
    ("a,b", ["a", "b"]),
    (" a , b ,", ["a", "b"]),
    ("a:!b:&c", ["a", "!b", "&c"]),
    ("a : b", ["a", "b"]),
    ("a b", ["a", "b"]),  # without commas whitespace separates too
    ("a:b,c", ["a:b", "c"]),  # a comma: colons are no separators
    ("fe80::1", ["fe80::1"]),  # one IPv6 address
    ("gpu:!fe80::1", ["gpu", "!fe80", "1"]),  # ...but not among patterns split at colons
    ("gpu,!fe80::1", ["gpu", "!fe80::1"]),
    ("host:22", ["host:22"]),  # a host and its port: one address
    ("[fe80::1]:22", ["[fe80::1]:22"]),
    ("web[1:3]", ["web[1:3]"]),
    ("web[1:3]:db", ["web[1:3]", "db"]),
    ("~g.*:db", ["~g.*", "db"]),
    ("", []),
    (",,", []),
])
def test_split(limit, patterns):
    assert split_patterns(limit) == patterns


# --- choosing, by hand ---

@pytest.mark.parametrize("limit, names", [
    (None, ALL),
    ("all", ALL),
    ("*", ALL),
    ("head,v100", ["g2", "v1", "v2", "head"]),  # file order
    (" head : a100 ", ["a1", "head"]),
    ("gpu[0]", ["g1"]),
    ("gpu[-1]", ["a1"]),
    ("gpu[1:3]", ["g2", "fe80::1", "v1"]),  # the end is included
    ("gpu[1:]", ["g2", "fe80::1", "v1", "v2", "a1"]),
    ("gpu[4:0]", ["v2"]),  # an end of 0 is no end: Ansible's reading
    ("gpu[1-2]", ["g2", "fe80::1"]),  # the old [x-y] Ansible still applies
    ("gpu[3:100]", ["v1", "v2", "a1"]),
    ("all[3]", ["head"]),  # all's order is Ansible's, not the file's
    ("v100:&slurm", ["g2"]),
    ("&slurm,v100", ["g2"]),  # & applies after the plain patterns wherever written
    ("!gpu", ["head", "10.0.0.1"]),  # only exclusions: from all hosts
    ("slurm:!g2:gpu", ["g1", "fe80::1", "v1", "v2", "a1", "head", "10.0.0.1"]),
    ("gpu:!v100[0]", ["g1", "g2", "fe80::1", "v2", "a1"]),
    ("~g[0-9]", ["g1", "g2"]),  # a regex, on names' starts
    ("~.*1$", ["g1", "fe80::1", "v1", "a1", "10.0.0.1"]),
    ("~(v|a)100", ["g2", "v1", "v2", "a1"]),  # on group names too
    ("a?00", ["a1"]),
    ("*1", ["g1", "fe80::1", "v1", "a1", "10.0.0.1"]),
    ("fe80::1", ["fe80::1"]),
    ("gpu,!fe80::1", ["g1", "g2", "v1", "v2", "a1"]),
    ("10.0.0.1", ["10.0.0.1"]),
    ("spare,head", ["head"]),  # a group without hosts is no error
])
def test_limit(cluster, limit, names):
    assert [h.name for h in select(cluster, limit)] == names


def test_ungrouped_hosts(tmp_path):
    inventory = load_inventory(write(tmp_path, LOOSE))
    assert [h.name for h in select(inventory, "ungrouped")] == ["x", "y", "z"]
    assert [h.name for h in select(inventory, "ungrouped[-1]:all[0]")] == ["x", "z"]


def test_a_limit_file_holds_one_pattern_a_line(cluster, tmp_path, monkeypatch):
    (tmp_path / "site.retry").write_text("g1\n\n  v100 \n!v2\n")
    assert [h.name for h in select(cluster, f"@{tmp_path / 'site.retry'},head")] == ["g1", "g2", "v1", "head"]
    monkeypatch.chdir(tmp_path)  # a relative path starts from the current directory, as in Ansible
    assert [h.name for h in select(cluster, "@site.retry")] == ["g1", "g2", "v1"]


# --- refusals ---

@pytest.mark.parametrize("limit, message, hint", [
    ("v100,gpux", "'gpux' matches no host or group", "did you mean 'gpu'?"),
    ("nothing*", "'nothing*' matches no host or group", "groups: all, gpu, v100, a100, slurm, spare; hosts: g1"),
    ("gpu[9]", "'gpu[9]': 'gpu' has 6 hosts, none at that index", "gpu[-1]"),
    ("gpu[3:1]", "'gpu[3:1]' selects no host", ""),
    ("spare", "'spare' selects no host", ""),
    ("gpu[:2]", "'gpu[:2]' matches no host or group", "the first two hosts are [0:1]"),
    ("gpu,slurm:head", "'slurm:head' matches no host or group", "write commas"),
    ("g1:22", "'g1:22' matches no host or group", "host:22"),
    ("gpu:!fe80::1", "'1' matches no host or group", "keep a name like fe80::1 whole"),
    ("localhost", "'localhost' matches no host or group", "--local"),
    ("~(", "'~(' is not a valid regular expression", "Python regular expression"),
    ("gpu,!", "'gpu,!' has a lone & or !", "!NAME"),
    ("@nowhere.retry", "limit file 'nowhere.retry' not found", "one a line"),
    ("@.", "limit file '.' is not a file", ""),
    ("", "'' names no host", "leave out --limit to select every host"),  # Ansible: every host
    (" ", "' ' names no host", "or write all"),
])
def test_refusals_say_why(cluster, limit, message, hint):
    with pytest.raises(InputError) as caught:
        select(cluster, limit)
    assert message in str(caught.value) and hint in str(caught.value)
    assert str(caught.value).startswith(f"{cluster.path}: limit: ")


# --- against Ansible ---

@needs_ansible
@pytest.mark.parametrize("limit", [
    "all", "*", "head,v100", " head : a100 ", "gpu[0]", "gpu[-1]", "gpu[1:3]", "gpu[1:]", "gpu[4:0]", "gpu[1-2]",
    "gpu[3:100]", "all[3]", "*[4]", "g*[1:2]", "v100:&slurm", "&slurm,v100", "!gpu", "slurm:!g2:gpu",
    "gpu:!v100[0]", "~g[0-9]", "~.*1$", "~(v|a)100", "a?00", "*1", "fe80::1", "gpu,!fe80::1", "10.0.0.1",
    "spare,head", "v100,gpux", "nothing*", "gpu[9]", "gpu[3:1]", "spare", "gpu[:2]", "gpu,slurm:head", "g1:22",
    "gpu:!fe80::1", "~(", "ungrouped",
])
def test_limit_as_ansible(tmp_path, limit):
    path = write(tmp_path, CLUSTER)
    assert chosen(load_inventory(path), limit) == ansible_chooses(path, limit)


@needs_ansible
def test_ungrouped_and_limit_files_as_ansible(tmp_path):
    path = write(tmp_path, LOOSE)
    (tmp_path / "site.retry").write_text("y\n\n !x \n~[xz]\n")
    for limit in ("ungrouped", "ungrouped[-1]:all[0]", f"@{tmp_path / 'site.retry'}", "@nowhere", "ungrouped:&y"):
        assert chosen(load_inventory(path), limit) == ansible_chooses(path, limit), limit


# --- generated inventories and limits, against Ansible ---

HOSTS = ["h1", "h2", "h3", "h4", "h5"]
TOP = ["gpu", "web", "db"]
NESTED = ["v100", "a100"]  # children of the first top group only: Ansible orders deeper levels by a set
ATOMS = [*HOSTS, *TOP, *NESTED, "all", "*", "ungrouped", "h*", "*1", "h?", "[gw]*", "*0*",
         "~h[12]", "~(gpu|web)", "~.*0", "~v", r"~h\d$"]
SUBSCRIPTS = ["", "", "", "", "", "", "[0]", "[1]", "[-1]", "[1:2]", "[0:]", "[2:0]", "[7]", "[:1]", "[1-2]"]


@st.composite
def cases(draw) -> tuple[str, str, list[str]]:
    """An inventory (YAML), a joint (a separator, or "@" for a limit file) and patterns, mostly on its names."""
    tops = draw(st.lists(st.sampled_from(TOP), min_size=1, max_size=3, unique=True))
    nested = draw(st.lists(st.sampled_from(NESTED), max_size=2, unique=True))
    members = {g: draw(st.lists(st.sampled_from(HOSTS), max_size=4, unique=True)) for g in [*tops, *nested]}
    assume(any(members.values()))

    def body(group: str, children: list[str]) -> dict:
        written: dict = {"hosts": dict.fromkeys(members[group])}  # hosts before children: Ansible's file order
        if children:
            written["children"] = {child: body(child, []) for child in children}
        return written

    groups = {top: body(top, nested if i == 0 else []) for i, top in enumerate(tops)}
    names = [*members, *(h for hosts in members.values() for h in hosts)]
    atom = st.one_of(st.sampled_from(names), st.sampled_from(names), st.sampled_from(ATOMS))
    patterns = draw(st.lists(st.tuples(st.sampled_from(["", "", "&", "!"]), atom, st.sampled_from(SUBSCRIPTS)),
                             min_size=1, max_size=4))
    return (yaml.safe_dump({"all": {"children": groups}}, sort_keys=False),
            draw(st.sampled_from([",", ":", " , ", " : ", "@"])), ["".join(p) for p in patterns])


@needs_ansible
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=cases())
def test_generated_limits_choose_as_ansible(tmp_path, case):
    layout, joint, patterns = case
    directory = Path(tempfile.mkdtemp(dir=tmp_path))
    path = write(directory, layout)
    if joint == "@":
        (directory / "limit.retry").write_text("\n".join(patterns) + "\n")
        limit = f"@{directory / 'limit.retry'}"
    else:
        limit = joint.join(patterns)
    assert chosen(load_inventory(path), limit) == ansible_chooses(path, limit), (limit, layout)
