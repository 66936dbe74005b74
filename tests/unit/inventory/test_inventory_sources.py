"""Inventories as users keep them beside ansible-playbook: group_vars/ and host_vars/ in every form Ansible
reads, a directory of several inventory files, several -i sources, executable scripts, host lists. Held
against `ansible-inventory --list` (tests/ansible_oracle.py) on generated trees and on hand-written layouts."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from ansible_oracle import ansible_rendered, ansible_view, needs_ansible, provision_view, run_ansible_inventory
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from click.testing import CliRunner

from provision.cli import main
from provision.core.errors import InputError
from provision.inventory.ansiblecfg import read_config
from provision.inventory.load import load_inventory
from paths import REPO

GROUPS = ["gpu", "login", "cluster", "rack-1"]
VALUES = {"ansible_user": st.sampled_from(["ubuntu", "root", "ops"]),
          "ansible_become": st.sampled_from(["yes", "no", True, "False"]),
          "ansible_port": st.sampled_from([22, 2222, "2200"]),
          "provision_gpu": st.sampled_from([{"power_limit": 200}, {"power_limit": 250}, {"power_limit": 300}]),
          "ansible_ssh_user": st.sampled_from(["admin", "svc"]), "ansible_ssh_port": st.sampled_from([2022, "2023"]),
          # other roles' variables under names provision once read: never provision's
          "gpu": st.sampled_from([True, "yes", {"power_limit": "lots"}, [1, 2]]),
          "user": st.sampled_from(["billybob", {"name": "slurm", "uid": 64030}]),
          "slurm": st.sampled_from([{"partition": "batch"}, "23.11"]), "driver": st.sampled_from(["nvidia-535", 550]),
          "host": st.sampled_from(["db.internal"]), "port": st.sampled_from([5432])}
FORMS = ["{}.yml", "{}.yaml", "{}", "{}.json", "{}/", "{}/+{}.yml"]  # "/": a directory of files, "+": both


def ini_value(value, on_host_line: bool = False) -> str:
    """As written in INI: a Python literal; quoted on a host line, which is split as a shell splits words."""
    text = value if isinstance(value, str) else repr(value)
    return f'"{text}"' if on_host_line and isinstance(value, (dict, list)) else text


@st.composite
def some_vars(draw) -> dict:
    keys = draw(st.lists(st.sampled_from(sorted(VALUES)), max_size=3, unique=True))
    return {key: draw(VALUES[key]) for key in keys}


def write_vars(draw, directory: Path, name: str) -> None:
    """NAME's variables in one of the forms Ansible reads (JSON is YAML too)."""
    form = draw(st.sampled_from(FORMS))
    if form.startswith("{}/"):
        (directory / name).mkdir(parents=True)
        for file in ["10-site.yml", "20-more", "30.json"][:draw(st.integers(1, 3))]:
            (directory / name / file).write_text(json.dumps(draw(some_vars())))
        if "+" in form:  # the directory is found first: this file is never read
            (directory / f"{name}.yml").write_text(json.dumps({"ansible_user": "never-read"}))
    else:
        directory.mkdir(parents=True, exist_ok=True)
        (directory / form.format(name)).write_text(json.dumps(draw(some_vars())))


@st.composite
def inventory_trees(draw, root: Path) -> list[Path]:
    """An INI or YAML source with group_vars/ and host_vars/ beside it, and maybe a second source (a directory)."""
    groups = draw(st.lists(st.sampled_from(GROUPS), min_size=1, max_size=4, unique=True))
    hosts = [f"node{i}" for i in range(draw(st.integers(1, 4)))]
    members: dict[str, dict[str, dict]] = {}  # group -> host -> the variables written on that host's line
    written: set[str] = set()
    for group in groups:
        members[group] = {}
        for host in draw(st.lists(st.sampled_from(hosts), max_size=3, unique=True)):
            members[group][host] = draw(some_vars()) if host not in written else {}  # one place: no conflict
            written.add(host)
    group_vars = {}
    for group in groups:
        group_vars[group] = draw(some_vars())
        if draw(st.integers(0, 3)) == 0:
            group_vars[group]["ansible_group_priority"] = draw(st.integers(0, 3))
    children = {parent: [g for g in groups[i + 1:] if draw(st.booleans())] for i, parent in enumerate(groups)}
    loose = [h for h in hosts if h not in written]
    if draw(st.booleans()):
        source = root / "hosts.yml"
        source.write_text(yaml_inventory(groups, members, group_vars, children, loose))
    else:
        source = root / "hosts"
        source.write_text(ini_inventory(groups, members, group_vars, children, loose))
    for name in ["all", *groups]:
        if draw(st.booleans()):
            write_vars(draw, root / "group_vars", name)
    for host in hosts:
        if draw(st.integers(0, 2)) == 0:
            write_vars(draw, root / "host_vars", host)
    sources = [source]
    if draw(st.booleans()):  # a second source: a directory that adds to the groups and sets variables again
        site = root / "site"
        site.mkdir()
        group = draw(st.sampled_from(groups))
        inline = draw(some_vars())
        (site / "extra").write_text(f"[{group}]\n{draw(st.sampled_from(hosts))}\n[{group}:vars]\n"
                                    + "".join(f"{k}={ini_value(v)}\n" for k, v in inline.items()))
        for name in ["all", group]:
            if draw(st.booleans()):
                write_vars(draw, site / "group_vars", name)
        sources.append(site)
    return sources


def ini_inventory(groups, members, group_vars, children, loose) -> str:
    lines = list(loose)  # before any section: ungrouped
    for group in groups:
        lines.append(f"[{group}]")
        lines += [" ".join([host, *(f"{k}={ini_value(v, on_host_line=True)}" for k, v in inline.items())])
                  for host, inline in members[group].items()]
        if group_vars[group]:
            lines += [f"[{group}:vars]", *(f"{k}={ini_value(v)}" for k, v in group_vars[group].items())]
    for parent in groups:
        if children[parent]:
            lines += [f"[{parent}:children]", *children[parent]]
    return "\n".join(lines) + "\n"


def yaml_inventory(groups, members, group_vars, children, loose) -> str:
    """Groups at the top level (a child listed under its parent by name too), as JSON: YAML reads it."""
    document: dict = {"all": {"hosts": dict.fromkeys(loose)}} if loose else {}
    for group in groups:
        body = {"hosts": {h: inline or None for h, inline in members[group].items()}, "vars": group_vars[group],
                "children": dict.fromkeys(children[group])}
        document[group] = {key: value for key, value in body.items() if value}
    return json.dumps(document, indent=1)


@needs_ansible
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_generated_trees_with_vars_files_read_as_ansible_reads_them(tmp_path_factory, data):
    root = tmp_path_factory.mktemp("inventory")
    sources = data.draw(inventory_trees(root))
    tree = {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*")) if p.is_file()}
    assert provision_view(sources) == ansible_view(sources, home=root), json.dumps(tree, indent=1)
    given = [a for s in sources for a in ("-i", str(s))]
    graph = CliRunner().invoke(main, ["inventory", *given, "--graph"])
    assert graph.output == run_ansible_inventory(sources, "--graph", home=root), json.dumps(tree, indent=1)
    listed = json.loads(CliRunner().invoke(main, ["inventory", *given, "--list"]).output)
    theirs = json.loads(run_ansible_inventory(sources, "--list", home=root))
    assert _groups(listed) == _groups(theirs), json.dumps(tree, indent=1)
    assert _read_names(listed) == _read_names(theirs, ours=False), json.dumps(tree, indent=1)


def _read_names(listing: dict, ours: bool = True) -> dict:
    """host -> the names of the variables provision reads (--list prints only those; Ansible's, every one)."""
    names = {host: sorted(k for k in variables if ours or k.startswith(("provision_", "ansible_"))
                          and k != "ansible_group_priority")
             for host, variables in listing["_meta"]["hostvars"].items()}
    return {host: found for host, found in names.items() if found}


def _groups(listing: dict) -> dict:
    """--list without _meta: each group's hosts and children, in order."""
    return {name: body for name, body in listing.items() if name != "_meta"}


# --- Ansible's order, on the cases that surprise ---------------------------------------------------------


def tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


@needs_ansible
def test_group_vars_all_beats_a_child_groups_inline_vars_and_host_vars_beat_everything(tmp_path):
    """Ansible's default VARIABLE_PRECEDENCE: the inventory's own group variables (all, then by group) come
    before group_vars/all, which comes before group_vars/GROUP; the host's own, then host_vars/HOST, last."""
    root = tree(tmp_path, {
        "hosts": "[gpu]\nnode1\nnode2 ansible_user=inline\n[gpu:vars]\nansible_port=2201\nansible_user=group\n",
        "group_vars/all.yml": "ansible_port: 2202\nansible_user: all-file\nprovision_gpu: {power_limit: 200}\n",
        "group_vars/gpu/10.yml": "provision_gpu: {power_limit: 250}\n",
        "host_vars/node2.yaml": "provision_gpu: {power_limit: 300}\n",
    })
    view = provision_view(root / "hosts")
    assert view == ansible_view(root / "hosts")
    assert view["node1"][1] == ("node1", "all-file", 2202, "ssh", 250, None)
    assert view["node2"][1] == ("node2", "inline", 2202, "ssh", 300, None)


@needs_ansible
def test_a_stackhpc_style_directory_of_several_sources(tmp_path):
    """Written in the style of a StackHPC Slurm appliance environment (not copied from one): a directory of an
    INI hosts file and a YAML file of groups, group_vars/ with other roles' variables and a directory group."""
    root = tree(tmp_path / "environments" / "site" / "inventory", {
        "hosts": "[login]\nsite-login-0 ansible_host=10.1.0.5\n[compute]\nsite-compute-[0:3]\n",
        "groups.yml": "cluster:\n  children:\n    login:\n    compute:\nslurm_stats:\n  children:\n    login:\n",
        "README.md": "not an inventory: ignored by extension\n",
        "hosts.retry": "ignored too\n",
        ".hidden": "and this\n",
        "group_vars/all/defaults.yml": "ansible_user: rocky\nopenhpc_cluster_name: site\nappliances_repository: x\n",
        "group_vars/all/overrides.yml": "ansible_user: centos\n",
        "group_vars/compute.yml": "provision_gpu: {power_limit: 250}\nopenhpc_slurm_partitions: [{name: gpu}]\n",
        "host_vars/site-compute-3/gpu.yml": "provision_gpu: {power_limit: 200}\n",
    })
    view = provision_view(root)
    assert view == ansible_view(root)
    assert view["site-compute-3"] == ({"compute", "cluster"}, ("site-compute-3", "centos", None, "ssh", 200, None))
    assert load_inventory(root).ignored == ["appliances_repository", "openhpc_cluster_name",
                                            "openhpc_slurm_partitions"]


@needs_ansible
def test_several_sources_merge_in_order_each_with_its_group_vars(tmp_path):
    common = tree(tmp_path / "common", {"hosts": "[gpu]\nrig1\nrig2\n[gpu:vars]\nansible_user=common\n",
                                        "group_vars/gpu.yml": "provision_gpu: {power_limit: 200}\n"})
    site = tree(tmp_path / "site", {"hosts.yml": "gpu:\n  hosts:\n    rig2:\n  vars:\n    ansible_user: site\n",
                                    "group_vars/gpu.yml": "provision_gpu: {power_limit: 250}\n"})
    sources = [common / "hosts", site / "hosts.yml"]
    view = provision_view(sources)
    assert view == ansible_view(sources, home=tmp_path)
    assert view["rig1"][1][1:] == ("site", None, "ssh", 250, None)
    inventory = load_inventory(sources)
    assert inventory.path == f"-i {common / 'hosts'} -i {site / 'hosts.yml'}"


@needs_ansible
def test_an_executable_inventory_script_with_and_without_meta(tmp_path):
    groups = {"gpu": {"hosts": ["rig1", "rig2"], "vars": {"ansible_user": "ops"}, "children": ["v100"]},
              "v100": ["rig2"], "all": {"hosts": ["loner"]}}
    hostvars = {"rig1": {"ansible_host": "10.0.0.1", "provision_gpu": {"power_limit": 200}}}
    for name, meta in (("with_meta", True), ("without_meta", False)):
        script = tmp_path / name
        listing = {**groups, "_meta": {"hostvars": hostvars}} if meta else groups
        script.write_text("#!/usr/bin/python3\nimport json, sys\n"
                          f"listing, hostvars = {json.dumps(listing)!r}, {json.dumps(hostvars)!r}\n"
                          "if sys.argv[1] == '--list':\n    print(listing)\n"
                          "else:\n    print(json.dumps(json.loads(hostvars).get(sys.argv[2], {})))\n")
        script.chmod(0o755)
        view = provision_view(script)
        assert view == ansible_view(script)
        assert view["rig1"] == ({"gpu"}, ("10.0.0.1", "ops", None, "ssh", 200, None))
        assert view["loner"][0] == {"ungrouped"}


@needs_ansible
def test_a_host_list_source(tmp_path):
    view = provision_view(["rig1,rig2:2222,"])  # type: ignore[list-item]
    assert view == ansible_view([Path("rig1,rig2:2222,")], home=tmp_path)
    assert view["rig2"] == ({"ungrouped"}, ("rig2", None, 2222, "ssh", None, None))


# --- what is refused, and said -----------------------------------------------------------------------------


def test_a_bad_value_in_a_group_vars_file_names_that_file_and_group(tmp_path):
    root = tree(tmp_path, {"hosts": "[gpu]\nrig1\n", "group_vars/gpu/power.yml": "provision_gpu: {power_limit: -5}\n"})
    with pytest.raises(InputError) as error:
        load_inventory(root / "hosts")
    [problem] = error.value.problems
    assert (problem.file, problem.where) == (str(root / "group_vars/gpu/power.yml"), "group gpu")
    assert "power_limit" in problem.key


def test_a_vars_file_that_is_not_a_mapping_and_a_broken_one_are_errors_naming_them(tmp_path):
    root = tree(tmp_path, {"hosts": "[gpu]\nrig1\n", "group_vars/gpu.yml": "- a list\n",
                           "host_vars/rig1.yml": "provision_gpu: {power_limit: 200\n"})
    with pytest.raises(InputError) as error:
        load_inventory(root / "hosts")
    said = {(p.file, p.message.split(":")[0]) for p in error.value.problems}
    assert said == {(str(root / "group_vars/gpu.yml"), "variables must be a mapping, not a list"),
                    (str(root / "host_vars/rig1.yml"), "invalid YAML at line 2, column 1")}


def test_a_vault_encrypted_vars_file_is_left_unread_and_listed(tmp_path):
    root = tree(tmp_path, {"hosts": "[gpu]\nrig1\n",
                           "group_vars/all/vault.yml": "$ANSIBLE_VAULT;1.1;AES256\n6638643965\n",
                           "group_vars/all/main.yml": "provision_gpu: {power_limit: 200}\n"})
    (root / "hosts").write_text("[gpu]\nrig1\n[login]\nlogin1\n")
    (root / "group_vars/login.yml").write_text("$ANSIBLE_VAULT;1.1;AES256\n6638643965\n")
    inventory = load_inventory(root / "hosts")
    assert inventory.hosts["rig1"].settings.gpu.power_limit == 200
    assert inventory.unread == [str(root / "group_vars/all/vault.yml"), str(root / "group_vars/login.yml")]
    # It may set anything for its hosts, as Ansible would stop there: a run that selects one of them stops too.
    said = [str(p) for p in inventory.refusals(inventory.select("rig1"))]
    assert said == [f"{root / 'group_vars/all/vault.yml'}: all: is encrypted whole with Ansible Vault, which provision "
                    "does not decrypt: it may set variables of these hosts (selected: rig1) (hint: encrypt only the "
                    "secret values in it (ansible-vault encrypt_string: provision leaves them alone) and decrypt the "
                    "file)"]
    assert len(inventory.refusals(inventory.select("login1"))) == 2


def test_an_inventory_plugin_configuration_is_refused_with_the_way_out(tmp_path):
    root = tree(tmp_path, {"openstack.yml": "plugin: openstack.cloud.openstack\nexpand_hostvars: true\n"})
    with pytest.raises(InputError) as error:
        load_inventory(root / "openstack.yml")
    assert "inventory plugin 'openstack.cloud.openstack'" in str(error.value)
    assert "ansible-inventory -i" in str(error.value)


def test_a_failing_script_and_a_missing_source_say_which(tmp_path):
    script = tmp_path / "inventory.py"
    script.write_text("#!/bin/sh\necho 'cannot reach the CMDB' >&2\nexit 3\n")
    script.chmod(0o755)
    with pytest.raises(InputError) as error:
        load_inventory([script, tmp_path / "nowhere"])
    words = str(error.value)
    assert "exited 3 on --list: cannot reach the CMDB" in words and "no such inventory file or directory" in words


def test_relative_paths_in_a_vars_file_start_at_its_sources_directory(tmp_path):
    root = tree(tmp_path, {"inventory/hosts": "[gpu]\nrig1\n", "inventory/keys/id_gpu": "key",
                           "inventory/group_vars/gpu.yml": "ansible_ssh_private_key_file: keys/id_gpu\n"})
    os.chmod(root / "inventory/keys/id_gpu", 0o600)
    host = load_inventory(root / "inventory/hosts").hosts["rig1"]
    assert host.identity_file == str(root / "inventory/keys/id_gpu")


# --- ansible.cfg and ANSIBLE_* -----------------------------------------------------------------------------


def test_ansible_cfg_names_the_inventory_and_connection_defaults_that_the_inventory_overrides(tmp_path):
    project = tree(tmp_path / "project", {
        "ansible.cfg": "[defaults]\ninventory = inventories/prod/hosts ; the production cluster\n"
                       "remote_user = ubuntu\nprivate_key_file = keys/cluster\n"
                       "[privilege_escalation]\nbecome = True\n",
        "keys/cluster": "key",
        "inventories/prod/hosts": "[gpu]\nrig1\nrig2 ansible_user=ops\n"})
    config = read_config(env={"HOME": str(tmp_path)}, cwd=project)
    assert (config.file, config.inventory) == (str(project / "ansible.cfg"), [str(project / "inventories/prod/hosts")])
    inventory = load_inventory(config.inventory, config)
    rig1, rig2 = inventory.hosts.values()
    assert (rig1.user, rig2.user, rig1.identity_file) == ("ubuntu", "ops", str(project / "keys/cluster"))
    env = {"HOME": str(tmp_path), "ANSIBLE_INVENTORY": "other/hosts,more", "ANSIBLE_REMOTE_USER": "admin"}
    config = read_config(env=env, cwd=project)
    assert config.inventory == [str(project / "other/hosts"), str(project / "more")]
    assert config.variables["ansible_user"] == "admin"


def test_ansible_config_and_home_and_a_world_writable_directory(tmp_path):
    tree(tmp_path, {"home/.ansible.cfg": "[defaults]\nremote_user = from-home\n",
                    "elsewhere/my.cfg": "[defaults]\nremote_user = from-env\n",
                    "shared/ansible.cfg": "[defaults]\nremote_user = planted\n"})
    (tmp_path / "shared").chmod(0o777)
    assert read_config(env={"HOME": str(tmp_path / "home")}, cwd=tmp_path / "shared").variables == {
        "ansible_user": "from-home"}  # ./ansible.cfg in a world-writable directory is ignored, as Ansible does
    config = read_config(env={"HOME": str(tmp_path / "home"), "ANSIBLE_CONFIG": str(tmp_path / "elsewhere/my.cfg")},
                         cwd=tmp_path)
    assert config.variables == {"ansible_user": "from-env"}


def test_a_bad_value_in_ansible_cfg_is_an_error_naming_it(tmp_path):
    tree(tmp_path, {"ansible.cfg": "[privilege_escalation]\nbecome_user = postgres\n", "hosts": "[gpu]\nrig1\n"})
    config = read_config(env={"HOME": str(tmp_path)}, cwd=tmp_path)
    inventory = load_inventory(tmp_path / "hosts", config)  # a problem for the runs that select a host
    [problem] = inventory.refusals(list(inventory.hosts.values()))
    assert (problem.file, problem.key) == (str(tmp_path / "ansible.cfg"), "ansible_become_user")


def test_every_host_command_takes_several_inventories_and_a_directory(tmp_path):
    tree(tmp_path, {"a/hosts": "[gpu]\nrig1 ansible_connection=local\n",
                    "b/hosts.yml": "gpu:\n  hosts:\n    rig2: {ansible_connection: local}\n"})
    result = CliRunner().invoke(main, ["unlock", "-i", str(tmp_path / "a"), "-i", str(tmp_path / "b/hosts.yml"),
                                       "--json"])
    assert result.exit_code == 0, result.output
    assert [h["host"] for h in json.loads(result.output)] == ["rig1", "rig2"]


def test_inventory_host_says_where_each_value_came_from(tmp_path, monkeypatch):
    root = tree(tmp_path, {"inv/hosts": "[gpu]\nrig[1:2]\n[gpu:vars]\nansible_user=ops\n",
                           "inv/group_vars/gpu/main.yml": "provision_gpu: {persistence: true, power_limit: 250}\nntp: x\n",
                           "inv/host_vars/rig2.yml": "provision_gpu: {power_limit: 200}\nansible_port: 2222\n"})
    monkeypatch.chdir(root)
    result = CliRunner().invoke(main, ["inventory", "-i", "inv", "--host", "rig2", "--json"])
    values = json.loads(result.output)
    assert values["provision_gpu.power_limit"] == {"value": 200, "from": "inv/host_vars/rig2.yml (host rig2)"}  # as given
    assert values["provision_gpu.persistence"]["from"] == "inv/group_vars/gpu/main.yml (group gpu)"
    assert values["user"] == {"value": "ops", "from": "inv/hosts (group gpu) as ansible_user"}
    assert values["connection"] == {"value": "ssh", "from": "default"}
    table = CliRunner().invoke(main, ["inventory", "-i", "inv", "--host", "rig2", "-v"]).output
    assert "  provision_gpu.power_limit " in table and "inv/host_vars/rig2.yml (host rig2)" in table
    assert "1 other variables left alone: ntp" in table
    wrong = CliRunner().invoke(main, ["inventory", "-i", "inv", "--host", "rig3"])
    assert wrong.exit_code == 2 and "'rig3' is not a host of the inventory (hint: did you mean 'rig2'?)" in wrong.output


# --- Jinja in the values provision reads -------------------------------------------------------------------

TEMPLATED = {
    "hosts.yml": """
all:
  vars:
    mgmt_domain: mgmt.example
    base_port: 2200
  children:
    gpu:
      vars:
        ansible_host: "{{ inventory_hostname_short }}.{{ mgmt_domain }}"
        provision_gpu: {power_limit: "{{ 200 if 'v100' in group_names else 300 }}"}
      hosts:
        rig1.lab:
        rig2.lab: {ansible_host: "{{ bmc_net | replace('.0/24', '.12') }}"}
      children:
        v100: {hosts: {rig4.lab: }}
""",
    "group_vars/gpu.yml": "ansible_port: '{{ base_port + 22 }}'\nbmc_net: 10.1.7.0/24\n",
}


@needs_ansible
def test_templates_render_as_ansible_renders_them(tmp_path):
    root = tree(tmp_path, TEMPLATED)
    hosts = load_inventory(root / "hosts.yml").hosts
    ours = {name: [h.address, h.port, h.settings.gpu.power_limit] for name, h in hosts.items()}
    assert ours == ansible_rendered(root / "hosts.yml", "[ansible_host, ansible_port | int, provision_gpu.power_limit]", tmp_path)
    assert ours["rig2.lab"] == ["10.1.7.12", 2222, 300] and ours["rig4.lab"] == ["rig4.mgmt.example", 2222, 200]
    assert hosts["rig1.lab"].origins["ansible_host"] == f"{root / 'hosts.yml'} (group gpu)"


@pytest.mark.parametrize("value, said", [
    ("{{ nowhere }}", "cannot render '{{ nowhere }}': 'nowhere' is undefined"),
    ("{{ '10.0.0.0/24' | ipaddr('1') }}", "No filter named 'ipaddr'. (Ansible's filters are not provision's"),
    ("{{ lookup('env', 'HOME') }}", "'lookup' is undefined (Ansible's lookups are not provision's"),
    ("{{ ansible_host }}", "host leads back to itself"),
    ("{{ 'x' ~ }}", "cannot render"),
    ("{{ '-oProxyCommand=x' }}", "ansible_host: got '-oProxyCommand=x': not allowed here"),  # rendered, then checked
])
def test_a_template_provision_cannot_render_names_the_host_and_key(tmp_path, value, said):
    root = tree(tmp_path, {"hosts.yml": "gpu:\n  hosts:\n    rig1:\n      ansible_host: \"" + value + "\"\n"
                                        "    rig2:\n      ansible_host: 10.0.0.2\n"})
    inventory = load_inventory(root / "hosts.yml")  # the address of rig1 is rig1's problem alone
    assert inventory.refusals(inventory.select("rig2")) == []
    [problem] = inventory.refusals(inventory.select("rig1"))
    assert (problem.file, problem.where) == (str(root / "hosts.yml"), "host rig1")
    assert said in str(problem), str(problem)


# --- -e/--extra-vars ---------------------------------------------------------------------------------------


def test_extra_vars_are_above_everything_in_every_form(tmp_path):
    root = tree(tmp_path, {"hosts": "[gpu]\nrig1 ansible_user=inline\n",
                           "host_vars/rig1.yml": "provision_gpu: {persistence: true, power_limit: 250}\n",
                           "more.yml": "provision_gpu: {clocks: {mem: 877, sm: 1005}}\n"})
    inventory = load_inventory(root / "hosts", extra_vars=["ansible_user=ops ansible_port=2222",
                                                           '{"provision_gpu": {"power_limit": 180}}', f"@{root / 'more.yml'}"])
    rig1 = inventory.hosts["rig1"]
    assert (rig1.user, rig1.port) == ("ops", 2222)  # key=value gives text, read as Ansible reads a port
    gpu = rig1.settings.gpu
    assert (gpu.persistence, gpu.power_limit, gpu.clocks.mem) == (True, 180, 877)  # blocks merge key by key
    assert rig1.origins["provision_gpu.power_limit"] == '-e {"provision_gpu": {"power_limit": 180}} (extra vars)'
    assert rig1.origins["provision_gpu.clocks.sm"] == f"{root / 'more.yml'} (extra vars)"


@pytest.mark.parametrize("value, said", [
    ("power_limit", "'power_limit' is not key=value"),
    ("[1, 2]", "is not a mapping of variables"),
    ("{gpu: ", "is not valid YAML or JSON"),
    ('{"provision_gpu": {"power_limit": 5000}}', "power_limit"),
    ("@/nowhere.yml", "cannot read variables file"),
])
def test_bad_extra_vars_are_errors_before_any_host_is_touched(tmp_path, value, said):
    root = tree(tmp_path, {"hosts": "[gpu]\nrig1\n"})
    result = CliRunner().invoke(main, ["apply", str(root / "hosts"), "--check", "-e", value])
    assert result.exit_code == 2 and said in result.output, result.output


@needs_ansible
def test_the_shipped_ansible_style_example_reads_as_ansible_reads_it(tmp_path):
    example = REPO / "inventories" / "ansible-style"
    view, theirs = provision_view(example), ansible_view(example, home=tmp_path)
    assert {h: v[0] for h, v in view.items()} == {h: v[0] for h, v in theirs.items()}
    assert {h: v[1][1:] for h, v in view.items()} == {h: v[1][1:] for h, v in theirs.items()}  # the address
    addresses = ansible_rendered(example, "ansible_host", tmp_path)  # is a template: the debug module renders it
    assert {h: v[1][0] for h, v in view.items()} == addresses and addresses["gpu04"] == "10.0.1.4"
    assert load_inventory(example).ignored == ["driver", "gpu", "nfs_config", "ntp_servers", "slurm_version", "user"]


def test_apply_v_says_how_many_other_roles_variables_were_left_alone(tmp_path):
    root = tree(tmp_path, {"hosts": "[gpu]\nrig1 ansible_host=192.0.2.1 rack=a3\n",  # TEST-NET: nobody answers
                           "group_vars/all.yml": "ntp_servers: [pool.ntp.org]\nnfs_config: {}\n"})
    result = CliRunner().invoke(main, ["apply", str(root / "hosts"), "--check", "-v", "--connect-timeout", "1",
                                       "--log", str(tmp_path / "runs.jsonl")])
    assert "3 other roles' variables in the inventory, left alone" in result.output, result.output
