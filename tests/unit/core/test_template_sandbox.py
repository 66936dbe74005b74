"""Templates from --templates DIR are hostile input (issue 41): each is read only from inside its folder's real
path, only as a regular file of bounded size, rendered in jinja2's sandbox with what it makes bounded, and what
fails is a problem naming the template (at load: exit 2, no host contacted), never a traceback. The backups a
write keeps are owner-only, so a secret put right in a file does not stay readable to all in its backup."""

from __future__ import annotations

import getpass
import grp
import os
import shutil
import subprocess
import time
from types import SimpleNamespace

import pytest

from builders.hosts import host
from provision.capabilities.host import HostFacts
from provision.capabilities.system import files
from provision.capabilities.system.files import MAX_FILE_STEPS, MAX_TEMPLATE_BYTES, TemplateFile, render
from provision.commands.playbook import load_playbook
from provision.core import remote
from provision.core.errors import InputError
from provision.core.resources import templates_dir

from builders.cli import no_host_contacted, run_cli

SECRET = "root:$6$not-a-real-hash-but-a-canary:19000:0:99999:7:::\n"


def folder(tmp_path, **templates: str):
    """A templates folder holding these templates (name -> text), and a secret file beside it, outside it."""
    (tmp_path / "secret").write_text(SECRET)
    (tmp_path / "secret").chmod(0o600)
    directory = tmp_path / "templates"
    directory.mkdir()
    for name, text in templates.items():
        (directory / name).write_text(text)
    return directory


def playbook(tmp_path, src: str):
    book = tmp_path / "book.yaml"
    book.write_text(f"tasks:\n  - task: template\n    src: {src!r}\n    dest: /etc/nccl.conf\n")
    return book


def refusals(tmp_path, directory, src: str) -> list[str]:
    with pytest.raises(InputError) as caught:
        load_playbook(playbook(tmp_path, src), directory)
    return [str(p) for p in caught.value.problems]


def planned(directory, src: str):
    task = TemplateFile({"src": src, "dest": "/etc/nccl.conf"})
    task.templates = directory
    return task.plan(host(), HostFacts())


def content(plan) -> str:
    return "".join(c.write.content + c.diff for c in plan.changes)


# --- 1. no file outside the templates folder, no special file, no huge one -----------------------------

def test_a_symlink_out_of_the_folder_is_refused_at_load_with_where_it_points(tmp_path):
    directory = folder(tmp_path)
    (directory / "nccl.conf.j2").symlink_to(tmp_path / "secret")
    said = refusals(tmp_path, directory, "nccl.conf.j2")
    assert len(said) == 1 and "'nccl.conf.j2' resolves to" in said[0] and str(tmp_path / "secret") in said[0]
    assert "outside the templates directory" in said[0] and "(hint: " in said[0] and SECRET not in said[0]


def test_a_name_that_climbs_out_is_refused_at_load(tmp_path):
    directory = folder(tmp_path)
    said = refusals(tmp_path, directory, "../secret")
    assert len(said) == 1 and "not found" in said[0]


def test_an_include_by_a_computed_name_is_confined_at_render(tmp_path):
    directory = folder(tmp_path, **{"nccl.conf.j2": "{% include 'le' ~ 'ak.j2' %}\n"})
    (directory / "leak.j2").symlink_to(tmp_path / "secret")
    plan = planned(directory, "nccl.conf.j2")
    assert plan.changes == [] and len(plan.problems) == 1, plan.problems
    assert "template nccl.conf.j2: " in plan.problems[0] and "outside the templates directory" in plan.problems[0]
    assert "not-a-real-hash" not in plan.problems[0]


def test_an_include_by_a_constant_name_is_checked_at_load(tmp_path):
    directory = folder(tmp_path, **{"nccl.conf.j2": "{% include 'leak.j2' %}\n"})
    (directory / "leak.j2").symlink_to(tmp_path / "secret")
    said = refusals(tmp_path, directory, "nccl.conf.j2")
    assert len(said) == 1 and "'leak.j2' resolves to" in said[0] and "(used by nccl.conf.j2)" in said[0]


def test_a_link_inside_the_folder_and_a_linked_folder_are_fine(tmp_path):
    directory = folder(tmp_path, **{"real.j2": "{{ host.name }}\n"})
    (directory / "nccl.conf.j2").symlink_to("real.j2")
    linked = tmp_path / "linked"  # as the shipped provision/data/templates is a link to templates/
    linked.symlink_to(directory)
    assert len(load_playbook(playbook(tmp_path, "nccl.conf.j2"), linked)) == 1
    assert content(planned(linked, "nccl.conf.j2")).startswith("node1\n")


def test_a_fifo_is_refused_as_one_without_opening_it(tmp_path):
    directory = folder(tmp_path)
    os.mkfifo(directory / "nccl.conf.j2")  # opened, it would wait for a writer for ever
    said = refusals(tmp_path, directory, "nccl.conf.j2")
    assert len(said) == 1 and "is a FIFO, not a file: provision reads a template from a regular file" in said[0]


def test_a_link_swapped_in_after_the_check_is_not_followed(tmp_path, monkeypatch):
    """The bounded reader (core/localfiles.py) reads the real path template_file checked without following a link:
    one put there since is refused as one, never read."""
    directory = folder(tmp_path, **{"nccl.conf.j2": "ours\n"})
    checked = files.template_file

    def swapped(where: str, name: str) -> str:
        real = checked(where, name)
        os.unlink(real)
        os.symlink(tmp_path / "secret", real)
        return real

    monkeypatch.setattr(files, "template_file", swapped)
    with pytest.raises(files.TemplateRefused) as caught:
        files.read_template(str(directory), "nccl.conf.j2")
    assert "'nccl.conf.j2'" in str(caught.value) and "is a symbolic link, not a file" in str(caught.value)
    assert "not-a-real-hash" not in str(caught.value)


def test_a_huge_template_is_refused(tmp_path):
    directory = folder(tmp_path, **{"nccl.conf.j2": "x" * (MAX_TEMPLATE_BYTES + 1)})
    said = refusals(tmp_path, directory, "nccl.conf.j2")
    assert len(said) == 1 and "is larger than 1 MiB (provision's limit for a template)" in said[0]


# --- 2. rendered in jinja2's sandbox, with what it makes bounded --------------------------------------

def escape(canary) -> str:
    return "{{ cycler.__init__.__globals__.os.popen('touch %s').read() }}\n" % canary


def test_the_sandbox_refuses_python_internals_at_render(tmp_path):
    canary = tmp_path / "canary"
    directory = folder(tmp_path, **{"evil.j2": escape(canary)})
    plan = planned(directory, "evil.j2")
    assert not canary.exists()
    assert plan.changes == [] and len(plan.problems) == 1
    assert plan.problems[0].startswith("template evil.j2: access to attribute '__init__' of 'type' object is unsafe")
    assert "sandbox" in plan.problems[0]


def test_an_internal_named_in_the_template_is_refused_at_load(tmp_path):
    directory = folder(tmp_path, **{"evil.j2": "ok\n{{ x['__class__'] }}" + escape(tmp_path / "canary")})
    said = refusals(tmp_path, directory, "evil.j2")
    assert [s.split("src: ", 1)[1].split(" (hint: templates run in jinja2's sandbox")[0] for s in said] == [
        "template 'evil.j2' line 2: uses '__class__'", "template 'evil.j2' line 2: uses '__globals__'",
        "template 'evil.j2' line 2: uses '__init__'"]


def test_a_template_cannot_change_what_it_is_given(tmp_path):
    directory = folder(tmp_path, **{"t.j2": "{{ settings.model_fields_set.add('gpu') }}\n"})
    plan = planned(directory, "t.j2")
    assert plan.changes == [] and "access to attribute 'add' of 'set' object is unsafe" in plan.problems[0]


SPENT = f"takes more than {MAX_FILE_STEPS:,} steps to render (provision's limit)"
NESTED = "{% for i in range(10**5) %}{% for j in range(10**5) %}{% endfor %}{% endfor %}"  # 10**10 turns


@pytest.mark.parametrize("text, said", [
    ("{{ 'x' * 20000000 }}", "a str * 20000000 makes more than 1,000,000 characters or items (provision's limit)"),
    ("{{ [0] * 20000000 }}", "a list * 20000000 makes more than 1,000,000 characters or items"),
    ("{% for i in range(20000) %}{{ 'y' * 1000 }}{% endfor %}", "renders over 16 MiB"),
    ("{{ range(200000)|length }}", "MAX_RANGE"),
    ("{{ 2 ** 100000 }}", "2 ** 100000 makes a number of more than 100,000 bits (provision's limit)"),
    ("{{ 1 / 0 }}", "ZeroDivisionError: division by zero"),
    # The sandbox the inventory uses (core/sandbox.py), here too: sizes known beforehand, refused before they are made
    ("{{ 'x' | center(10**9) }}", "center(1000000000) makes more than 1,000,000 characters or items"),
    ("{{ 'x'.ljust(10**9) }}", "ljust(1000000000) makes more than 1,000,000"),
    ("{{ '%0999999999d' % 1 }}", "% asks for a field 999,999,999 characters wide"),
    ("{{ '{:999999999}'.format(1) }}", "format asks for a field 999,999,999 characters wide"),
    ("{{ ('a' * 999999) ~ ('b' * 999999) }}", "~ makes more than 1,000,000 characters or items"),
    ("{{ 10 ** 5 * 7 ** 40000 }}", "7 ** 40000 makes a number of more than 100,000 bits"),
    ("{{ lipsum(10**9) }}", "'lipsum' is undefined"),
    # ... a block's, a macro's output: at most MAX_CHARS, as it is made
    ("{% set s %}{% for i in range(20000) %}{{ 'y' * 100 }}{% endfor %}{% endset %}{{ s|length }}",
     "the output makes more than 1,000,000 characters or items"),
    ("{% macro m() %}{% for i in range(20000) %}{{ 'y' * 100 }}{% endfor %}{% endmacro %}{{ m()|length }}",
     "the output makes more than 1,000,000 characters or items"),
    # ... and steps: loops in loops, a filter walking a range in them, a recursive loop's turns
    (NESTED, SPENT),
    ("{% for i in range(10**5) %}{% for j in range(10**5) %}{{ range(10**5)|sum }}{% endfor %}{% endfor %}", SPENT),
    ("{% for i in range(10) recursive %}{% if loop.depth < 9 %}{{ loop(range(10)) }}{% endif %}{% endfor %}", SPENT),
    ("{% set s = 'x' * 999999 %}{% for i in range(10**5) %}{% for j in range(10**5) %}{{ s.count('y') }}"
     "{% endfor %}{% endfor %}", SPENT),
])
def test_what_a_template_makes_is_bounded_and_its_errors_are_problems(tmp_path, text, said):
    directory = folder(tmp_path, **{"big.j2": text})
    plan = planned(directory, "big.j2")
    assert plan.changes == [] and len(plan.problems) == 1 and plan.problems[0].startswith("template big.j2: ")
    assert said in plan.problems[0], plan.problems
    if "provision's limit" in said:  # the bound's hint, not the sandbox's (no Python internal was asked for)
        assert plan.problems[0].endswith("(hint: provision bounds what a template makes and how long it takes: is a "
                                         "loop running away?)"), plan.problems


@pytest.mark.parametrize("text", [NESTED, "{{ 'x' | center(10**9) }}"])
def test_a_template_asking_for_ever_or_for_gigabytes_is_refused_quickly(tmp_path, text):
    """Before the file templates rendered in the inventory's sandbox, the first ran 10**10 turns (hours) and the
    second made a gigabyte; now: a plan problem naming the template, in seconds (about 2 s, and 0, here)."""
    directory = folder(tmp_path, **{"big.j2": text})
    start = time.monotonic()
    plan = planned(directory, "big.j2")
    assert time.monotonic() - start < 20
    assert len(plan.problems) == 1 and plan.problems[0].startswith("template big.j2: ") and "provision's limit" in \
        plan.problems[0]


def test_a_big_clusters_files_render_within_the_step_budget():
    """The shipped slurm.conf and gres.conf of a cluster of 5,000 nodes of 8 GPUs, each one file: well within
    MAX_FILE_STEPS (gres.conf, the costlier, takes 980,000 of its 5,000,000)."""
    names = [f"gpu-{i:05d}" for i in range(5000)]
    nodes = [{"name": n, "address": f"10.0.{i >> 8}.{i & 255}", "cpus": 224, "boards": 1, "sockets": 2,
              "cores_per_socket": 56, "threads_per_core": 2, "real_memory": 2_000_000, "gres": "gpu:h100:8"}
             for i, n in enumerate(names)]
    slurm = render(templates_dir(), "slurm.conf.j2", {
        "cluster_name": "big", "controller": SimpleNamespace(name="head", address="10.1.0.1"), "health_check": None,
        "nodes": nodes, "partitions": [{"name": "gpu", "nodes": names, "default": True}]})
    assert slurm.count("\nNodeName=") == 5000 and f"Nodes={','.join(names)} Default=YES" in slurm
    gres = render(templates_dir(), "gres.conf.j2", {
        "cluster_name": "big", "autodetect_nvidia": False, "gres_autodetect": None,
        "gres_nodes": [{"name": n, "autodetect": None, "mig": False,
                        "gpus": [{"type": "h100", "count": 1, "file": f"/dev/nvidia{g}", "files": None,
                                  "cores": "0-55"} for g in range(8)]} for n in names]})
    assert gres.count("\nNodeName=") == 40000


# --- 3. a backup is owner-only --------------------------------------------------------------------------

def write(path, text: str, mode: str, stamp: str) -> None:
    argv = remote.atomic_write_argv(str(path), mode, getpass.getuser(), grp.getgrgid(os.getgid()).gr_name, stamp, 3)
    subprocess.run(argv, input=text, text=True, capture_output=True, check=True)


def test_the_backup_of_a_world_readable_file_is_owner_only_and_the_file_keeps_its_mode(tmp_path):
    conf = tmp_path / "nccl.conf"
    write(conf, "NCCL_IB_HCA=a-leaked-secret\n", "0644", "20261101T000000Z")
    write(conf, "NCCL_IB_HCA=mlx5\n", "0644", "20261102T000000Z")
    backup = tmp_path / "nccl.conf.20261102T000000Z~"
    assert backup.read_text() == "NCCL_IB_HCA=a-leaked-secret\n" and oct(backup.stat().st_mode)[-3:] == "600"
    assert conf.read_text() == "NCCL_IB_HCA=mlx5\n" and oct(conf.stat().st_mode)[-3:] == "644"
    write(conf, "x\n", "0750", "20261103T000000Z")  # never wider than the file was: 0644 -> 0600, 0750 -> 0700
    write(conf, "y\n", "0400", "20261104T000000Z")
    assert [oct((tmp_path / f"nccl.conf.2026110{n}T000000Z~").stat().st_mode)[-3:] for n in (3, 4)] == ["600", "700"]
    assert oct(conf.stat().st_mode)[-3:] == "400"


def test_a_linked_file_backed_up_leaves_the_link_target_alone(tmp_path):
    target = tmp_path / "elsewhere.conf"
    target.write_text("theirs\n")
    target.chmod(0o644)
    (tmp_path / "nccl.conf").symlink_to(target)
    write(tmp_path / "nccl.conf", "ours\n", "0644", "20261101T000000Z")
    assert oct(target.stat().st_mode)[-3:] == "644" and target.read_text() == "theirs\n"


# --- through the CLI: refused before any host is contacted, exit 2 -------------------------------------

def apply_check(tmp_path, directory):
    inventory = tmp_path / "hosts.yaml"
    inventory.write_text("all:\n  hosts:\n    node1: {ansible_host: 10.0.0.1}\n")
    (tmp_path / "ssh_config").write_text("")
    with no_host_contacted() as attempts:  # the CLI's connector refuses every host, recorded
        result = run_cli(["apply", str(inventory), "--check", "--diff", "--templates", str(directory),
                          "--ssh-config", str(tmp_path / "ssh_config"), "--log", str(tmp_path / "runs.jsonl")])
    return result, attempts


def shipped_with(tmp_path, name: str):
    """A copy of the shipped templates (the site playbook renders them) in tmp_path/templates, less `name`."""
    directory = folder(tmp_path)
    for template in templates_dir().iterdir():
        shutil.copy(template, directory / template.name)
    (directory / name).unlink()
    return directory


def test_cli_refuses_a_symlinked_template_before_any_host(tmp_path):
    directory = shipped_with(tmp_path, "nccl.conf.j2")
    (directory / "nccl.conf.j2").symlink_to(tmp_path / "secret")
    result, attempts = apply_check(tmp_path, directory)  # run_cli: no traceback, no raw control character
    assert result.exit_code == 2 and attempts == [], result.output
    assert "no host was touched" in result.output and "'nccl.conf.j2' resolves to" in result.output
    assert "not-a-real-hash" not in result.output and "Traceback" not in result.output


def test_cli_refuses_a_sandbox_escape_before_any_host(tmp_path):
    canary = tmp_path / "canary"
    directory = shipped_with(tmp_path, "nccl.conf.j2")
    (directory / "nccl.conf.j2").write_text(escape(canary))
    result, attempts = apply_check(tmp_path, directory)  # run_cli: no traceback, no raw control character
    assert result.exit_code == 2 and attempts == [], result.output
    assert "uses '__init__'" in result.output and "sandbox" in result.output
    assert "Traceback" not in result.output and not canary.exists()
