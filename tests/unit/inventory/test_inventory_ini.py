"""INI inventories, read as Ansible reads them: held against `ansible-inventory --list` itself (ansible-core, a
test-only tool run as a subprocess, never imported: it is GPL, provision is Apache-2.0), on generated
inventories and on a DeepOps-style one; and the errors a user gets for what Ansible would refuse too."""

from __future__ import annotations

import subprocess

import pytest
from ansible_oracle import (ansible_selected, ansible_view, ansible_view_and_tree, needs_ansible, provision_view,
                            provision_view_and_tree, run_ansible_inventory)
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from provision.cli import main
from provision.core.errors import InputError
from provision.inventory.formats.ini import expand, parse
from provision.inventory.load import load_inventory
from provision.inventory.select import select

# --- generated inventories --------------------------------------------------------------------------------

GROUPS = ["gpu", "login", "cluster", "rack-1", "v100"]
KEYS = {"ansible_user": st.sampled_from(["ubuntu", "root", "'admin'", '"ops"']),
        "ansible_port": st.sampled_from(["22", "2222", "'2200'"]),
        "ansible_connection": st.sampled_from(["ssh", "local"])}


@st.composite
def ini_inventories(draw) -> str:
    groups = draw(st.lists(st.sampled_from(GROUPS), min_size=1, max_size=4, unique=True))
    # Where a variable is set: on host lines, in some groups' :vars (siblings too: their order decides), or both.
    owners = {key: set(draw(st.lists(st.sampled_from(["host", *groups]), max_size=3))) for key in KEYS}
    lines = []
    lonely = draw(st.booleans())
    if lonely:
        lines.append("lonely ansible_host=192.0.2.1")  # before any section: ungrouped
    used: set[str] = set()
    sections = []  # each a list of lines, the section's header first
    for group in groups:
        section = [f"[{group}]"]
        for _ in range(draw(st.integers(0 if lonely or used else 1, 2))):
            stem = draw(st.sampled_from(["node", "blade", "gpu-"]))
            rng = draw(st.sampled_from(["", "[1:3]", "[01:04]", "[a:c]", "[1:9:4]", "[08:10]"]))
            port = draw(st.sampled_from(["", ":2022"]))
            pattern = f"{stem}{len(used)}{rng}"
            used.add(pattern)
            variables = [f"{key}={draw(KEYS[key])}" for key in KEYS if "host" in owners[key] and draw(st.booleans())]
            if draw(st.booleans()):  # another role's variable: left alone
                variables.append(draw(st.sampled_from(["rack=a3", "ib_subnet=10.1.0.0/16", "debug=True"])))
            if not rng and draw(st.booleans()):  # one machine, one address (provision refuses a shared one)
                variables.append(draw(st.sampled_from([f"ansible_host=10.0.{len(used)}.5",
                                                       f"ansible_host='node{len(used)}.example'"])))
            section.append(" ".join([pattern + port, *variables]))
        sections.append(section)
        group_vars = [f"{key}={draw(KEYS[key])}" for key in KEYS if group in owners[key]]
        if draw(st.integers(0, 4)) == 0:
            group_vars.append(f"ansible_group_priority={draw(st.integers(0, 3))}")
        group_vars += ["ntp_server=pool.ntp.org"] if draw(st.booleans()) else []
        if group_vars:
            sections.append([f"[{group}:vars]", *group_vars])
    for i, parent in enumerate(groups):
        children = draw(st.permutations([g for g in groups[i + 1:] if draw(st.booleans())]))
        if children:
            sections.append([f"[{parent}:children]", *children])
    # Sections in any order (a [parent:children] list before or after its children's sections, :vars first):
    # Ansible orders a group's children by where their sections come, not by the list.
    for section in draw(st.permutations(sections)):
        lines += section
    if draw(st.booleans()):
        lines.insert(0, "# a comment; and an empty line")
        lines.insert(1, "")
    return "\n".join(lines) + "\n"


@needs_ansible
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=ini_inventories(), name=st.sampled_from(["hosts", "hosts.ini", "inventory.yaml"]))
def test_generated_ini_inventories_read_as_ansible_reads_them(tmp_path, text, name):
    path = tmp_path / name  # INI text in a .yaml file too: Ansible's yaml plugin fails on it, its ini plugin reads it
    path.write_text(text)
    assert provision_view_and_tree(path) == ansible_view_and_tree(path), text


DEEPOPS_STYLE = """\
# Written in the style of a DeepOps cluster's inventory (not copied from one)
[all]
mgmt01     ansible_host=10.0.0.1
gpu01      ansible_host=10.0.0.11
gpu02      ansible_host=10.0.0.12
gpu[03:04] ansible_user=deepops

[kube-master]
mgmt01

[etcd]
mgmt01

[slurm-master]
mgmt01

[slurm-node]
gpu01
gpu02
gpu[03:04]

[slurm-cluster:children]
slurm-master
slurm-node

[slurm-node:vars]
ansible_port=2222

[all:vars]
ansible_user=ubuntu
"""


@needs_ansible
def test_a_deepops_style_inventory_reads_as_ansible_reads_it(tmp_path):
    path = tmp_path / "hosts.ini"
    path.write_text(DEEPOPS_STYLE)
    view = provision_view(path)
    assert view == ansible_view(path)
    assert view["gpu03"] == ({"slurm-node", "slurm-cluster"}, ("gpu03", "deepops", 2222, "ssh", None, None))
    assert view["mgmt01"][0] == {"kube-master", "etcd", "slurm-master", "slurm-cluster"}


def test_provision_blocks_in_ini_are_python_literals_and_a_host_line_wins_over_its_group(tmp_path):
    path = tmp_path / "hosts"
    path.write_text("[v100]\nrig1 provision_gpu=\"{'power_limit': 250}\"\nrig2\n[v100:vars]\n"
                    "provision_gpu={'persistence': True, 'power_limit': 200, 'clocks': {'mem': 877, 'sm': 1005}}\n")
    rig1, rig2 = load_inventory(path).hosts.values()
    assert (rig1.settings.gpu.power_limit, rig2.settings.gpu.power_limit) == (250, 200)
    # provision merges its blocks key by key (Ansible's default hash_behaviour would replace rig1's whole gpu)
    assert rig1.settings.gpu.persistence is True and rig1.settings.gpu.clocks.mem == 877


def test_ranges_expand_as_written():
    assert expand("node[01:03]", 1) == ["node01", "node02", "node03"]
    assert expand("blade[a:c]-[1:2]", 1) == ["bladea-1", "bladea-2", "bladeb-1", "bladeb-2", "bladec-1", "bladec-2"]
    assert expand("odd[1:9:4]", 1) == ["odd1", "odd5", "odd9"]
    assert expand("n[:2]", 1) == ["n0", "n1", "n2"]


@pytest.mark.parametrize("text, said", [
    ("[gpu\nnode1\n", "invalid section header: [gpu"),
    ("[gpu:things]\nnode1\n", "invalid section type 'things'"),
    ("[gpu]\nnode1 user\n", "expected key=value host variables, found 'user'"),
    ("[gpu]\nnode[3:1]\n", None),  # an empty range: no host, as Ansible
    ("[gpu]\nnode[01:3]\n", "same width at both ends"),
    ("[gpu]\nnode[1:x]\n", "of numbers or of single letters"),
    ("[gpu]\nnode1 a='unclosed\n", "close the quote"),
    ("[gpu:vars]\njust-a-word\n", "a [group:vars] line is NAME=VALUE"),
    ("[a:children]\nb\n[b:children]\na\n", "groups contain each other: a -> b -> a"),
])
def test_what_ansible_refuses_is_an_error_naming_the_line(tmp_path, text, said):
    path = tmp_path / "hosts.ini"
    path.write_text(text)
    if said is None:
        assert parse(text)["gpu"] == {}
        return
    with pytest.raises(InputError) as error:
        load_inventory(path)
    words = str(error.value)
    assert said in words and (str(path) in words), words


def test_a_yaml_file_without_extension_is_still_yaml_and_a_broken_one_says_yamls_reason(tmp_path):
    yaml_hosts = tmp_path / "hosts"
    yaml_hosts.write_text("all:\n  children:\n    gpu:\n      hosts:\n        rig1:\n          ansible_port: 2222\n")
    assert load_inventory(yaml_hosts).hosts["rig1"].port == 2222
    broken = tmp_path / "inventory"
    broken.write_text("all:\n  children: [\n[gpu\n")
    with pytest.raises(InputError) as error:
        load_inventory(broken)
    # INI is tried too, as Ansible tries it, but a file that opens as a YAML mapping is meant as YAML: INI's
    # "cannot read the host 'all:'" would only hide the line to fix.
    assert str(error.value).splitlines() == [f"{broken}: invalid YAML at line 4, column 1: expected ',' or ']', "
                                             "but got '<stream end>' (while parsing a flow sequence that starts at "
                                             "line 3)"]


# --- the order of a group's children -------------------------------------------------------------------------

OUT_OF_ORDER = """\
# In the style of an HPC site's inventory: the cluster's parts listed first, defined below (written for this test)
[cluster:children]
compute
storage
login

[login]
login01

[cluster:vars]
ansible_user=hpc

[storage]
nfs01

[compute:children]
gpu
cpu

[cpu]
cpu[01:02]

[gpu]
gpu[01:03]
"""


@needs_ansible
def test_children_are_ordered_by_where_their_sections_come_as_ansible_orders_them(tmp_path):
    path = tmp_path / "hosts"
    path.write_text(OUT_OF_ORDER)
    view, tree = provision_view_and_tree(path)
    assert (view, tree) == ansible_view_and_tree(path)
    assert tree["cluster"] == ([], ["login", "storage", "compute"]) and tree["compute"] == ([], ["cpu", "gpu"])
    inventory = load_inventory(path)
    for pattern in ("cluster[0]", "cluster[-1]", "cluster[1:3]", "compute[0]", "compute[-1]", "cluster"):
        assert [h.name for h in select(inventory, pattern)] == ansible_selected(path, pattern), pattern
    drawn = CliRunner().invoke(main, ["inventory", "-i", str(path), "--graph"], catch_exceptions=False)
    assert drawn.output == run_ansible_inventory(path, "--graph")


CLOUD_HPC_STYLE = """\
# In the style of a cloud HPC stack's terraform-written inventory (written for this test): empty sections kept for
# later, the parents' lists at the end, [all:children] naming some groups, spaces around = in :vars
[bastion]
hpc-bastion ansible_host=172.16.0.2 ansible_user=opc role=bastion
[slurm_backup]
[login]
hpc-login ansible_host=172.16.0.3 ansible_user=opc role=login
[compute_to_add]
[compute_configured]
gpu-node-1 ansible_host=172.16.1.11 ansible_user=opc role=compute
gpu-node-2 ansible_host=172.16.1.12 ansible_user=opc role=compute
[compute_to_destroy]
[compute:children]
compute_to_add
compute_configured
[nfs]
hpc-nfs ansible_user=opc role=nfs
[all:children]
bastion
compute
[all:vars]
ansible_connection=ssh
cluster_name = hpc-a
"""


@needs_ansible
def test_all_s_children_named_and_not_named_come_in_ansible_s_order(tmp_path):
    path = tmp_path / "inventory.yaml"  # as terraform names it: INI text that Ansible's yaml plugin leaves to INI
    path.write_text(CLOUD_HPC_STYLE)
    view, tree = provision_view_and_tree(path)
    assert (view, tree) == ansible_view_and_tree(path)
    assert tree["all"][1] == ["ungrouped", "bastion", "compute", "slurm_backup", "login", "compute_to_destroy", "nfs"]
    inventory = load_inventory(path)
    for pattern in ("all[0]", "all[-1]", "all[1:2]", "compute[-1]"):
        assert [h.name for h in select(inventory, pattern)] == ansible_selected(path, pattern), pattern


@needs_ansible
@pytest.mark.parametrize("text, line, said", [
    ("[cluster:children]\nb\n[b:vars]\nx=1\n", 2, "[cluster:children] names the group 'b', which no section defines"),
    ("[b:vars]\nx=1\n[cluster:children]\nc\nb\n[c]\nh3\n", 1, "[b:vars] is for a group that no section defines"),
])
def test_a_group_only_named_or_given_vars_is_refused_as_ansible_refuses_it(tmp_path, text, line, said):
    path = tmp_path / "hosts.ini"
    path.write_text(text)
    with pytest.raises(subprocess.CalledProcessError):
        ansible_view(path)
    with pytest.raises(InputError) as error:
        load_inventory(path)
    assert f"line {line}: {said}" in str(error.value)


def test_an_ansible_port_on_the_line_wins_over_name_port_as_in_ansible():
    [(name, variables)] = [(h, v) for h, v in parse("[g]\nnode0:2022 ansible_port=22\n")["g"]
                           ["hosts"].items()]
    assert (name, variables) == ("node0", {"ansible_port": 22})
