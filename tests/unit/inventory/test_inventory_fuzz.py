"""Fuzzing the inventory loader and the CLI over generated inventories (issue 9, input hardening).

What is generated: inventories of the Ansible-like shape provision reads (all: {vars, hosts, children},
nested groups, host variables with ansible_host/user/port/connection, gpu blocks with clocks, locked
clocks and overrides), each value either valid or hostile: control characters, option-like strings
("-oProxyCommand=..."), shell words ("root;touch x", "$(id)"), unicode, long strings, wrong types,
unknown keys. Also files that are no inventory at all: random bytes, invalid UTF-8, UTF-16, YAML that
is not a mapping, empty files, YAML text with random characters inserted.

Property A (the loader, pure): load_inventory returns an Inventory or raises InputError, nothing
else; every problem names the file and prints as one line of printable text; an accepted inventory
keeps the promises the loader makes about names, addresses, users and ports.

Property B (the real CLI in-process, `apply --check` and `facts`): never a traceback nor an internal
error; an inventory the loader refuses is exit 2, names the file, and no connection was even built;
an accepted one reaches the (patched, refusing) connector once per host and is exit 4, unreachable.
No host is contacted: connections are refused before they are made.

The last tests pin down what the fuzzing found and was fixed (each @example reproduces the bug): deeply
nested YAML, a 5000-digit number, an unknown ~user in ssh_config, a host name used as its address
without the address rule, "host:port" addresses Fabric re-parsed, control characters in typed settings.
"""

from __future__ import annotations

import math
import re
import tempfile
from contextlib import contextmanager
from pathlib import Path

import yaml
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

import provision.cli.run as cli_run  # unlock's connections
from provision.core.connection import SSHOptions
from provision.core.errors import InputError
from provision.inventory.model import Inventory
from provision.inventory.load import load_inventory

from builders.cli import no_host_contacted, printable, run_cli

FUZZ = settings(deadline=None, max_examples=200, suppress_health_check=[HealthCheck.too_slow])
FUZZ_CLI = settings(FUZZ, max_examples=50)
REPRODUCE = settings(FUZZ, max_examples=10)

# What the loader promises (provision/inventory/connection.py ConnectionVars, documents.py name_problems), written
# as full matches.
# A host name or IPv4 (no colon), or an IPv6 address (2+ colons): one colon would be Fabric's host:port.
ADDRESS_RULE = re.compile(r"(?:[A-Za-z0-9_.][A-Za-z0-9_.-]*|[0-9A-Fa-f.]*:[0-9A-Fa-f.]*:[0-9A-Fa-f:.]*(?:%[\w.-]+)?)\Z")
USER_RULE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*\$?\Z")
NAME_FORBIDDEN = set(",!&*?[] \t")


# --- values ----------------------------------------------------------------------------------------

HOSTILE_TEXT = [
    "-oProxyCommand=touch /tmp/x", "-oProxyCommand=touch", "--help", "-p", "-",
    "root;touch x", "$(id)", "`id`", "a|b", "a>b", "a b", "a,b", "!x", "&x", "x*", "x?", "[x]", "~root", "../etc",
    "h\n", "\nh", "h\r\nx", "h\rx", "h\x00", "\x1b[31mred", "\x1b]0;title\x07", "h\x7f", "h\x85", "h\u2028x",
    "h\u200b", "\ufeffh", "h\t", "\t", "", " ", "é", "機械", "🙂", "ops@h", "h:2222", "x" * 300, "default",
    "all", "ungrouped", "GPU-abc\n", "mlx5_0:1\nNCCL_DEBUG=INFO",
]
# st.text() with the characters that break lines and terminals made likely.
control_chars = st.sampled_from(["\n", "\r", "\x00", "\x1b", "\x07", "\x7f", "\x85", "\u2028", "\t", "\x0b"])
text_with_controls = st.builds(lambda a, c, b: a + c + b, st.text(max_size=8), control_chars, st.text(max_size=8))
hostile_text = st.one_of(st.sampled_from(HOSTILE_TEXT), text_with_controls, st.text(max_size=30))

junk_scalar = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=True, allow_infinity=True),
    hostile_text,
)
junk = st.recursive(
    junk_scalar, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)


def either(valid: st.SearchStrategy, hostile: bool) -> st.SearchStrategy:
    """Valid values only, or valid ones mixed with hostile text and wrong types."""
    return st.one_of(valid, hostile_text, junk) if hostile else valid


def names(hostile: bool, first: str = "h") -> st.SearchStrategy:
    """Host ("h...") or group ("g...") names: mapping keys, so hashable (YAML reads null, true and numbers
    as keys too). Valid host and group names never collide."""
    valid = st.from_regex(rf"{first}[a-z0-9_-]{{0,8}}", fullmatch=True)
    return st.one_of(valid, hostile_text, junk_scalar) if hostile else valid


def addresses(hostile: bool) -> st.SearchStrategy:
    valid = st.sampled_from(["192.0.2.10", "198.51.100.7", "gpu1.example", "fe80::1%eth0", "2001:db8::5", "h_1"])
    return either(valid, hostile)


def users(hostile: bool) -> st.SearchStrategy:
    return either(st.sampled_from(["ops", "root", "svc.user", "ci-bot", "machine$", "_x"]), hostile)


def ports(hostile: bool) -> st.SearchStrategy:
    valid = st.integers(1, 65535)
    wrong = st.sampled_from([0, -1, 65536, 2**64, "22", "ssh", True, 22.0, [22], None])
    return st.one_of(valid, wrong, junk) if hostile else valid


def power_limits(hostile: bool) -> st.SearchStrategy:
    valid = st.one_of(st.integers(1, 1500), st.just("default"))
    wrong = st.one_of(st.integers(-(2**40), 2**40), st.floats(allow_nan=True), st.sampled_from(["200", "200W", "max"]))
    return st.one_of(valid, wrong, junk) if hostile else valid


def mhz(hostile: bool) -> st.SearchStrategy:
    return either(st.integers(1, 3000), hostile)


def optional_dict(required: dict, optional: dict, hostile: bool) -> st.SearchStrategy:
    """A mapping with some of the optional keys; hostile ones may get unknown keys too."""
    base = st.fixed_dictionaries(required, optional=optional)
    if not hostile:
        return base
    extra = st.dictionaries(st.one_of(st.sampled_from(["junk", "power_limt", "gpus", "Mem"]), st.text(max_size=6)),
                            junk, max_size=2)
    return st.builds(lambda a, b: {**b, **a}, base, extra)


def clocks(hostile: bool) -> st.SearchStrategy:
    pair = optional_dict({"mem": mhz(hostile), "sm": mhz(hostile)}, {"nearest": either(st.booleans(), hostile)},
                         hostile)
    return either(st.one_of(pair, st.just("default")), hostile)


def locked_clocks(hostile: bool) -> st.SearchStrategy:
    if hostile:  # any length, any order
        clock_range = st.one_of(mhz(True), st.lists(mhz(True), max_size=3))
    else:  # one value, or [MIN, MAX]
        clock_range = st.one_of(mhz(False), st.lists(mhz(False), min_size=2, max_size=2).map(sorted))
    ranges = optional_dict({"sm": clock_range}, {"mem": clock_range}, hostile)
    return either(st.one_of(ranges, st.just("default")), hostile)


def overrides(hostile: bool) -> st.SearchStrategy:
    selector = st.one_of(
        st.fixed_dictionaries({"index": either(st.integers(0, 7), hostile)}),
        st.fixed_dictionaries({"uuid": either(st.just("GPU-4f3a9c2e-0000-1111-2222-333344445555"), hostile)}),
        st.fixed_dictionaries({"model": either(st.sampled_from(["V100", "4090"]), hostile)}),
    )
    if hostile:
        selector = st.one_of(selector, st.just({}), st.just({"index": 1, "model": "V100"}))
    tuning = {"power_limit": power_limits(hostile), "persistence": either(st.booleans(), hostile)}
    settings_part = optional_dict({}, tuning, hostile)
    entry = st.builds(lambda s, p: {**s, **p}, selector, settings_part)
    return either(st.lists(entry, max_size=3), hostile)


def gpu_blocks(hostile: bool) -> st.SearchStrategy:
    return either(optional_dict({}, {
        "persistence": either(st.booleans(), hostile),
        "power_limit": power_limits(hostile),
        "clocks": clocks(hostile),
        "locked_clocks": locked_clocks(hostile),
        "overrides": overrides(hostile),
    }, hostile), hostile)


def host_vars(hostile: bool) -> st.SearchStrategy:
    """One host's (or group's) variables: provision's, Ansible's connection variables under either name, and other
    roles' under any name, provision's old ones included (gpu, user, slurm: never read as provision's)."""
    optional = {
        "provision_gpu": gpu_blocks(hostile),
        "provision_custom": junk if hostile else st.just({"rack": "basement"}),
        "ansible_python_interpreter": st.just("/usr/bin/python3"),
        "gpu": junk, "user": junk, "slurm": junk, "driver": junk, "host": junk, "port": junk,
    }
    for short, long in (("host", "ansible_host"), ("user", "ansible_user"), ("port", "ansible_port")):
        value = {"host": addresses, "user": users, "port": ports}[short](hostile)
        optional[long] = value
        if hostile:
            optional[long.replace("ansible_", "ansible_ssh_")] = value  # both names: the _ssh_ one wins
    if hostile:
        optional |= {
            "ansible_connection": either(st.sampled_from(["ssh", "local", "paramiko", "smart"]), hostile),
            "ansible_become": either(st.booleans(), hostile),
            "provision_ssh_config": hostile_text,
            "ansible_password": st.just("hunter2"),
            "provision_nccl": junk,
            "provision_gpus": junk,
        }
    mapping = st.fixed_dictionaries({}, optional=optional)
    return st.one_of(mapping, st.none(), junk) if hostile else st.one_of(mapping, st.none())


def group_bodies(hostile: bool, depth: int) -> st.SearchStrategy:
    """A group: hosts, vars, children. Valid ones always have hosts (a host only in `all` is refused while
    groups exist); hostile ones may miss anything, have an unknown key, or be no mapping at all."""
    hosts = st.dictionaries(names(hostile), host_vars(hostile), min_size=1, max_size=3)
    optional = {"vars": host_vars(hostile)}
    if depth > 0:
        optional["children"] = st.dictionaries(names(hostile, "g"), group_bodies(hostile, depth - 1), max_size=2)
    if not hostile:
        return st.fixed_dictionaries({"hosts": hosts}, optional=optional)
    body = st.fixed_dictionaries({}, optional={"hosts": hosts, "host": junk, **optional})
    return st.one_of(body, st.none(), junk)


def inventory_docs(hostile: bool) -> st.SearchStrategy:
    """The YAML tree: all: {...}, sometimes more top-level groups or keys."""
    if not hostile:  # hosts right under all, or groups under it
        flat = st.fixed_dictionaries({"hosts": st.dictionaries(names(False), host_vars(False), min_size=1,
                                                                max_size=4)}, optional={"vars": host_vars(False)})
        nested = st.fixed_dictionaries({"children": st.dictionaries(names(False, "g"), group_bodies(False, 1),
                                                                    min_size=1, max_size=3)},
                                       optional={"vars": host_vars(False)})
        return st.fixed_dictionaries({"all": flat | nested})
    top = st.fixed_dictionaries({"all": group_bodies(True, 2)}, optional={"extra": group_bodies(True, 1)})
    return st.one_of(top, junk)


@st.composite
def inventory_yaml(draw, hostile: bool) -> bytes:
    return to_yaml(draw(inventory_docs(hostile)), draw(st.booleans())).encode("utf-8")


def to_yaml(doc, allow_unicode: bool) -> str:
    """YAML text that reads back as `doc`. PyYAML writes some characters raw when allowed unicode (NEL,
    U+0085) that its reader then takes for a line break: those documents are written in ASCII, escaped."""
    text = yaml.safe_dump(doc, sort_keys=False, allow_unicode=allow_unicode, width=80)
    if allow_unicode and yaml.safe_load(text) != doc:
        text = yaml.safe_dump(doc, sort_keys=False, allow_unicode=False, width=80)
    return text


@st.composite
def mangled_files(draw) -> bytes:
    """Bytes that are no (valid) inventory text: binary, invalid UTF-8, UTF-16, YAML with characters inserted."""
    base = draw(inventory_yaml(hostile=False))
    kind = draw(st.sampled_from(["binary", "bad-utf8", "utf16", "insert", "plain"]))
    if kind == "binary":
        return draw(st.binary(max_size=300))
    if kind == "utf16":
        return base.decode().encode("utf-16")
    if kind == "plain":
        return draw(st.sampled_from([
            b"", b"\n", b"---\n...\n", b"- a\n- b\n", b"42\n", b"'all'\n", b"null\n", b"all\n", b"all: [a, b]\n",
            b"a: 1\n---\nb: 2\n", b"all:\x00\n", b"all: {hosts: {a: }}\n" * 2, b"? [a, b]\n: c\n",
            b"all: !!python/object/apply:os.system ['touch x']\n", b"all: {hosts: {h: {port: 1}, h: {}}}\n",
            b"all: &a {children: {g: *a}}\n", b"\xef\xbb\xbfall: {hosts: {a: }}\n",
        ]))
    at = draw(st.integers(0, len(base)))
    if kind == "bad-utf8":
        insert = draw(st.sampled_from([b"\xff", b"\xfe\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\x80", b"\xf8\x88\x80"]))
    else:
        insert = draw(st.text(min_size=1, max_size=3).map(str.encode)
                      | st.sampled_from([b":", b"{", b"}", b"- ", b"\t", b"&a", b"*a", b"!!", b"\x1b", b"\x00", b"%"]))
    return base[:at] + insert + base[at:]


any_inventory_file = st.one_of(inventory_yaml(hostile=False), inventory_yaml(hostile=True), mangled_files())


# --- helpers -----------------------------------------------------------------------------------------

@contextmanager
def inventory_file(content: bytes):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "inventory.yaml"
        path.write_bytes(content)
        yield path


def load(path: Path) -> Inventory | InputError:
    """The loader's outcome; anything but an Inventory or an InputError propagates (and fails the test)."""
    try:
        return load_inventory(path)
    except InputError as exc:
        return exc


def check_problems(error: InputError, path: Path) -> None:
    assert error.problems
    for problem in error.problems:
        assert problem.file == str(path)
        line = str(problem)
        assert printable(line), line
        assert line.startswith(f"{path}: ")


def check_inventory(inv: Inventory) -> None:
    """What an accepted inventory guarantees about what reaches files and command lines."""
    assert inv.hosts
    for name in [*inv.hosts, *inv.groups]:
        assert isinstance(name, str) and name and printable(name), repr(name)
        assert not NAME_FORBIDDEN.intersection(name), repr(name)
    for host in inv.hosts.values():
        assert isinstance(host.address, str) and printable(host.address)
        assert ADDRESS_RULE.match(host.address) or host.connection == "local", repr(host.address)
        assert not host.address.startswith("-")
        if "host" in host.vars:
            assert host.address == host.vars["host"]
        if host.user is not None:
            assert isinstance(host.user, str) and USER_RULE.match(host.user), repr(host.user)
            assert printable(host.user) and not host.user.startswith("-")
        if host.port is not None:
            assert type(host.port) is int and 1 <= host.port <= 65535, repr(host.port)
        assert host.connection in ("ssh", "local") and isinstance(host.become, bool)
        assert host.settings is not None


# --- property A: the loader ----------------------------------------------------------------------------

@FUZZ
@given(any_inventory_file)
@example(b"all: {hosts: {'-oProxyCommand=touch /tmp/x': }}\n")
@example(b"all: {hosts: {h: {ansible_host: '-oProxyCommand=touch /tmp/x'}}}\n")
@example(b"all: {hosts: {h: {ansible_user: 'root;touch x'}}}\n")
@example(b"all: {hosts: {\"h\\n\": {ansible_host: \"\\e[31m\"}}}\n")
@example(b"\xff\xfe\x00\x01binary")
def test_loader_returns_an_inventory_or_input_error(content):
    with inventory_file(content) as path:
        outcome = load(path)
        # A host the run selects (all of them here) may be refused at run time: a password, a connection
        # provision cannot use (Host.refused): before any host is touched too.
        refused_at_run = not isinstance(outcome, InputError) and any(h.refused for h in outcome.hosts.values())
        if isinstance(outcome, InputError) or refused_at_run:
            event("refused")
            check_problems(outcome if isinstance(outcome, InputError)
                           else InputError(outcome.refusals(list(outcome.hosts.values()))), path)
        else:
            event("accepted")
            check_inventory(outcome)


# --- property B: the CLI, no host contacted ---------------------------------------------------------------

@FUZZ_CLI
@given(any_inventory_file, st.sampled_from(["apply", "facts"]))
@example(b"all: {hosts: {'-oProxyCommand=touch /tmp/x': {ansible_host: '-oProxyCommand=touch /tmp/x'}}}\n", "apply")
@example(b"\xc3\x28all: {hosts: {a: }}\n", "facts")
def test_cli_refuses_bad_inventories_before_connecting(content, command):
    with inventory_file(content) as path:
        ssh_config = path.parent / "ssh_config"
        ssh_config.write_text("")
        args = [command, str(path), "--ssh-config", str(ssh_config)]
        if command == "apply":
            args += ["--check", "--log", str(path.parent / "runs.jsonl")]
        outcome = load(path)
        with no_host_contacted() as attempts:
            result = run_cli(args)
        # A host the run selects (all of them here) may be refused at run time: a password, a connection
        # provision cannot use (Host.refused): before any host is touched too.
        refused_at_run = not isinstance(outcome, InputError) and any(h.refused for h in outcome.hosts.values())
        if isinstance(outcome, InputError) or refused_at_run:
            event("refused")
            assert result.exit_code == 2, result.output
            assert attempts == [], attempts
            assert str(path) in result.output and "no host was touched" in result.output
        else:
            event("accepted")
            assert result.exit_code == 4, result.output  # every host unreachable: the connector refused it
            assert sorted(attempts) == sorted(outcome.hosts), attempts


# --- what the fuzzing found, fixed (each @example reproduces the bug) -------------------------------------

@REPRODUCE
@given(st.integers(5000, 20000), st.sampled_from(["[", "{a: "]))
@example(10000, "[")  # deep enough under Hypothesis, which raises the recursion limit; 600 is enough in the CLI
def test_deeply_nested_yaml_is_an_input_error(depth, opener):
    closer = {"[": "]", "{a: ": "}"}[opener]
    content = f"all: {{hosts: {{h: {{custom: {{x: {opener * depth}1{closer * depth}}}}}}}}}\n".encode()
    with inventory_file(content) as path:
        outcome = load(path)
        assert isinstance(outcome, InputError)
        check_problems(outcome, path)


@REPRODUCE
@given(st.integers(4301, 8000))
@example(5000)
def test_huge_integer_is_an_input_error(digits):
    with inventory_file(f"all: {{hosts: {{h: {{ansible_port: {'9' * digits}}}}}}}\n".encode()) as path:
        outcome = load(path)
        assert isinstance(outcome, InputError)
        check_problems(outcome, path)


NAME_ONLY_ADDRESSES = ["-oProxyCommand=touch", "-p2222", "$(id)", "`id`", "a;b", "a|b", "a>b", "ops@gpu1",
                       "gpu1:2222", "~root", "h'x", 'h"x']


@REPRODUCE
@given(st.sampled_from(NAME_ONLY_ADDRESSES))
@example("-oProxyCommand=touch")
def test_a_name_used_as_address_obeys_the_address_rule(name):
    with inventory_file(yaml.safe_dump({"all": {"hosts": {name: None}}}).encode()) as path:
        outcome = load(path)
        if isinstance(outcome, Inventory):
            assert all(ADDRESS_RULE.match(h.address) for h in outcome.hosts.values() if not h.refused), \
                list(outcome.hosts)


@REPRODUCE
@given(st.sampled_from(["192.0.2.10:2222", "gpu1:22", "gpu1:"]), st.one_of(st.none(), st.integers(1, 65535)))
@example("192.0.2.10:2222", 22)
@example("192.0.2.10:2222", None)
def test_the_connection_is_built_with_the_inventory_values(address, port):
    variables = {"ansible_host": address} | ({"ansible_port": port} if port is not None else {})
    with inventory_file(yaml.safe_dump({"all": {"hosts": {"gpu1": variables}}}).encode()) as path:
        outcome = load(path)
        if isinstance(outcome, InputError) or any(h.refused for h in outcome.hosts.values()):
            return  # a host whose address is refused is never connected to
        (path.parent / "ssh_config").write_text("")
        connect = cli_run.connector(False, SSHOptions(ssh_config=str(path.parent / "ssh_config")))
        for host in outcome.hosts.values():
            conn = connect(host)  # builds the Fabric connection; opens nothing
            assert (conn.fabric.host, conn.fabric.port) == (host.address, host.port or 22)


@REPRODUCE
@given(st.from_regex(r"~[a-z]{12,16}(/[a-z]{1,8})?", fullmatch=True))
@example("~nosuchuser/ssh_config")
def test_ssh_config_of_an_unknown_user_refuses_its_host(ssh_config):
    with inventory_file(yaml.safe_dump({"all": {"hosts": {"gpu1": {"provision_ssh_config": ssh_config}}}}).encode()) \
            as path:
        outcome = load(path)
        assert not isinstance(outcome, InputError)
        check_problems(InputError(outcome.refusals(list(outcome.hosts.values()))), path)


def typed_strings(value, key: str = ""):
    """(dotted key, string) for every string in a settings dump."""
    if isinstance(value, str):
        yield key, value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from typed_strings(v, f"{key}.{k}" if key else str(k))
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            yield from typed_strings(v, f"{key}[{i}]")


@REPRODUCE
@given(st.sampled_from([("nccl", "ib_hca"), ("slurm", "cluster_name"), ("slurm", "partition"),
                        ("driver", "branch"), ("driver", "version")]), text_with_controls)
@example(("nccl", "ib_hca"), "mlx5_0:1\nNCCL_DEBUG=INFO")
def test_typed_settings_hold_no_control_characters(block_key, value):
    block, key = block_key
    doc = {"all": {"hosts": {"gpu1": {f"provision_{block}": {key: value}}}}}
    with inventory_file(yaml.safe_dump(doc).encode()) as path:
        outcome = load(path)
        if isinstance(outcome, InputError):
            return
        for host in outcome.hosts.values():
            dump = host.settings.model_dump(exclude={"custom"})
            bad = [(k, s) for k, s in typed_strings(dump) if not printable(s)]
            assert not bad, bad


def test_generated_yaml_round_trips():
    """The fuzz inputs are what they claim: a hostile value survives the YAML writer byte for byte."""
    for text in HOSTILE_TEXT:
        doc = {"all": {"hosts": {"h": {"ansible_host": text}}}}
        for allow_unicode in (True, False):
            assert yaml.safe_load(to_yaml(doc, allow_unicode)) == doc
    assert math.isnan(yaml.safe_load(yaml.safe_dump({"x": float("nan")}))["x"])
