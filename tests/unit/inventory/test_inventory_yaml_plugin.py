"""YAML inventories, and files Ansible tries as YAML, read as Ansible's yaml plugin reads them (and its ini plugin
after it, where the yaml plugin fails): held against `ansible-inventory --list` itself (ansible-core, a test-only
tool run as a subprocess, never imported), on generated inventories and on small ones in the style of real sites
(written for these tests, not copied): hosts, groups, their order, and the connection values."""

from __future__ import annotations

import subprocess
import textwrap

import pytest
import yaml
from ansible_oracle import ansible_view_and_tree, needs_ansible, provision_view_and_tree, run_ansible_inventory
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from provision.core.errors import InputError
from provision.inventory.load import load_inventory


def same_as_ansible(path) -> tuple[dict, dict]:
    """Provision's view and tree of the file, once held equal to Ansible's."""
    view, tree = provision_view_and_tree(path)
    assert (view, tree) == ansible_view_and_tree(path), path.read_text()
    return view, tree


def written(tmp_path, name: str, text: str):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


# --- the yaml plugin's constructs --------------------------------------------------------------------------

GALAXY_STYLE = """\
# In the style of a Galaxy site's compute cluster (written for this test)
all:
  children: galaxyservers
galaxyservers:
  hosts:
    gs-vcompute[01:05]:
      ansible_user: centos
    gs-head:
  vars:
galaxy_gpu:
  children: galaxyservers
  hosts: gs-gpu[a:c]:2222
"""


@needs_ansible
def test_ranges_in_yaml_keys_and_sections_written_as_one_name_read_as_ansible_reads_them(tmp_path):
    path = written(tmp_path, "hosts.yml", GALAXY_STYLE)
    view, tree = same_as_ansible(path)
    assert tree["galaxyservers"] == (["gs-vcompute01", "gs-vcompute02", "gs-vcompute03", "gs-vcompute04",
                                      "gs-vcompute05", "gs-head"], [])
    assert tree["galaxy_gpu"] == (["gs-gpua", "gs-gpub", "gs-gpuc"], ["galaxyservers"])
    assert view["gs-vcompute03"][1][1:3] == ("centos", None) and view["gs-gpub"][1][2] == 2222


@needs_ansible
def test_a_stride_several_ranges_and_a_host_written_twice_read_as_ansible_reads_them(tmp_path):
    path = written(tmp_path, "cluster.yaml", """\
        gpu:
          hosts:
            odd[1:10:2]:
            "rack[1:2]-n[a:b]":
            odd3:
              ansible_port: 2200
            spare: ""
            old: 0
          vars: site_flag
        login:
          hosts: head:2022
        """)
    view, tree = same_as_ansible(path)
    assert tree["gpu"][0] == ["odd1", "odd3", "odd5", "odd7", "odd9", "rack1-na", "rack1-nb", "rack2-na",
                              "rack2-nb", "spare", "old"]
    assert view["odd3"][1][2] == 2200 and view["head"][1][2] == 2022


@needs_ansible
@pytest.mark.parametrize("body, said", [
    ("g:\n  hosts: [a, b]\n", "hosts must be a mapping of names"),
    ("g:\n  children: 3\n  hosts:\n    a:\n", "children must be a mapping of names"),
    ("g:\n  hosts:\n    n[3:x]:\n", "a host range is of numbers or of single letters, found [3:x]"),
])
def test_what_the_yaml_plugin_refuses_is_refused_with_yamls_reason_alone(tmp_path, body, said):
    path = written(tmp_path, "hosts.yml", body)
    with pytest.raises(subprocess.CalledProcessError):  # Ansible's yaml plugin fails, then its ini plugin
        run_ansible_inventory(path, "--list")
    with pytest.raises(InputError) as error:
        load_inventory(path)
    words = str(error.value)
    assert said in words and "INI" not in words, words  # the file is a YAML mapping: INI's "g:" would be noise


@needs_ansible
@pytest.mark.parametrize("name, text", [
    ("hosts.yml", 'v6:\n  hosts:\n    "fe80::1":\n    "[2001:db8::5]:2222":\n    10.0.0.5:2200:\n'),
    ("hosts.ini", "[v6]\nfe80::1\n[2001:db8::5]:2222\n10.0.0.5:2200\n"),  # a host line, not a section
])
def test_ipv6_addresses_as_host_names_with_and_without_a_port_read_as_ansible_reads_them(tmp_path, name, text):
    view, tree = same_as_ansible(written(tmp_path, name, text))
    assert tree["v6"] == (["fe80::1", "2001:db8::5", "10.0.0.5"], []) and view["2001:db8::5"][1][2] == 2222


# --- files the yaml plugin cannot read: its ini plugin, next in Ansible's enabled list ------------------------

TERRAFORM_STYLE = """\
# In the style of what a terraform template writes for a cloud Slurm cluster (written for this test)
[slurm_controller]
controller ansible_host=10.10.0.2

[slurm_compute]
compute-[0:3] ansible_user=rocky

[slurm_cluster:children]
slurm_compute
slurm_controller

[slurm_cluster:vars]
ansible_ssh_common_args='-o StrictHostKeyChecking=no'
"""


@needs_ansible
@pytest.mark.parametrize("name", ["inventory.yaml", "hosts.yml", "hosts"])
def test_ini_text_in_a_file_ansible_tries_as_yaml_is_read_as_ini(tmp_path, name):
    path = written(tmp_path, name, TERRAFORM_STYLE)
    view, tree = same_as_ansible(path)
    assert tree["slurm_cluster"] == ([], ["slurm_compute", "slurm_controller"])  # both defined above: as listed
    assert view["compute-3"] == ({"slurm_compute", "slurm_cluster"}, ("compute-3", "rocky", None, "ssh", None, None))


@needs_ansible
def test_host_names_one_per_line_in_a_yml_file_are_ini_hosts(tmp_path):
    path = written(tmp_path, "nodes.yml", "gpu-node1\ngpu-node2:2222\n")
    assert same_as_ansible(path)[1]["ungrouped"] == (["gpu-node1", "gpu-node2"], [])


def test_a_file_neither_reader_takes_says_what_each_said(tmp_path):
    path = written(tmp_path, "hosts.yaml", "[gpu\nnode1\n")
    with pytest.raises(InputError) as error:
        load_inventory(path)
    lines = str(error.value).splitlines()
    assert len(lines) == 2, lines
    assert "read as YAML: invalid YAML at line" in lines[0]
    assert "read as INI, line 1: invalid section header: [gpu" in lines[1]


def test_a_control_character_neither_reader_takes_is_an_input_error(tmp_path):
    path = tmp_path / "hosts.yml"
    path.write_bytes(b"\x08all:\n  hosts:\n    h: {}\n")  # YAML refuses it before any event: INI then
    with pytest.raises(InputError) as error:
        load_inventory(path)
    assert "read as YAML: invalid YAML" in str(error.value) and "read as INI, line 1" in str(error.value)


def test_an_ini_extension_is_never_read_as_yaml_nor_a_toml_one_as_ini(tmp_path):
    with pytest.raises(InputError) as error:  # Ansible's yaml plugin takes no .ini file: its ini plugin fails
        load_inventory(written(tmp_path, "hosts.ini", "all:\n  hosts:\n    a:\n"))
    assert "cannot read the host 'all:'" in str(error.value) and "YAML is read from a file named .yml" in str(
        error.value)
    with pytest.raises(InputError) as error:
        load_inventory(written(tmp_path, "hosts.toml", "[gpu]\nnode1\n"))
    assert "is a TOML inventory, which provision does not read" in str(error.value)


# --- generated inventories ----------------------------------------------------------------------------------

GROUPS = ["gpu", "login", "cluster", "rack-1", "v100"]
STEMS = ["node", "blade", "gs-vcompute"]
RANGES = ["", "[1:3]", "[01:04]", "[a:c]", "[1:9:4]", "[08:10]"]


@st.composite
def yaml_inventories(draw) -> str:
    """A YAML inventory as real sites write them, in every form the yaml plugin takes: ranges (and :PORT) in host
    keys, hosts, children and vars as a mapping, one name (a string) or nothing (null), groups at the top level
    or nested under a parent."""
    groups = draw(st.lists(st.sampled_from(GROUPS), min_size=1, max_size=4, unique=True))
    bodies: dict[str, dict] = {}
    keys: list[str] = []
    for group in groups:
        body: dict = {}
        hosts = {}
        for _ in range(draw(st.integers(0 if bodies else 1, 2))):
            key = f"{draw(st.sampled_from(STEMS))}{len(keys)}{draw(st.sampled_from(RANGES))}"
            key += draw(st.sampled_from(["", ":2022"]))
            keys.append(key)
            hosts[key] = draw(st.sampled_from([None, "", {"ansible_user": "ops"}, {"rack": "a3", "ansible_port": 22}]))
        # A host of an earlier group here too, written again (range and all). Not with a :PORT: where that differs
        # from the ansible_port written first, provision refuses the host written twice (build.py), Ansible takes
        # the later.
        again = [key for key in keys if not key.endswith(":2022")]
        if again and draw(st.booleans()):
            hosts.setdefault(draw(st.sampled_from(again)), None)
        form = draw(st.sampled_from(["mapping", "string"] if hosts else ["null", "absent"]))
        if form == "string" and len(hosts) == 1 and not any(hosts.values()):
            body["hosts"] = next(iter(hosts))
        elif hosts or form == "null":
            body["hosts"] = hosts or None
        if draw(st.booleans()):
            body["vars"] = draw(st.sampled_from([None, "site_flag", {"ansible_user": "ubuntu", "ntp": "pool"}]))
        bodies[group] = body
    # Children: a later group under an earlier one, as a string (one child) or a mapping; the rest at the top.
    top = dict(bodies)
    for i, parent in enumerate(groups):
        children = [g for g in groups[i + 1:] if g in top and draw(st.booleans())]
        if not children:
            continue
        if len(children) == 1 and draw(st.booleans()):
            bodies[parent]["children"] = children[0]
            continue
        bodies[parent]["children"] = {child: (top.pop(child) or None) if draw(st.booleans()) else None
                                      for child in children}
    if draw(st.booleans()):  # under all:, as most sites write it
        top = {"all": {"children": top, **({"vars": {"ansible_user": "admin"}} if draw(st.booleans()) else {})}}
    return yaml.safe_dump(top, sort_keys=False)


@needs_ansible
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=yaml_inventories(), name=st.sampled_from(["hosts.yml", "inventory.yaml", "hosts"]))
def test_generated_yaml_inventories_read_as_ansible_reads_them(tmp_path, text, name):
    path = tmp_path / name
    path.write_text(text)
    same_as_ansible(path)
