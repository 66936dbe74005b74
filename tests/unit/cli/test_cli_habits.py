"""ansible-playbook's and ansible-inventory's habits on provision's command line (issue 43): -C/--check,
-D/--diff, -u/--user, -b/--become, --list-hosts, --list-tasks, --list-tags, --playbook errors that name the
shipped playbooks; `inventory --graph GROUP` and `--list --yaml`. Through click's CliRunner, where nothing
connects: a command's run is replaced by a stand-in that records what it was given. The listings and the
inventory's shapes are held against ansible-playbook and ansible-inventory themselves (subprocess, test-only)."""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from click.testing import CliRunner

from provision.cli import main
from provision.commands import adhoc as adhoc_command, apply as apply_module, facts as facts_command
from provision.commands import run as run_module
from provision.output import report
from provision.commands.playbook import load_playbook, select_tasks
from provision.core.resources import playbook_path, templates_dir
from ansible_oracle import ANSIBLE_INVENTORY, needs_ansible, run_ansible_inventory

ANSIBLE_PLAYBOOK = Path(ANSIBLE_INVENTORY).with_name("ansible-playbook") if ANSIBLE_INVENTORY else None

# Hosts and groups only, as real inventories lay them out (not copied from one): a group of groups, a host in
# two groups, an ungrouped host, a group with nothing in it (Ansible leaves it out of --list).
INVENTORY = """\
all:
  vars:
    ansible_port: 22
  hosts:
    login01:
      ansible_host: 10.0.0.2
  children:
    gpu:
      children:
        v100:
          hosts:
            gpu01: {ansible_host: 10.0.1.1}
        rtx3090:
          hosts:
            gpu02:
            gpu03: {ansible_host: 10.0.1.3, ansible_port: 2222}
    slurm:
      hosts:
        gpu01:
        gpu03:
      children:
        spare: {}
"""


@pytest.fixture
def inventory(tmp_path, monkeypatch) -> Path:
    """The inventory, read from an empty directory with an empty HOME: no ansible.cfg of this machine's."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    for name in ("ANSIBLE_CONFIG", "ANSIBLE_INVENTORY", "ANSIBLE_REMOTE_USER"):
        monkeypatch.delenv(name, raising=False)
    path = tmp_path / "hosts.yaml"
    path.write_text(INVENTORY)
    return path


@pytest.fixture
def no_connection(monkeypatch):
    """Any SSH connection made fails the test: listing contacts no host."""
    def refuse(*args, **kwargs):
        raise AssertionError(f"a connection was made: {args}")
    monkeypatch.setattr(run_module, "SSHConnection", refuse)
    monkeypatch.setattr(run_module, "LocalConnection", refuse)


def invoke(*args: str, env: dict | None = None, input: str | None = None):
    return CliRunner().invoke(main, [str(a) for a in args], env=env, input=input, catch_exceptions=False)


@pytest.fixture
def facts_run(monkeypatch) -> list:
    """`provision facts`' run replaced: the Target it was given, recorded; no host read."""
    given: list = []
    monkeypatch.setattr(facts_command, "read", lambda target, options, ssh: given.append(target) or [])
    return given


@pytest.fixture
def adhoc_run(monkeypatch) -> list:
    """The ad-hoc commands' run replaced: (target, options) recorded; nothing changed."""
    given: list = []

    def adhoc(target, change, option, gpus, inventory, options, ssh, log):
        given.append((target, options))
        return [], None, [], ""
    monkeypatch.setattr(adhoc_command, "adhoc", adhoc)
    return given


@pytest.fixture
def apply_run(monkeypatch) -> list:
    """apply's run replaced: its options recorded, and what it printed with (show_diff) from report."""
    given: list = []

    def apply(target, tasks, options, ssh, log, reboot, serial, reboot_timeout, via_slurm):
        given.append(options)
        return SimpleNamespace(results=[], reboots=[], after=[], final=[], stopped=None)
    monkeypatch.setattr(apply_module, "apply", apply)
    monkeypatch.setattr(report, "print_results", lambda results, check, show_diff, *rest: given.append(show_diff))
    return given


# --- -C/--check, -D/--diff, -b/--become ---------------------------------------------------------------

@pytest.mark.parametrize("check, diff", [("-C", "-D"), ("--check", "--diff")])
def test_apply_takes_check_and_diff_as_ansible_playbook_spells_them(inventory, tmp_path, apply_run, check, diff):
    result = invoke("apply", "-i", inventory, check, diff, "--playbook", "gpu", "--log", tmp_path / "runs.jsonl")
    assert result.exit_code == 0, result.output
    options, show_diff = apply_run
    assert options.check and options.command == "apply --check" and show_diff is True


def test_the_adhoc_commands_take_dash_c(inventory, adhoc_run):
    result = invoke("power", "--watts", "200", "-i", inventory, "-l", "gpu01", "-C")
    assert result.exit_code == 0, result.output
    [(target, options)] = adhoc_run
    assert options.check and [h.name for h in target.hosts] == ["gpu01"]


def test_become_is_accepted_and_an_inventorys_become_false_still_wins(inventory, facts_run):
    inventory.write_text(INVENTORY.replace("ansible_port: 2222}", "ansible_port: 2222, ansible_become: false}"))
    result = invoke("facts", "-i", inventory, "-b")
    assert result.exit_code == 0, result.output
    [target] = facts_run
    assert {h.name: h.become for h in target.hosts} == {"login01": True, "gpu01": True, "gpu02": True, "gpu03": False}


@pytest.mark.parametrize("ask", ["-K", "--ask-become-pass", "--ask-sudo-pass"])
def test_ask_become_pass_is_ansibles_name_for_the_sudo_password(inventory, adhoc_run, ask):
    result = invoke("persistence", "on", "-i", inventory, ask, input="secret\n")
    assert result.exit_code == 0, result.output
    [(target, options)] = adhoc_run
    assert options.sudo_password == "secret" and "secret" not in result.output


# --- -u/--user: a default under the inventory's, over ansible.cfg's --------------------------------------

def users(target) -> dict:
    return {h.name: h.user for h in target.hosts}


def test_user_is_every_hosts_login_where_the_inventory_names_none(inventory, facts_run):
    assert invoke("facts", "-i", inventory, "-u", "ops").exit_code == 0
    assert set(users(facts_run[0]).values()) == {"ops"}


@pytest.mark.parametrize("variable", ["ansible_user", "ansible_ssh_user"])
def test_the_inventorys_user_wins_over_dash_u_as_in_ansible(inventory, facts_run, variable):
    inventory.write_text(INVENTORY.replace("gpu01: {ansible_host: 10.0.1.1}",
                                           f"gpu01: {{ansible_host: 10.0.1.1, {variable}: admin}}"))
    assert invoke("facts", "-i", inventory, "--user", "ops").exit_code == 0
    assert users(facts_run[0]) == {"login01": "ops", "gpu01": "admin", "gpu02": "ops", "gpu03": "ops"}


def test_dash_u_wins_over_ansible_cfgs_remote_user(inventory, tmp_path, facts_run, adhoc_run):
    (tmp_path / "ansible.cfg").write_text("[defaults]\nremote_user = cfguser\n")
    assert invoke("facts", "-i", inventory).exit_code == 0
    assert invoke("facts", "-i", inventory, "-u", "ops").exit_code == 0
    assert invoke("persistence", "on", "-i", inventory, "-u", "ops").exit_code == 0
    assert set(users(facts_run[0]).values()) == {"cfguser"}
    assert set(users(facts_run[1]).values()) == {"ops"} == set(users(adhoc_run[0][0]).values())


def test_a_user_ssh_would_not_take_is_bad_input_named_as_given(inventory, facts_run):
    result = invoke("facts", "-i", inventory, "-u", "o ps")
    assert result.exit_code == 2 and not facts_run
    assert "command line (-u)" in result.stderr, result.stderr


# --- --list-hosts, --list-tasks, --list-tags: nothing contacted ----------------------------------------

def test_list_hosts_on_every_host_command_contacts_none(inventory, no_connection):
    for command in (["facts"], ["unlock"], ["power", "--watts", "200"], ["persistence", "on"],
                    ["clocks", "--list"]):
        result = invoke(*command, "-i", inventory, "-l", "gpu", "--list-hosts")
        assert result.exit_code == 0, (command, result.output)
        assert result.stdout.splitlines() == ["  hosts (3):", "    gpu01", "    gpu02", "    gpu03"], command


def test_list_hosts_on_apply_and_verify_is_the_plays(inventory, no_connection):
    for command in ("apply", "verify"):
        result = invoke(command, "-i", inventory, "-l", "slurm", "--list-hosts")
        assert result.exit_code == 0, result.output
        assert result.stdout.splitlines()[3:] == ["  play #1 (all): site\tTAGS: []", "    pattern: ['all']",
                                                  "    hosts (2):", "      gpu01", "      gpu03"]


def test_list_hosts_follows_the_limit_as_the_run_does(inventory, no_connection):
    result = invoke("apply", "-i", inventory, "-l", "nosuch", "--list-hosts")
    assert result.exit_code == 2 and "nosuch" in result.stderr


def ansible_playbook(inventory: Path, book: list, *args: str) -> list[str]:
    """ansible-playbook's output for a playbook of debug tasks (it runs none of them with a --list option)."""
    with tempfile.TemporaryDirectory() as cwd:
        (Path(cwd) / "site.yaml").write_text(yaml.safe_dump(book))
        env = {"PATH": "/usr/bin:/bin", "HOME": cwd, "ANSIBLE_LOCAL_TEMP": f"{cwd}/tmp", "LC_ALL": "C.UTF-8"}
        out = subprocess.run([str(ANSIBLE_PLAYBOOK), "-i", str(inventory), "site.yaml", *args], cwd=cwd, env=env,
                             capture_output=True, text=True, check=True).stdout
    return out.splitlines()


def as_ansible_play(playbook: str) -> list:
    """The shipped playbook as one Ansible play: each task a debug task with its name and its tags."""
    tasks = load_playbook(playbook_path(playbook), templates_dir())
    return [{"name": "site", "hosts": "all", "gather_facts": False,
             "tasks": [{"name": t.name, "debug": {"msg": "x"}, "tags": sorted(t.tags - {t.name})} for t in tasks]}]


@needs_ansible
@pytest.mark.parametrize("selection", [[], ["-t", "gpu"], ["--skip-tags", "gpu,slurm"], ["-t", "boot,driver"]])
def test_list_tasks_and_tags_are_ansible_playbooks_own(inventory, no_connection, selection):
    """The same tasks, tags and shape as ansible-playbook prints for the same play (but the playbook's path);
    each option alone prints its own part of the two together, as ansible-playbook's do."""
    theirs = ansible_playbook(inventory, as_ansible_play("site"), *selection, "--list-tasks", "--list-tags")
    ours = {listing: invoke("apply", "-i", inventory, *selection, *listing).stdout.splitlines()
            for listing in (("--list-tasks", "--list-tags"), ("--list-tasks",), ("--list-tags",))}
    both = ours["--list-tasks", "--list-tags"]
    assert both[1] == f"playbook: {playbook_path('site')}" and both[2:] == theirs[2:]
    assert ours["--list-tasks",] == both[:-1] and ours["--list-tags",] == [*both[:4], both[-1]]


@needs_ansible
def test_list_hosts_holds_the_hosts_ansible_playbook_lists(inventory, no_connection):
    """ansible-playbook lists a play's hosts as a set does (its order varies): the same hosts, the same shape."""
    book = as_ansible_play("gpu")
    for limit in ("all", "gpu:!gpu02", "slurm:&rtx3090", "gpu[0]"):
        ours = invoke("apply", "-i", inventory, "--playbook", "gpu", "-l", limit, "--list-hosts").stdout.splitlines()
        theirs = ansible_playbook(inventory, book, "-l", limit, "--list-hosts")
        assert ours[2:6] == [line.replace("site", "gpu", 1) for line in theirs[2:6]], limit
        assert sorted(ours[6:]) == sorted(theirs[6:]), limit


def test_list_tags_names_every_tag_tags_takes(inventory, no_connection):
    """Today's one way to find the tags (the error for an unknown one) and --list-tags agree, task names aside."""
    result = invoke("apply", "-i", inventory, "--list-tags")
    listed = result.stdout.splitlines()[-1].strip().removeprefix("TASK TAGS: [").removesuffix("]").split(", ")
    tasks = load_playbook(playbook_path("site"), templates_dir())
    assert select_tasks(tasks, set(listed), set()) == [t for t in tasks if t.tags - {t.name}]


# --- --playbook ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("given, said", [
    ("sit", "did you mean 'site'? shipped playbooks: gpu, site"),
    ("nosuch", "'nosuch' is neither a file nor a shipped playbook (hint: shipped playbooks: gpu, site"),
    ("plays/site.yaml", "no file 'plays/site.yaml' (hint: shipped playbooks: gpu, site"),
])
def test_a_playbook_not_found_names_the_shipped_ones(inventory, no_connection, given, said):
    for command in ("apply", "verify"):
        result = invoke(command, "-i", inventory, "--playbook", given)
        assert result.exit_code == 2 and said in result.stderr, result.stderr
        assert "provision/data" not in result.stderr  # the package's inside is no help


# --- provision inventory: --graph [GROUP], --list --yaml ---------------------------------------------------

@needs_ansible
@pytest.mark.parametrize("group", ["all", "gpu", "rtx3090", "slurm", "ungrouped", "spare"])
def test_graph_of_a_group_is_ansible_inventorys(inventory, group):
    theirs = run_ansible_inventory(inventory, "--graph", group)
    for args in (["-i", inventory, "--graph", group], [inventory, "--graph", group], ["--graph", "-i", inventory,
                                                                                    group]):
        ours = invoke("inventory", *args)
        assert ours.exit_code == 0, ours.output
        assert ours.stdout == theirs, args


def test_graph_group_with_the_default_inventory(inventory):
    """ansible-inventory --graph GROUP, the inventory from ANSIBLE_INVENTORY: the one word is the group."""
    result = invoke("inventory", "--graph", "v100", env={"ANSIBLE_INVENTORY": str(inventory)})
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == ["@v100:", "  |--gpu01"]
    as_file = invoke("inventory", "--graph", str(inventory), env={"ANSIBLE_INVENTORY": str(inventory)})
    assert as_file.stdout.splitlines()[0] == "@all:"  # a word naming a file is still the INVENTORY


@pytest.mark.parametrize("args, said", [
    (["--graph", "gpux"], "'gpux' is not a group of the inventory (hint: did you mean 'gpu'?)"),
    (["--list", "gpu"], "a GROUP ('gpu') goes with --graph"),
    (["--graph", "gpu", "rtx3090"], "give [INVENTORY] [GROUP], or -i INVENTORY [GROUP]"),
    (["--graph", "--yaml"], "--yaml goes with --list"),
])
def test_graph_group_mistakes_are_said(inventory, args, said):
    result = invoke("inventory", "-i", inventory, *args)
    assert result.exit_code == 2 and said in result.stderr, result.stderr


@needs_ansible
@pytest.mark.parametrize("limit", [None, "gpu", "slurm:!gpu01", "login01"])
def test_list_yaml_is_ansible_inventorys(inventory, limit):
    limited = ["--limit", limit] if limit else []
    ours = invoke("inventory", "-i", inventory, "--list", "--yaml", *limited)
    assert ours.exit_code == 0, ours.output
    assert ours.stdout == run_ansible_inventory(inventory, "--list", "--yaml", *limited)


def test_list_yaml_gives_a_hosts_variables_once(inventory):
    """A host in two groups: its variables where it first appears, {} after (the children before the hosts)."""
    data = yaml.safe_load(invoke("inventory", "-i", inventory, "--list", "-y").stdout)
    gpu = data["all"]["children"]["gpu"]["children"]
    assert gpu["v100"]["hosts"]["gpu01"] == {"ansible_host": "10.0.1.1", "ansible_port": 22}
    assert data["all"]["children"]["slurm"]["hosts"] == {"gpu01": {}, "gpu03": {}}
    assert "spare" not in data["all"]["children"]["slurm"].get("children", {})


# --- the same options on every host command (issue 44: one decorator, cli/options.py) ----------------------

@pytest.fixture
def verify_run(monkeypatch) -> list:
    """verify's run replaced: its options and SSH options recorded; nothing read."""
    from provision.commands import verify as verify_module

    given: list = []

    def verify(target, tasks, options, ssh, *rest):
        given.append((target, options, ssh))
        return [], [], [], None
    monkeypatch.setattr(verify_module, "verify", verify)
    return given


@pytest.mark.parametrize("command", [["power", "--watts", "200"], ["persistence", "on"], ["clocks", "--reset"],
                                     ["ecc", "on"], ["compute-mode", "exclusive_process"], ["mig", "3g.71gb,3g.71gb"]])
def test_the_adhoc_commands_take_the_inventory_as_an_argument(inventory, adhoc_run, command):
    """`power --watts 200 INVENTORY` was "unexpected extra argument"."""
    result = invoke(*command, inventory, "-l", "gpu01")
    assert result.exit_code == 0, result.output
    [(target, options)] = adhoc_run
    assert [h.name for h in target.hosts] == ["gpu01"] and target.inventory_path == str(inventory)


def test_the_adhoc_commands_take_apply_s_run_options(inventory, tmp_path, adhoc_run, monkeypatch):
    """clocks -v was "no such option"; -e, --connect-timeout, --log and --lock-wait were missing."""
    printed: list = []
    monkeypatch.setattr(report, "print_results", lambda *args, **kwargs: printed.append(args))
    ssh: list = []
    monkeypatch.setattr(adhoc_command, "adhoc", lambda target, change, option, gpus, inventory, options, s, log:
                        adhoc_run.append((target, options, log)) or ssh.append(s) or ([], None, [], ""))
    result = invoke("clocks", "--reset", "-i", inventory, "-v", "-e", "ansible_user=ops", "--connect-timeout", "3",
                    "--log", tmp_path / "adhoc.jsonl", "--lock-wait", "5", "-D")
    assert result.exit_code == 0, result.output
    [(target, options, log)] = adhoc_run
    assert {h.user for h in target.hosts} == {"ops"} and ssh[0].connect_timeout == 3
    assert options.lock_wait == 5 and str(log.path) == str(tmp_path / "adhoc.jsonl")
    [(results, check, show_diff, verbose)] = [args[:4] for args in printed]
    assert show_diff and verbose


def test_verify_asks_for_the_sudo_password(inventory, tmp_path, verify_run):
    """verify lacked -K: its checks run sudo as apply's tasks do."""
    (tmp_path / "ssh_config").write_text("Host *\n  User ops\n")
    result = invoke("verify", "-i", inventory, "-K", "-F", tmp_path / "ssh_config", input="secret\n")
    assert result.exit_code == 0, result.output
    [(target, options, ssh)] = verify_run
    assert options.sudo_password == "secret" and "secret" not in result.output
    assert ssh.ssh_config == str(tmp_path / "ssh_config")
