"""Every read and every expansion of the inventory is bounded (issue 41, hostile and broken input): each input
below once ran for minutes, filled memory or ended in a traceback; now each is an InputError naming the file and
the limit, within seconds. The readers are called directly (load_inventory, read_config, select), then the CLI
in-process: exit 2, no traceback, no host contacted (the connections are patched to refuse:
builders/cli.py no_host_contacted)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from provision.core import localfiles
from provision.core.errors import InputError
from provision.inventory.ansiblecfg import read_config
from provision.inventory.formats import script
from provision.inventory.load import load_inventory
from provision.inventory.select import select

from builders.cli import no_host_contacted, run_cli

SECONDS = 10  # each case's bound: before, the slowest ran past 120 s

HOST = "all:\n  hosts:\n    n1: {ansible_host: 192.0.2.1}\n"
RECURSIVE_LIST = "a: &x [1, *x]\n"
RECURSIVE_MAPPING = "a: &m {name: n, self: *m}\n"
RECURSIVE_MERGE = "a: &m {name: n, <<: *m}\n"


def laughs(indent: int) -> str:
    """A billion laughs, 1 KB: nine lines, each a list of ten aliases to the line above (10**9 strings)."""
    lines = ['l0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"l{n}: &l{n} [{', '.join([f'*l{n - 1}'] * 10)}]" for n in range(1, 9)]
    return "".join(" " * indent + line + "\n" for line in lines)


def refused(load, file: Path | str, *said: str) -> InputError:
    """The InputError load() raises, within SECONDS, its one problem naming `file` and saying each of `said`."""
    start = time.monotonic()
    with pytest.raises(InputError) as caught:
        load()
    assert time.monotonic() - start < SECONDS
    [problem] = caught.value.problems
    assert problem.file == str(file), str(problem)
    for words in said:
        assert words in str(problem), str(problem)
    return caught.value


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


# --- 1. recursive aliases ---------------------------------------------------------------------------------

@pytest.mark.parametrize("alias", [RECURSIVE_LIST, RECURSIVE_MAPPING, RECURSIVE_MERGE],
                         ids=["list", "mapping", "merge"])
@pytest.mark.parametrize("where", ["inventory", "group_vars", "extra vars"])
def test_a_recursive_alias_is_refused_naming_the_file(tmp_path, alias, where):
    inventory = write(tmp_path / "hosts.yml", HOST)
    if where == "inventory":
        hostile = write(inventory, HOST + "  vars:\n    other_role:\n" + textwrap.indent(alias, "      "))
    else:
        hostile = write(tmp_path / ("group_vars/all.yml" if where == "group_vars" else "extra.yml"), alias)
    extra = [f"@{hostile}"] if where == "extra vars" else []
    refused(lambda: load_inventory(inventory, extra_vars=extra), hostile, "recursive alias", "line ")


# --- 2. billion laughs ------------------------------------------------------------------------------------

@pytest.mark.parametrize("where", ["custom", "foreign", "extra vars", "group_vars"])
def test_a_billion_laughs_is_refused_before_it_is_expanded(tmp_path, where):
    inventory = write(tmp_path / "hosts.yml", HOST)
    if where == "custom":
        hostile = write(inventory, HOST + "    n2:\n      custom:\n" + laughs(8))
    elif where == "foreign":
        hostile = write(inventory, HOST + "  vars:\n    other_role:\n" + laughs(6))
    else:
        hostile = write(tmp_path / ("group_vars/all.yml" if where == "group_vars" else "extra.yml"), laughs(0))
    assert hostile.stat().st_size < 1024
    extra = [f"@{hostile}"] if where == "extra vars" else []
    refused(lambda: load_inventory(inventory, extra_vars=extra), hostile,
            "aliases expand the document by more than 1,000,000 values (provision's limit)")


def test_a_billion_laughs_given_whole_to_e_is_refused(tmp_path):
    inventory = write(tmp_path / "hosts.yml", HOST)
    whole = "{" + ", ".join(line.strip() for line in laughs(0).splitlines()) + "}"
    refused(lambda: load_inventory(inventory, extra_vars=[whole]), "-e", "1,000,000 values (provision's limit)")


def test_aliases_that_share_a_block_are_still_read(tmp_path):
    hosts = "".join(f"    n{i}: *common\n" for i in range(200))
    inventory = write(tmp_path / "hosts.yml", "all:\n  vars:\n    shared: &common {provision_custom: {rack: a3}}\n"
                      f"  hosts:\n{hosts}")
    assert load_inventory(inventory).hosts["n199"].settings.custom == {"rack": "a3"}


# --- 3. what is not a regular file, and what is too large -------------------------------------------------

def test_dev_zero_as_the_inventory_is_refused_by_its_kind():
    refused(lambda: load_inventory("/dev/zero"), "/dev/zero", "is a character device, not a file")


def test_dev_zero_is_refused_in_bounded_memory():
    """In a process of at most 1 GiB of address space: before, it read until the kernel stopped it."""
    program = ("import resource; resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))\n"
               "from provision.core.errors import InputError\n"
               "from provision.inventory.load import load_inventory\n"
               "try:\n    load_inventory('/dev/zero')\nexcept InputError as e:\n    print(e)\n")
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "is a character device" in done.stdout, done.stdout + done.stderr


@pytest.fixture
def fifo(tmp_path):
    """A FIFO no one writes to: opening it to read would block for ever."""
    path = tmp_path / "pipe"
    os.mkfifo(path)
    return path


@pytest.mark.parametrize("where", ["inventory", "in a directory", "group_vars", "host_vars", "extra vars"])
def test_a_fifo_is_refused_wherever_a_file_is_read(tmp_path, fifo, where):
    inventory = write(tmp_path / "inv" / "hosts.yml", HOST)
    places = {"inventory": tmp_path / "inv" / "hosts", "in a directory": tmp_path / "inv" / "more",
              "group_vars": tmp_path / "inv" / "group_vars" / "all.yml",
              "host_vars": tmp_path / "inv" / "host_vars" / "n1.yml", "extra vars": fifo}
    hostile = places[where]
    if hostile != fifo:
        hostile.parent.mkdir(parents=True, exist_ok=True)
        os.mkfifo(hostile)
    source = {"inventory": hostile, "in a directory": tmp_path / "inv"}.get(where, inventory)
    extra = [f"@{fifo}"] if where == "extra vars" else []
    refused(lambda: load_inventory(source, extra_vars=extra), hostile, "is a FIFO, not a file")


def test_a_fifo_as_limit_file_or_ansible_cfg_does_not_block(tmp_path, fifo):
    inventory = load_inventory(write(tmp_path / "hosts.yml", HOST))
    error = refused(lambda: select(inventory, f"@{fifo}"), inventory.path, f"limit file {str(fifo)!r} is not a file")
    assert error.problems[0].key == "limit"
    start = time.monotonic()
    config = read_config({"ANSIBLE_CONFIG": str(fifo), "HOME": str(tmp_path)}, tmp_path)  # not a file: not read
    assert config.file != str(fifo) and time.monotonic() - start < SECONDS


@pytest.mark.parametrize("name", ["hosts.yml", "hosts.ini", "hosts", "group_vars/all.yml", "extra.yml",
                                  "limit.retry", "ansible.cfg"])
def test_a_file_past_the_size_limit_is_refused_before_it_is_read(tmp_path, name):
    inventory = write(tmp_path / "inv" / "hosts.yml", HOST)
    big = tmp_path / "inv" / name
    big.parent.mkdir(parents=True, exist_ok=True)
    with open(big, "ab") as fh:
        fh.truncate(localfiles.MAX_FILE_BYTES + 1)  # sparse: 64 MiB of holes, written in no time
    said = "is larger than 64 MiB (provision's limit for "
    if name == "limit.retry":
        loaded = load_inventory(inventory)
        refused(lambda: select(loaded, f"@{big}"), loaded.path, said)
    elif name == "ansible.cfg":
        refused(lambda: read_config({"ANSIBLE_CONFIG": str(big)}, tmp_path), big, said + "the Ansible configuration")
    else:
        source = big if name.startswith("hosts") else inventory
        extra = [f"@{big}"] if name == "extra.yml" else []
        refused(lambda: load_inventory(source, extra_vars=extra), big, said)


def test_a_symbolic_link_loop_in_an_inventory_directory_is_refused(tmp_path):
    write(tmp_path / "inv" / "hosts.yml", HOST)
    (tmp_path / "inv" / "sub").mkdir()
    (tmp_path / "inv" / "sub" / "back").symlink_to(tmp_path / "inv")
    refused(lambda: load_inventory(tmp_path / "inv"), tmp_path / "inv" / "sub" / "back", "symbolic link loop")


# --- 4. host ranges ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("lines, said", ids=["one range", "two ranges", "two lines", "past 2**63"], argvalues=[
    ("n[0000000:9999999]", "'n[0000000:9999999]' expands to 10,000,000 hosts: more than 100,000"),
    ("rack[0:999]-n[0:999]", "'rack[0:999]-n[0:999]' expands to 1,000,000 hosts: more than 100,000"),
    ("a[0:59999]\nb[0:59999]", "'b[0:59999]' expands to 60,000 hosts, and this file's ranges above name 60,000"),
    ("n[0:99999999999999999999999]", "expands to 100,000,000,000,000,000,000,000 hosts"),
])
def test_a_host_range_past_the_limit_is_refused_before_it_is_expanded(tmp_path, lines, said):
    inventory = write(tmp_path / "hosts.ini", f"[gpu]\n{lines}\n")
    error = refused(lambda: load_inventory(inventory), inventory, said, "(provision's limit)")
    assert error.problems[0].where == f"line {1 + lines.count(chr(10)) + 1}"


def test_a_range_up_to_the_limit_is_read(tmp_path):
    inventory = write(tmp_path / "hosts.ini", "[gpu]\nn[00001:20000] ansible_user=ops\n")
    assert len(load_inventory(inventory).hosts) == 20000


# --- 5. rendered values -----------------------------------------------------------------------------------

# x0 is 80 characters, each next one twice the one before: x19 is 40 MB, 2**19 copies of x0.
DOUBLING = "    x0: '" + "a" * 80 + "'\n" + "".join(f"    x{n}: \"{{{{ x{n - 1} }}}}{{{{ x{n - 1} }}}}\"\n"
                                                  for n in range(1, 20))


@pytest.mark.parametrize("template, variables, said", ids=["str times", "fan-out in a concat", "fan-out", "power",
                                                           "percent width", "center", "loops"], argvalues=[
    ("{{ 'a' * 10**12 }}", "", "a str * 1000000000000 makes more than 1,000,000 characters"),
    ("{{ 'a' ~ x19 }}", DOUBLING, "makes more than 1,000,000 characters"),
    ("{{ x19 }}", DOUBLING, "makes more than 1,000,000 characters"),
    ("{{ 2 ** (10 ** 9) }}", "", "2 ** 1000000000 makes a number of more than 100,000 bits"),
    ("{{ '%0999999999d' % 1 }}", "", "asks for a field 999,999,999 characters wide"),
    ("{{ 'n'|center(10**9) }}", "", "center(1000000000) makes more than 1,000,000"),
    ("{% for i in range(99999) %}{% for j in range(99999) %}{% endfor %}{% endfor %}", "",
     "takes more than 100,000 steps to render (provision's limit)"),
])
def test_a_template_that_would_render_too_much_is_refused_naming_host_and_key(tmp_path, template, variables, said):
    text = f"all:\n  hosts:\n    n1:\n      provision_custom: {{x: \"{template}\"}}\n  vars:\n    unused: 0\n{variables}"
    inventory = write(tmp_path / "hosts.yml", text)
    error = refused(lambda: load_inventory(inventory), inventory, said, "provision's limit")
    assert (error.problems[0].where, error.problems[0].key) == ("host n1", "provision_custom")
    assert len(str(error)) < 1000


def test_the_templates_of_a_whole_inventory_share_one_budget_said_once(tmp_path):
    """90,000 steps a host, under the bound of one value; 30 hosts of them pass the inventory's 2,000,000."""
    hosts = "".join(f"    n{i}: {{ansible_host: 192.0.2.{i + 1}}}\n" for i in range(30))
    loops = "{% for i in range(300) %}{% for j in range(300) %}{% endfor %}{% endfor %}"
    inventory = write(tmp_path / "hosts.yml", f"all:\n  vars:\n    provision_custom: {{x: \"{loops}\"}}\n  hosts:\n{hosts}")
    error = refused(lambda: load_inventory(inventory), inventory, "templates took more than 2,000,000 steps to "
                    "render in all (provision's limit) (and ")
    assert error.problems[0].key == "provision_custom"


def test_templates_within_the_bounds_render_as_before(tmp_path):
    inventory = write(tmp_path / "hosts.yml", "all:\n  hosts:\n    n1:\n      ansible_host: \"{{ prefix ~ "
                      "inventory_hostname[1:] }}.{{ '%03d' % 7 }}\"\n      ansible_port: \"{{ 2200 + 22 }}\"\n"
                      "  vars:\n    prefix: \"{% for p in ['g', 'p', 'u'] %}{{ p }}{% endfor %}\"\n")
    n1 = load_inventory(inventory).hosts["n1"]
    assert (n1.address, n1.port) == ("gpu1.007", 2222)


# --- 6. inventory scripts ---------------------------------------------------------------------------------

def executable(path: Path, text: str) -> Path:
    write(path, text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_a_script_that_leaves_a_child_holding_its_output_is_read_once_it_exits(tmp_path):
    """Before, the child kept the pipe open: 120 s, then "did not answer"."""
    inventory = executable(tmp_path / "inventory.sh", "#!/bin/sh\n"
                           'echo \'{"gpu": {"hosts": ["n1"]}, "_meta": {"hostvars": {"n1": '
                           '{"ansible_host": "192.0.2.1"}}}}\'\n'
                           f"sleep 300 &\necho $! > {tmp_path / 'child.pid'}\n")
    start = time.monotonic()
    assert list(load_inventory(inventory).hosts) == ["n1"]
    assert time.monotonic() - start < SECONDS
    os.kill(int((tmp_path / "child.pid").read_text()), 9)  # left running, as documented: only a timeout kills


def test_a_script_that_hangs_is_killed_with_what_it_started(tmp_path, monkeypatch):
    monkeypatch.setattr(script, "TIMEOUT", 1.0)
    inventory = executable(tmp_path / "inventory.sh", f"#!/bin/sh\nsleep 300 &\necho $! > {tmp_path / 'child.pid'}\n"
                           "sleep 300\n")
    refused(lambda: load_inventory(inventory), inventory, "did not answer --list in 1 s")
    child = int((tmp_path / "child.pid").read_text())
    for _ in range(50):  # the group was sent SIGKILL: the child is gone once init has reaped it
        if not Path(f"/proc/{child}").exists() or "Z" in Path(f"/proc/{child}/stat").read_text().split()[2]:
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"the script's child {child} still runs")


def test_a_script_that_prints_past_the_limit_is_stopped(tmp_path, monkeypatch):
    monkeypatch.setattr(script, "MAX_OUTPUT_BYTES", 100_000)
    inventory = executable(tmp_path / "inventory.sh", "#!/bin/sh\nexec yes\n")
    refused(lambda: load_inventory(inventory), inventory, "printed more than 100,000 bytes on --list "
            "(provision's limit)")


# --- the CLI: exit 2, no traceback, no host contacted -----------------------------------------------------

def hostile_inventories(tmp_path: Path) -> dict[Path, str]:
    """Each hostile inventory, and what the CLI's message says of it."""
    os.mkfifo(tmp_path / "pipe")
    return {write(tmp_path / "rec.yml", HOST + "  vars:\n    other:\n      a: &x [*x]\n"): "recursive alias",
            write(tmp_path / "laughs.yml", HOST + "    n2:\n      custom:\n" + laughs(8)): "provision's limit",
            Path("/dev/zero"): "is a character device", tmp_path / "pipe": "is a FIFO",
            write(tmp_path / "range.ini", "[gpu]\nn[0000000:9999999]\n"): "provision's limit",
            write(tmp_path / "big.yml", "all:\n  hosts:\n    n1:\n      ansible_host: \"{{ 'a' * 10**12 }}\"\n"):
                "provision's limit"}


@pytest.mark.parametrize("command", ["apply", "facts"])
def test_the_cli_refuses_each_with_exit_2_and_no_traceback(tmp_path, command):
    for inventory, said in hostile_inventories(tmp_path).items():
        args = [command, str(inventory)] + (["--check", "--log", str(tmp_path / "runs.jsonl")]
                                            if command == "apply" else [])
        start = time.monotonic()
        with no_host_contacted() as attempts:
            result = run_cli(args)  # asserts: no traceback, no "internal error"
        assert time.monotonic() - start < SECONDS, inventory
        assert result.exit_code == 2 and attempts == [], result.output
        assert str(inventory) in result.output and said in result.output, result.output
