"""Loading the YAML inventory: structure, precedence, every refusal, --limit patterns, the basement file."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from provision.core.errors import InputError
from provision.inventory.model import Inventory
from provision.inventory.load import load_inventory, local_inventory
from paths import REPO

BASEMENT = REPO / "inventories" / "basement.yaml"


@pytest.fixture
def inventory(tmp_path):
    """Write YAML text to a file, load it."""
    def load(text: str) -> Inventory:
        return load_inventory(write(tmp_path, text))
    return load


@pytest.fixture
def problems(tmp_path):
    """Write YAML text to a file; the problems its loading raises, as printed."""
    def collect(text: str) -> list[str]:
        path = write(tmp_path, text)
        with pytest.raises(InputError) as caught:
            load_inventory(path)
        lines = [str(p) for p in caught.value.problems]
        assert all(line.startswith(f"{path}: ") for line in lines), lines
        return lines
    return collect


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "inventory.yaml"
    path.write_text(textwrap.dedent(text))
    return str(path)


def one_line_with(lines: list[str], *texts: str) -> str:
    found = [line for line in lines if all(t in line for t in texts)]
    assert len(found) == 1, lines
    return found[0]


# --- loading ---

def test_hosts_groups_and_connections(inventory):
    inv = inventory("""
        all:
          children:
            v100:
              hosts:
                v100-1: {ansible_host: 192.0.2.10, ansible_user: ops, ansible_port: 2222}
                v100-2:
                here: {ansible_connection: local}
                old: {ansible_connection: paramiko, ansible_host: 192.0.2.12, ansible_port: 22}
        """)
    first, second, here, old = inv.hosts.values()
    assert (first.name, first.address, first.user, first.port, first.connection) == (
        "v100-1", "192.0.2.10", "ops", 2222, "ssh")
    assert (second.address, second.user, second.port, second.connection) == ("v100-2", None, None, "ssh")
    assert here.connection == "local" and (old.connection, old.address) == ("ssh", "192.0.2.12")
    assert first.groups == ["all", "v100"] and first.settings.gpu is None
    assert first.vars == {"ansible_host": "192.0.2.10", "ansible_user": "ops", "ansible_port": 2222}
    assert inv.groups["v100"].hosts == ["v100-1", "v100-2", "here", "old"]
    assert inv.groups["v100"].parents == ["all"] and inv.groups["all"].children == ["v100"]


def test_ansible_style_top_level_groups_are_children_of_all(inventory):
    inv = inventory("""
        v100:
          hosts: {a: }
          vars: {provision_gpu: {power_limit: 200}}
        rtx:
          hosts: {b: }
        """)
    assert list(inv.hosts) == ["a", "b"] and inv.groups["all"].children == ["v100", "rtx"]
    assert inv.hosts["a"].settings.gpu.power_limit == 200 and inv.hosts["b"].groups == ["all", "rtx"]


def test_hosts_directly_under_all_are_fine_without_groups(inventory):
    inv = inventory("all: {hosts: {a: , b: }, vars: {provision_gpu: {persistence: true}}}")
    assert [h.groups for h in inv.hosts.values()] == [["all", "ungrouped"]] * 2  # as Ansible places them
    assert inv.hosts["b"].settings.gpu.persistence is True


def test_other_ansible_variables_are_ignored_but_kept(inventory):
    inv = inventory("""
        all:
          hosts:
            a: {ansible_python_interpreter: /usr/bin/python3, ansible_ssh_pipelining: true}
        """)
    assert inv.hosts["a"].vars["ansible_python_interpreter"] == "/usr/bin/python3"


def test_yaml_anchors_and_merge_keys_work(inventory):
    inv = inventory("""
        all:
          children:
            v100:
              hosts:
                a: &node {provision_gpu: {power_limit: 200}}
                b: {<<: *node, ansible_user: ops}
        """)
    assert [h.settings.gpu.power_limit for h in inv.hosts.values()] == [200, 200]


# --- precedence ---

def test_precedence_all_parent_child_host_with_deep_merge(inventory):
    inv = inventory("""
        all:
          vars:
            provision_gpu: {persistence: true, power_limit: 300}
            provision_nccl: {debug: WARN}
            provision_custom: {rack: basement, owner: {name: ann}}
          children:
            gpu_nodes:
              vars:
                provision_gpu: {power_limit: 250, clocks: {mem: 877, sm: 1100}}
                provision_custom: {owner: {mail: ann@example.org}}
              children:
                v100:
                  vars:
                    provision_gpu: {power_limit: 200}
                    ansible_user: ops
                  hosts:
                    v100-1:
                      provision_gpu: {clocks: {sm: 1005}}
                    v100-2:
                      ansible_user: root
        """)
    one, two = inv.hosts["v100-1"], inv.hosts["v100-2"]
    assert one.groups == ["all", "gpu_nodes", "v100"]
    gpu = one.settings.gpu
    assert (gpu.persistence, gpu.power_limit, gpu.clocks.mem, gpu.clocks.sm) == (True, 200, 877, 1005)
    assert two.settings.gpu.clocks.sm == 1100 and one.settings.nccl.debug == "WARN"
    assert one.settings.custom == {"rack": "basement", "owner": {"name": "ann", "mail": "ann@example.org"}}
    assert (one.user, two.user) == ("ops", "root")
    assert inv.groups["gpu_nodes"].vars["provision_gpu"] == {"power_limit": 250, "clocks": {"mem": 877, "sm": 1100}}


def test_lists_replace_instead_of_merging(inventory):
    inv = inventory("""
        all:
          children:
            rtx:
              vars:
                provision_gpu: {overrides: [{index: 0, power_limit: 300}, {index: 1, power_limit: 310}]}
              hosts:
                a: {provision_gpu: {overrides: [{index: 2, power_limit: 320}]}}
        """)
    assert [o.index for o in inv.hosts["a"].settings.gpu.overrides] == [2]


def test_a_child_group_outranks_its_parent_even_when_written_first(inventory):
    inv = inventory("""
        v100:
          hosts: {a: }
          vars: {provision_gpu: {power_limit: 200}}
        gpu_nodes:
          children: {v100: }
          vars: {provision_gpu: {power_limit: 250}}
        """)
    assert inv.hosts["a"].groups == ["all", "gpu_nodes", "v100"]
    assert inv.hosts["a"].settings.gpu.power_limit == 200


def test_of_two_sibling_groups_the_one_whose_name_sorts_last_wins_as_in_ansible(inventory):
    text = """
        all:
          children:
            quiet:
              hosts: {a: , b: }
              vars: {provision_gpu: {power_limit: 150, persistence: true}}
            fast:
              hosts: {a: }
              vars: {provision_gpu: {power_limit: 250}}
        """
    inv = inventory(text)
    a, b = inv.hosts["a"], inv.hosts["b"]
    assert a.groups == ["all", "fast", "quiet"]  # by name, not where written
    assert (a.settings.gpu.power_limit, a.settings.gpu.persistence, b.settings.gpu.power_limit) == (150, True, 150)
    # ansible_group_priority goes before the name
    inv = inventory(text.replace("vars: {provision_gpu: {power_limit: 250}}",
                                 "vars: {provision_gpu: {power_limit: 250}, ansible_group_priority: 10}"))
    assert inv.hosts["a"].groups == ["all", "quiet", "fast"] and inv.hosts["a"].settings.gpu.power_limit == 250


def test_a_host_written_in_two_groups_merges_its_variables(inventory):
    inv = inventory("""
        all:
          children:
            v100:
              hosts:
                a: {ansible_host: 192.0.2.10}
            slurm_nodes:
              hosts:
                a: {provision_slurm: {role: compute, controller: a}}
        """)
    assert inv.hosts["a"].address == "192.0.2.10" and inv.hosts["a"].settings.slurm.role == "compute"
    assert inv.hosts["a"].groups == ["all", "slurm_nodes", "v100"]  # by name


def test_slurm_and_launcher_clusters_are_checked_across_hosts(problems):
    text = """
        all:
          children:
            blades:
              hosts:
                b1: {ansible_host: 192.0.2.11}
                b2: {ansible_host: 192.0.2.12, provision_launcher: {group: bladez}}
              vars: {provision_slurm: {%s}}
            head:
              hosts:
                h1: {ansible_host: 192.0.2.1%s}
        """
    lines = problems(text % ("role: compute", ""))
    one_line_with(lines, "host b2: provision_launcher.group: 'bladez' is not a group", "did you mean 'blades'?")
    one_line_with(lines, "host b1: provision_slurm.controller: is required: the host where slurmctld runs")
    lines = problems(text % ("controller: h1", ""))
    one_line_with(lines, "host h1: provision_slurm: is not set, but b1 names this host as its Slurm controller")


def test_a_host_given_two_different_values_takes_the_later_but_provisions_own_are_asked(problems, inventory):
    text = """
        all:
          children:
            v100:
              hosts:
                a: {ansible_host: 192.0.2.10, role: nfs, provision_gpu: {power_limit: 200}}
            slurm_nodes:
              hosts:
                a: {ansible_host: 192.0.2.11, role: compute, provision_gpu: {power_limit: %s}}
        """
    assert inventory(text % 200).hosts["a"].address == "192.0.2.11"  # as Ansible: the later mention's
    lines = problems(text % 250)
    assert len(lines) == 1, lines
    one_line_with(lines, "host a: provision_gpu.power_limit: set to different values", "again in group slurm_nodes",
                  "set it in one place")


# --- refusals ---

def test_yaml_syntax_errors_give_the_line(problems):
    lines = problems("""
        all:
          hosts:
            a:
            gpu: power_limit: 200
        """)
    one_line_with(lines, "invalid YAML at line 5", "mapping values are not allowed here")
    lines = problems("""
        all:
          hosts:
            a: {provision_gpu: {power_limit: 200}
        """)
    one_line_with(lines, "invalid YAML at line 5", "while parsing a flow mapping that starts at line 4")


def test_a_key_written_twice_is_refused_with_its_line(problems):
    lines = problems("""
        all:
          children:
            v100:
              hosts: {a: }
            v100:
              hosts: {b: }
        """)
    one_line_with(lines, "invalid YAML at line 6", "'v100' is written twice")


@pytest.mark.parametrize("names", ["hosts", "children"])
@pytest.mark.parametrize("first, second", [("1", "true"), ("on", "yes"), ("1", "1.0")])
def test_names_that_yaml_reads_as_the_same_value_are_refused_with_their_lines(problems, names, first, second):
    # In a dict these are one key (1 == True == 1.0): one host would vanish and the other take its address.
    lines = problems(f"""
        all:
          {names}:
            {first}: {{host: 192.0.2.1}}
            {second}: {{host: 192.0.2.2}}
        """)
    assert len(lines) == 2, lines
    one_line_with(lines, f"all: {names}: line 4: {first!r} is read by YAML as the ", "not a name",
                  f"hint: quote it: '{first}':")
    one_line_with(lines, f"all: {names}: line 5: {second!r} is read by YAML as the ", "not a name")


@pytest.mark.parametrize("text, line", [
    ("all: {hosts: {true: }}", "all: hosts: line 1: 'true' is read by YAML as the boolean True, not a name"),
    ("all: {hosts: {~: }}", "all: hosts: line 1: '~' is read by YAML as null (no value), not a name"),
    ("all:\n  children:\n    v100:\n      children: {~: {hosts: {a: }}}\n",
     "group v100: children: line 4: '~' is read by YAML as null"),
    ("1: {hosts: {a: }}", "line 1: '1' is read by YAML as the number 1, not a name"),
    ("x: &h {2: }\nall: {hosts: {<<: *h, a: }}", "all: hosts: line 1: '2' is read by YAML as the number 2"),
])
def test_a_name_that_yaml_does_not_read_as_a_string_is_refused(problems, text, line):
    one_line_with(problems(text), line, "(hint: quote it: ")


def test_quoted_names_and_non_string_keys_in_variables_are_fine(inventory):
    inv = inventory("""
        all:
          children:
            "1":
              hosts:
                "true": {provision_custom: {1: one, false: off, ~: none}}
                '1.0':
        """)
    assert list(inv.hosts) == ["true", "1.0"] and list(inv.groups) == ["all", "1"]
    assert inv.hosts["true"].settings.custom == {1: "one", False: False, None: "none"}


@pytest.mark.parametrize("first, second", [("on", "yes"), ("1", "1.0"), ("1", "true")])
def test_two_keys_that_yaml_reads_as_the_same_value_are_refused_anywhere(problems, first, second):
    lines = problems(f"""
        all:
          hosts:
            a: {{custom: {{{first}: a, {second}: b}}}}
        """)
    one_line_with(lines, "invalid YAML at line 4", f"keys {first!r} (line 4) and {second!r} are both read by YAML as")


@pytest.mark.parametrize("text, message", [
    ("", "the inventory is empty"),
    ("- a\n- b\n", "the top level must be a mapping of groups, not a list"),
    ("all:\n  children:\n    v100:\n", "the inventory has no hosts"),
])
def test_empty_or_shapeless_inventories_are_refused(problems, text, message):
    one_line_with(problems(text), message)


def test_group_keys_are_checked_as_ansibles_yaml_plugin_checks_them(problems, inventory):
    """A section that is not a mapping is an error, as in Ansible; an unknown key, or a top-level group that is not
    a mapping, is read past with a warning, as Ansible's yaml plugin does."""
    lines = problems("""
        all:
          children:
            rtx:
              hosts: [b, c]
        """)
    one_line_with(lines, "group rtx: hosts: hosts must be a mapping", "not a list")
    inv = inventory("""
        all:
          children:
            v100:
              host: {a: }
              hosts: {b: }
              vars: {provision_gpu: {persistence: true}}
              provision_gpu: {power_limit: 200}
        spares: [c, d]
        """)
    assert list(inv.hosts) == ["b"] and inv.hosts["b"].settings.gpu.power_limit is None and "spares" not in inv.groups
    assert [s.split(": ", 1)[1] for s in inv.skipped] == [
        "group v100: key 'host' skipped: a group holds only hosts, children, vars (did you mean 'hosts'?)",
        "group v100: key 'provision_gpu' skipped: a group holds only hosts, children, vars (variables go under vars:)",
        "group 'spares' skipped: a group is a mapping of hosts, children, vars, not a list"]


def test_unknown_variables_point_at_where_they_are_written(problems):
    lines = problems("""
        all:
          vars:
            provision_gpus: {persistence: true}
            gpus: 4                                 # another role's: left alone
          children:
            v100:
              vars:
                provision_gpu: {power_limt: 200}
              hosts:
                a: {provision_sllurm: {role: compute}, usr: ops}
                b:
        """)
    assert len(lines) == 3, lines  # once where written, not once per host
    one_line_with(lines, "all: provision_gpus: unknown variable 'provision_gpus'", "did you mean 'provision_gpu'?")
    one_line_with(lines, "group v100: provision_gpu.power_limt: unknown key", "did you mean 'power_limit'?")
    one_line_with(lines, "host a: provision_sllurm: unknown variable", "did you mean 'provision_slurm'?")


def test_values_are_checked_where_written_with_the_allowed_range(problems):
    lines = problems("""
        all:
          children:
            v100:
              vars:
                provision_gpu:
                  power_limit: -5
                  overrides:
                    - {index: 0, power_limit: 150}
                    - {index: 1, power_limit: 9000}
              hosts:
                v100-1: {provision_nccl: {socket_nthreads: 8, nsocks_perthread: 16}}
        """)
    one_line_with(lines, "group v100: provision_gpu.power_limit: got -5", "> 0 and <= 1500", "hint:")
    one_line_with(lines, "group v100: provision_gpu.overrides[1].power_limit: got 9000", "<= 1500")
    one_line_with(lines, "host v100-1: provision_nccl: socket_nthreads x nsocks_perthread", "at most 64")


def test_rules_across_levels_are_checked_on_the_merged_host(problems):
    lines = problems("""
        all:
          children:
            rtx:
              vars:
                provision_nccl: {socket_nthreads: 8}
                provision_gpu: {clocks: {mem: 877}}
              hosts:
                a: {provision_nccl: {nsocks_perthread: 16}, provision_gpu: {clocks: {sm: 1005}}}
                b:
        """)
    assert len(lines) == 2, lines
    one_line_with(lines, "host a: provision_nccl: socket_nthreads x nsocks_perthread = 8 x 16 = 128", "NCCL")
    one_line_with(lines, "host b: provision_gpu.clocks.sm: required, missing", "MHz")


def test_of_two_names_for_one_setting_the_ssh_one_wins_as_in_ansible(inventory):
    hosts = inventory("all: {hosts: {a: {ansible_user: ops, ansible_ssh_user: root}, b: {ansible_ssh_port: 2222, "
                      "ansible_port: 22}}}").hosts
    assert (hosts["a"].user, hosts["b"].port) == ("root", 2222)


def refusals(inventory: Inventory, limit: str | None = None) -> list[str]:
    return [str(p) for p in inventory.refusals(inventory.select(limit))]


def test_connections_provision_cannot_use_are_refused_for_the_hosts_a_run_selects(inventory):
    inv = inventory("""
        all:
          children:
            windows: {hosts: {win1: , win2: }, vars: {ansible_connection: winrm}}
            gpu: {hosts: {rig1: }}
        """)
    [line] = refusals(inv)
    assert "group windows: ansible_connection: is 'winrm': provision reaches hosts by SSH" in line
    assert "(selected: win1, win2)" in line and "leave its hosts out: --limit 'all:!windows'" in line
    assert refusals(inv, "gpu") == refusals(inv, "all:!windows") == []


@pytest.mark.parametrize("key", ["ansible_password", "ansible_become_password", "ansible_become_pass"])
def test_passwords_are_refused_for_the_hosts_a_run_selects(inventory, key):
    inv = inventory(f"all: {{hosts: {{a: {{{key}: hunter2}}, b: }}}}")
    [line] = refusals(inv)
    assert f"host a: {key}: is a password" in line and "hunter2" not in line and "asked once at run time" in line
    assert refusals(inv, "b") == []


def test_a_refused_host_stops_the_command_before_any_host_is_touched(tmp_path):
    from click.testing import CliRunner
    from provision.cli import main
    path = write(tmp_path, "all: {hosts: {a: {ansible_connection: docker}, b: {ansible_connection: local}}}")
    refused = CliRunner().invoke(main, ["unlock", str(path)])
    assert refused.exit_code == 2 and "host a: ansible_connection: is 'docker'" in refused.output
    assert CliRunner().invoke(main, ["unlock", str(path), "--limit", "b"]).exit_code == 0


def test_a_host_in_no_group_while_groups_exist_is_ungrouped_as_in_ansible(inventory):
    """As Ansible reads it (a host whose group line was commented out, say): in "ungrouped", which
    `provision inventory --graph` shows."""
    inv = inventory("""
        all:
          hosts:
            stray:
          children:
            v100:
              hosts: {a: }
        """)
    assert inv.hosts["stray"].groups == ["all", "ungrouped"] and inv.groups["ungrouped"].hosts == ["stray"]


def test_group_cycles_are_named(problems):
    lines = problems("""
        all:
          children:
            a:
              hosts: {h: }
              children: {b: }
        b:
          children: {c: }
        c:
          children: {a: }
        """)
    one_line_with(lines, "groups contain each other: a -> b -> c -> a")


def test_a_group_inside_itself_is_a_cycle(problems):
    one_line_with(problems("all: {children: {a: {hosts: {h: }, children: {all: }}}}"),
                  "all: children: groups contain each other: all -> a -> all")


def test_a_name_used_for_a_group_and_a_host_is_refused(problems):
    lines = problems("all: {children: {v100: {hosts: {v100: , a: }}}}")
    one_line_with(lines, "host v100: 'v100' is both a host and a group name")


def test_names_that_break_limit_patterns_are_refused(problems):
    one_line_with(problems("all: {children: {v100: {hosts: {'a,b': }}}}"), "host a,b: name 'a,b'")


def test_two_hosts_at_one_address_and_port_are_refused(problems, inventory):
    lines = problems("""
        all:
          children:
            v100:
              hosts:
                a: {ansible_host: 192.0.2.10}
                b: {ansible_host: 192.0.2.10, ansible_port: 22}
                c: {ansible_host: 192.0.2.10, ansible_port: 2222}
        """)
    assert len(lines) == 1
    one_line_with(lines, "host b: host: 192.0.2.10:22 is also host 'a'", "list each machine once")


def test_the_slurm_controller_must_be_a_host_of_the_inventory(problems, inventory):
    text = """
        all:
          vars: {provision_slurm: {controller: %s}}
          children:
            compute:
              hosts: {head: , node1: }
        """
    assert inventory(text % "head").hosts["node1"].settings.slurm.controller == "head"
    one_line_with(problems(text % "haed"), "all: provision_slurm.controller: 'haed' is not a host", "did you mean 'head'?")


def test_all_problems_are_reported_together(problems):
    lines = problems("""
        all:
          vars: {provision_gpu: {persistence: maybe}}
          children:
            v100:
              hosts: {a: {provision_gpu: {count: 0}}, v100: }
            rtx:
              vars: {provision_nccl: {debug: LOUD}}
        """)
    for where in ("all: provision_gpu.persistence", "host a: provision_gpu.count", "host v100: 'v100' is both", "group rtx: provision_nccl.debug"):
        one_line_with(lines, where)


# --- select ---

@pytest.fixture
def cluster(inventory):
    return inventory("""
        all:
          children:
            gpu_nodes:
              children:
                v100:
                  hosts: {v100-1: }
                rtx3090:
                  hosts: {rtx3090-1: , rtx3090-2: }
            slurm:
              hosts: {rtx3090-2: , head: }
        """)


@pytest.mark.parametrize("limit, names", [
    (None, ["v100-1", "rtx3090-1", "rtx3090-2", "head"]),
    ("head", ["head"]),
    ("rtx3090", ["rtx3090-1", "rtx3090-2"]),
    ("head,v100", ["v100-1", "head"]),  # always in file order
    ("gpu_nodes", ["v100-1", "rtx3090-1", "rtx3090-2"]),  # nested groups count
    ("rtx*", ["rtx3090-1", "rtx3090-2"]),
    ("*-1", ["v100-1", "rtx3090-1"]),
    ("gpu_nodes,!rtx3090-1", ["v100-1", "rtx3090-2"]),
    ("!slurm", ["v100-1", "rtx3090-1"]),  # only exclusions: from all hosts
    ("gpu_nodes,&slurm", ["rtx3090-2"]),
    ("all,&gpu_nodes,!v100", ["rtx3090-1", "rtx3090-2"]),
])
def test_select_patterns(cluster, limit, names):
    assert [h.name for h in cluster.select(limit)] == names


def test_select_refuses_a_pattern_that_matches_nothing(cluster):
    with pytest.raises(InputError) as caught:
        cluster.select("v100,rtx3909")
    assert "'rtx3909' matches no host or group" in str(caught.value)
    assert "did you mean 'rtx3090'?" in str(caught.value)
    with pytest.raises(InputError) as caught:
        cluster.select("nothing*")
    assert "groups: all, gpu_nodes, v100, rtx3090, slurm; hosts: v100-1" in str(caught.value)


def test_select_refuses_an_empty_selection(cluster):
    with pytest.raises(InputError, match="'v100,&slurm' selects no host"):
        cluster.select("v100,&slurm")


# --- local ---

def test_local_inventory_is_this_machine():
    inv = local_inventory()
    [host] = inv.select(None)
    assert (host.name, host.connection, host.groups, host.settings.gpu) == ("localhost", "local", ["all", "ungrouped"], None)
    assert local_inventory({"provision_gpu": {"power_limit": 200}}).hosts["localhost"].settings.gpu.power_limit == 200


def test_local_inventory_validates_its_settings():
    with pytest.raises(InputError, match="<local>: host localhost: provision_gpu.power_limit: got -1"):
        local_inventory({"provision_gpu": {"power_limit": -1}})


# --- the basement inventory ---

def test_the_basement_inventory_loads_with_each_clusters_settings():
    inv = load_inventory(BASEMENT)
    assert list(inv.hosts) == ["v100-1", "rtx3090-1", "rtx3090-2", "rtx3090-3", "rtx3090-4", "rtx4090-1"]
    assert all(h.groups[:2] == ["all", "gpu_nodes"] and h.connection == "ssh" for h in inv.hosts.values())
    assert all(h.address.startswith(("192.0.2.", "198.51.100.")) for h in inv.hosts.values())
    for host in inv.hosts.values():
        assert host.settings.gpu.persistence is True
        assert (host.settings.launcher.group, host.settings.launcher.nproc_per_node) == (None, "gpu")

    v100 = inv.hosts["v100-1"].settings.gpu.for_gpu(0, "GPU-0", "Tesla V100-SXM2-16GB")
    assert (v100.power_limit, v100.clocks.mem, v100.clocks.sm) == (200, 877, 1005)

    for name in ("rtx3090-1", "rtx3090-4"):
        nccl = inv.hosts[name].settings.nccl
        assert (nccl.socket_ifname, nccl.socket_nthreads, nccl.expected_link_speed_mbps) == ("ens803f", 1, 10000)
    assert inv.hosts["v100-1"].settings.nccl is None

    rtx4090 = inv.hosts["rtx4090-1"].settings.gpu
    hot, cool = (rtx4090.for_gpu(i, f"GPU-{i}", "NVIDIA GeForce RTX 4090") for i in (3, 0))
    assert rtx4090.clocks is None and rtx4090.locked_clocks.sm == (210, 2520)
    assert (hot.power_limit, cool.power_limit, hot.locked_clocks.sm) == (300, 400, (210, 2520))
    assert [h.name for h in inv.select("rtx*,!rtx3090-2")] == ["rtx3090-1", "rtx3090-3", "rtx3090-4", "rtx4090-1"]


def test_the_readme_example_loads(tmp_path):
    readme = (BASEMENT.parents[1] / "docs" / "how-to" / "inventories.md").read_text()  # its first example
    example = next(block.split("```", 1)[0] for block in readme.split("```yaml\n")[1:] if "v100-1:" in block)
    inv = load_inventory(write(tmp_path, example))
    gpu = inv.hosts["v100-1"].settings.gpu
    assert (gpu.for_gpu(2, "GPU-2", "Tesla V100").power_limit, gpu.for_gpu(0, "GPU-0", "Tesla V100").power_limit) == (
        180, 200)


def test_an_ssh_config_is_found_beside_the_inventory_and_a_group_can_set_it(inventory, tmp_path):
    (tmp_path / "ssh_config").write_text("Host *\n  User ops\n")
    inv = inventory("""
        all:
          vars: {provision_ssh_config: ssh_config}
          hosts:
            a: {}
            b: {provision_ssh_config: /etc/ssh/ssh_config, ansible_become: false}
    """)
    assert inv.hosts["a"].ssh_config == str(tmp_path / "ssh_config") and inv.hosts["a"].become is True
    assert inv.hosts["b"].ssh_config == "/etc/ssh/ssh_config" and inv.hosts["b"].become is False


def refused_lines(tmp_path: Path, text: str) -> list[str]:
    """What stops a run that selects every host: how to reach a host is that host's business alone."""
    inventory = load_inventory(write(tmp_path, text))
    return [str(problem) for problem in inventory.refusals(list(inventory.hosts.values()))]


def test_a_key_path_with_a_nul_character_is_refused_not_a_crash(tmp_path):
    # hypothesis found it: os.stat raises ValueError (not OSError) on a NUL in the path
    [line] = refused_lines(tmp_path, """
        all:
          hosts:
            a: {provision_ssh_config: "h\\0"}
    """)
    assert "host a: provision_ssh_config: 'h\\x00': a path cannot hold a NUL character" in line


def test_an_ssh_config_that_is_not_there_is_refused_where_written(tmp_path):
    [line] = refused_lines(tmp_path, """
        all:
          hosts:
            a: {provision_ssh_config: nowhere/ssh_config}
    """)
    assert "host a: provision_ssh_config: 'nowhere/ssh_config': no such file" in line and str(tmp_path) in line
    [line] = refused_lines(tmp_path, """
        all:
          hosts:
            a: {ansible_become: "maybe"}
    """)
    assert "host a: ansible_become:" in line


def test_a_port_and_become_written_as_text_are_read_as_ansible_reads_them(tmp_path):
    path = tmp_path / "inventory.yaml"
    path.write_text('all:\n  hosts:\n    a: {ansible_port: "2222", ansible_become: "no"}\n'
                    '    b: {ansible_become: "yes", ansible_port: 22}\n')
    a, b = load_inventory(path).hosts.values()
    assert (a.port, a.become, b.port, b.become) == (2222, False, 22, True)


@pytest.mark.parametrize("name", ["gpu1\nExecStartPre=/bin/sh -c x", "gpu1\r", "gpu\x1b[2J"])
def test_a_name_with_a_control_character_is_refused(problems, name):
    quoted = name.encode("unicode_escape").decode()
    [line] = problems(f'all: {{hosts: {{"{quoted}": {{}}}}}}')
    assert "has a control character" in line and line.isprintable()  # escaped when shown, never raw


@pytest.mark.parametrize("key, value", [("ansible_host", "-oProxyCommand=touch /tmp/x"), ("ansible_host", "a b"),
                                        ("ansible_user", "root;touch x"), ("ansible_user", "-lroot"),
                                        ("ansible_host", "gpu1\nx")])
def test_addresses_and_users_that_could_be_read_as_options_or_shell_are_refused(tmp_path, key, value):
    quoted = value.encode("unicode_escape").decode()
    [line] = refused_lines(tmp_path, f'all: {{hosts: {{a: {{{key}: "{quoted}"}}}}}}')
    assert f"host a: {key}: got" in line and "not allowed here; allowed: a " in line and "pattern" not in line


def test_ipv6_and_plain_names_are_fine(inventory):
    inv = inventory('all: {hosts: {a: {ansible_host: "fe80::1%eth0", ansible_user: ops.admin}, b: {ansible_host: gpu-b.lab}}}')
    assert inv.hosts["a"].address == "fe80::1%eth0" and inv.hosts["b"].address == "gpu-b.lab"


def test_a_binary_inventory_is_bad_input_naming_the_file(tmp_path):
    path = tmp_path / "inventory.yaml"
    path.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00binary")
    with pytest.raises(InputError) as caught:
        load_inventory(path)
    assert str(caught.value).startswith(f"{path}: not a text file: byte 0 is not UTF-8")


OTHER_ROLES = """\
all:
  vars:
    ntp_servers: [0.pool.ntp.org]        # another role's variables: an inventory serves many
    slurm_version: 23.11
    nv_driver_branch: 580
    docker_password: !vault |
      $ANSIBLE_VAULT;1.1;AES256
      6162636465
    provision_gpu: {persistence: true}
  children:
    v100:
      hosts:
        rig1: {ansible_host: 192.0.2.10, rack: a3, count: 4}
"""


def test_other_roles_variables_are_left_alone_and_named(tmp_path):
    path = tmp_path / "inventory.yaml"
    path.write_text(OTHER_ROLES)
    inventory = load_inventory(path)
    rig1 = inventory.hosts["rig1"]
    assert rig1.address == "192.0.2.10" and rig1.settings.gpu.persistence is True
    assert inventory.ignored == ["count", "docker_password", "ntp_servers", "nv_driver_branch", "rack",
                                 "slurm_version"]


def test_a_typo_in_provisions_namespace_is_an_error_and_a_vaulted_connection_setting_refuses_its_host(tmp_path):
    text = """
        all:
          vars:
            provision_gpus: {persistence: true}
            power_limit: 200          # outside the namespace: another role's
          hosts:
            a:
              ansible_user: !vault |
                $ANSIBLE_VAULT;1.1;AES256
                6162
            b:
    """
    with pytest.raises(InputError) as caught:
        load_inventory(write(tmp_path, text))
    [line] = [str(p) for p in caught.value.problems]
    assert "all: provision_gpus: unknown variable 'provision_gpus'" in line and "did you mean 'provision_gpu'?" in line
    inventory = load_inventory(write(tmp_path, text.replace("provision_gpus", "provision_gpu")))
    assert "power_limit" in inventory.ignored and inventory.hosts["b"].settings.gpu.persistence is True
    [line] = [str(p) for p in inventory.refusals(list(inventory.hosts.values()))]
    assert "host a: ansible_user: is encrypted with Ansible Vault" in line and "--limit 'all:!a'" in line


@pytest.mark.parametrize("key, meant", [("provision_gpus", "provision_gpu"), ("provision_slrum", "provision_slurm"),
                                       ("provision_ssh_confg", "provision_ssh_config"),
                                       ("provision_launchr", "provision_launcher"), ("Provision_gpu", "provision_gpu")])
def test_one_slip_from_provisions_names_is_a_typo(problems, key, meant):
    one_line_with(problems(f"all: {{hosts: {{a: }}, vars: {{{key}: 1}}}}"), f"{key}: unknown variable {key!r}",
                  f"did you mean {meant!r}?")


def test_other_roles_names_near_provisions_are_left_alone(inventory):
    """Outside provision_ every name is another role's: no "did you mean" there."""
    names = ["nfs_config", "sssd_config", "ssh_confg", "gpus", "slrum", "usr", "users", "hosts", "ports",
             "ansible_python_interpreter", "ansible_usr"]
    inv = inventory("all: {hosts: {a: }, vars: {" + ", ".join(f"{n}: 1" for n in names) + "}}")
    assert inv.ignored == sorted(n for n in names if not n.startswith("ansible_"))


def test_connection_settings_are_honoured_or_refused_never_dropped(tmp_path):
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys" / "cluster_ed25519").write_text("not a real key\n")
    path = tmp_path / "inventory.yaml"
    path.write_text("all:\n  hosts:\n    a:\n      ansible_ssh_private_key_file: keys/cluster_ed25519\n"
                    "      ansible_become_user: root\n      ansible_become_method: sudo\n")
    assert load_inventory(path).hosts["a"].identity_file == str(tmp_path / "keys" / "cluster_ed25519")
    lines = refused_lines(tmp_path, """
        all:
          hosts:
            a:
              ansible_private_key_file: keys/missing
              ansible_become_user: postgres
              ansible_become_method: su
              ansible_ssh_common_args: -o ProxyJump=bastion -o ForwardX11=yes
    """)
    assert len(lines) == 4, lines
    one_line_with(lines, "host a: ansible_private_key_file: 'keys/missing': no such file",
                  "give the path of an SSH private key file")
    one_line_with(lines, "host a: ansible_become_user: got 'postgres'", "root: provision's setters run as root")
    one_line_with(lines, "host a: ansible_become_method: got 'su'", "sudo")
    one_line_with(lines, "host a: ansible_ssh_common_args: -o ForwardX11=yes: provision cannot honour ForwardX11",
                  "ssh_config: FILE")  # the rest in tests/unit/core/test_ssh_args.py


def test_the_inventorys_key_file_is_used_unless_the_command_line_names_one():
    from dataclasses import replace as changed

    from provision.commands.run import connector
    from provision.core.connection import SSHOptions
    host = changed(local_inventory().hosts["localhost"], connection="ssh", address="192.0.2.9",
                   identity_file="/keys/inventory_ed25519")
    def key_files(options):
        return connector(False, options)(host).fabric.connect_kwargs["key_filename"]
    assert key_files(SSHOptions()) == ["/keys/inventory_ed25519"]
    assert key_files(SSHOptions(identity_file="/cli/key")) == ["/cli/key"]
