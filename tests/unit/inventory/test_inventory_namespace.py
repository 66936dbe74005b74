"""provision's variables in a namespace of their own (provision_*), Ansible's connection variables under Ansible's
names and precedence, and other roles' variables left alone whatever their name, type or value (issue 43)."""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from provision.cli import main
from provision.core.errors import InputError
from provision.inventory.load import load_inventory
from ansible_oracle import ANSIBLE, needs_ansible


def write(tmp_path: Path, text: str, name: str = "inv.yaml") -> Path:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


# Other roles' variables under names provision once read (or still reads inside its prefix), of every type.
FOREIGN = {"gpu": True, "gpus": 4, "user": "billybob", "host": "db.internal", "port": "not-a-port",
           "slurm": {"partition": "batch", "slurmctld_host": "head"}, "driver": "nvidia-535",
           "connection": "docker", "become": "maybe", "ssh_config": 7, "power_limit": 200,
           "nccl": {"socket_ifname": 3}, "custom": ["a", "b"], "launcher": None, "active": {"x": 1},
           "identity_file": {"no": "path"}}


def test_other_roles_variables_are_left_alone_whatever_their_name_type_or_value(tmp_path):
    path = write(tmp_path, "all:\n  hosts:\n    n1: {ansible_host: 192.0.2.1, ansible_user: ops}\n")
    path.write_text(path.read_text() + "  vars: " + json.dumps(FOREIGN) + "\n")
    host = load_inventory(path).hosts["n1"]
    assert (host.address, host.user, host.port, host.connection) == ("192.0.2.1", "ops", None, "ssh")
    assert host.settings.gpu is None and host.settings.slurm is None and host.settings.custom == {}
    assert host.refused == []


def test_a_roles_user_never_changes_the_login_user(tmp_path):
    """Before the namespace a role's `user: billybob` silently became the login user where no ansible_user was."""
    path = write(tmp_path, """
        all:
          hosts:
            n1: {ansible_host: 192.0.2.1, user: billybob}
    """)
    assert load_inventory(path).hosts["n1"].user is None


def test_provisions_own_variables_are_read_and_a_name_near_them_is_an_error(tmp_path):
    path = write(tmp_path, """
        all:
          hosts:
            n1: {ansible_host: 192.0.2.1, provision_gpu: {power_limit: 200}}
          vars:
            provision_gpus: {count: 4}
    """)
    with pytest.raises(InputError) as exc:
        load_inventory(path)
    said = str(exc.value)
    assert "provision_gpus" in said and "did you mean 'provision_gpu'?" in said
    path.write_text(path.read_text().replace("provision_gpus", "provision_gpu"))
    gpu = load_inventory(path).hosts["n1"].settings.gpu
    assert (gpu.power_limit, gpu.count) == (200, 4)


def test_a_bad_value_names_the_key_as_written(tmp_path):
    path = write(tmp_path, "all:\n  hosts:\n    n1: {provision_gpu: {power_limit: -5}}\n")
    with pytest.raises(InputError) as exc:
        load_inventory(path)
    assert "provision_gpu.power_limit" in str(exc.value)


def test_a_file_with_the_old_names_is_one_error_saying_what_to_rename(tmp_path):
    path = write(tmp_path, """
        all:
          hosts:
            n1: {ansible_host: 192.0.2.1, user: ops}
            n2: {host: 192.0.2.2}
          vars:
            gpu: {persistence: true, power_limit: 200}
            nccl: {socket_ifname: ens803f}
            ntp_servers: [pool.ntp.org]
    """)
    with pytest.raises(InputError) as exc:
        load_inventory(path)
    problems = exc.value.problems
    assert len(problems) == 1, problems
    said = str(problems[0])
    assert str(path) in said
    for rename in ("gpu to provision_gpu", "nccl to provision_nccl", "user to ansible_user", "host to ansible_host"):
        assert rename in said, said
    assert "ntp_servers" not in said


def test_a_mapping_that_is_not_a_valid_block_is_another_roles(tmp_path):
    """A Slurm role's `slurm:` with keys provision's block lacks, or a `gpu:` whose values would not validate."""
    path = write(tmp_path, """
        all:
          hosts:
            n1: {ansible_host: 192.0.2.1, user: ops}
          vars:
            slurm: {partition: batch, slurmctld_port: 6817}
            gpu: {power_limit: lots}
    """)
    host = load_inventory(path).hosts["n1"]
    assert host.user is None and host.settings.slurm is None and host.settings.gpu is None


def test_ansible_ssh_names_win_over_their_twins_whatever_level_set_them(tmp_path):
    path = write(tmp_path, """
        all:
          hosts:
            n1: {ansible_host: 192.0.2.1, ansible_ssh_host: 192.0.2.9, ansible_port: 22, ansible_ssh_port: 2222}
            n2: {ansible_host: 192.0.2.2, ansible_user: hostuser}
          vars:
            ansible_ssh_user: groupuser
            ansible_user: alluser
    """)
    hosts = load_inventory(path, extra_vars=["ansible_user=extra"]).hosts
    assert (hosts["n1"].address, hosts["n1"].port, hosts["n1"].user) == ("192.0.2.9", 2222, "groupuser")
    assert hosts["n2"].user == "groupuser"  # -e ansible_user and the host's ansible_user lose to ansible_ssh_user
    assert hosts["n2"].reached_by["user"] == "ansible_ssh_user"


def _ansible_connects_as(inventory: Path, home: Path, *args: str) -> set[tuple[str, str, str]]:
    """(address, user, port) of each ssh command Ansible's ssh plugin runs, as -vvv prints it (to closed ports of
    this machine: nothing answers)."""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "ANSIBLE_LOCAL_TEMP": str(home / "tmp"), "LC_ALL": "C.UTF-8",
           "ANSIBLE_HOST_KEY_CHECKING": "0"}
    with tempfile.TemporaryDirectory() as cwd:
        out = subprocess.run([str(ANSIBLE), "all", "-i", str(inventory), "-m", "ping", "-vvv", *args],
                             capture_output=True, text=True, env=env, cwd=cwd).stdout
    found = set()
    for line in out.splitlines():
        match = re.match(r"<\S+> SSH: EXEC ssh .*-o 'User=\"(\w+)\"'.* (\S+) '/bin/sh", line)
        if match:
            port = re.search(r" -o Port=(\d+) ", line)
            found.add((match[2], match[1], port[1] if port else "22"))
    return found


@needs_ansible
def test_the_connection_settings_are_those_ansibles_ssh_plugin_uses(tmp_path):
    """Held against Ansible itself: what `ansible -vvv` says it runs ssh with, with -e below the _ssh_ names."""
    path = write(tmp_path, """
        all:
          hosts:
            a: {ansible_host: 127.0.0.2, ansible_ssh_host: 127.0.0.3, ansible_port: 1, ansible_ssh_port: 9}
            b: {ansible_host: 127.0.0.4, ansible_port: 9, ansible_user: hostuser}
            c: {ansible_host: 127.0.0.5, ansible_port: 9, user: billybob, port: 7}
          children:
            g:
              hosts: {d: {ansible_host: 127.0.0.6, ansible_ssh_port: 9}}
              vars: {ansible_user: groupuser}
          vars:
            ansible_ssh_user: alluser
    """)
    ansible = _ansible_connects_as(path, tmp_path, "-e", "ansible_user=extra")
    hosts = load_inventory(path, extra_vars=["ansible_user=extra"]).hosts
    assert len(ansible) == 4 and ansible == {(h.address, h.user, str(h.port or 22)) for h in hosts.values()}


def refused(path: Path, limit: str | None) -> list[str]:
    inventory = load_inventory(path)
    return [str(problem) for problem in inventory.refusals(inventory.select(limit))]


def test_a_setting_one_host_cannot_have_stops_only_the_runs_that_select_it(tmp_path):
    path = write(tmp_path, """
        all:
          hosts:
            svc1: {ansible_host: 192.0.2.1, ansible_become_user: svc}
            key1: {ansible_host: 192.0.2.2, ansible_ssh_private_key_file: ~/.ssh/nobody_has_this_key}
            port1: {ansible_host: 192.0.2.3, ansible_port: seventy}
            ok1: {ansible_host: 192.0.2.4}
    """)
    assert refused(path, "ok1") == []
    said = refused(path, None)
    assert len(said) == 3, said
    assert any("svc1" in s and "ansible_become_user" in s for s in said)
    assert any("key1" in s and "nobody_has_this_key" in s and "no such file" in s for s in said)
    assert any("port1" in s and "ansible_port" in s for s in said)
    assert all("--limit 'all:!" in s for s in said)


def test_list_and_graph_need_no_key_file_and_keep_the_text_as_written(tmp_path):
    path = write(tmp_path, """
        all:
          hosts:
            n1: {ansible_host: 192.0.2.1, ansible_ssh_private_key_file: ~/.ssh/id_rsa_not_here}
          children:
            gpu:
              hosts: {n1: }
              vars: {ansible_group_priority: 5}
    """)
    result = CliRunner().invoke(main, ["inventory", "-i", str(path), "--list"])
    assert result.exit_code == 0, result.output
    hostvars = json.loads(result.output)["_meta"]["hostvars"]["n1"]
    assert hostvars["ansible_ssh_private_key_file"] == "~/.ssh/id_rsa_not_here"
    assert "ansible_group_priority" not in hostvars  # a group's, never a host's, as ansible-inventory prints it
    result = CliRunner().invoke(main, ["inventory", "-i", str(path), "--graph"])
    assert result.exit_code == 0 and "n1" in result.output, result.output


def test_host_shows_every_connection_setting_and_where_it_came_from(tmp_path):
    path = write(tmp_path, """
        all:
          hosts:
            gpu-1: {ansible_host: 10.0.0.11, ansible_become_user: root, ansible_ssh_user: ops}
          vars:
            ansible_user: nobody
            ansible_ssh_common_args: -o ProxyJump=jump@bastion.example.org:2222
    """)
    result = CliRunner().invoke(main, ["inventory", "-i", str(path), "--host", "gpu-1"])
    assert result.exit_code == 0, result.output
    rows = {line.split()[0]: line for line in result.output.splitlines()[1:]}
    assert "ops" in rows["user"] and "as ansible_ssh_user" in rows["user"] and "(host gpu-1)" in rows["user"]
    assert "as ansible_become_user" in rows["become_user"]
    assert "jump@bastion.example.org:2222" in rows["bastion"]
    assert "(all)" in rows["ansible_ssh_common_args"]
