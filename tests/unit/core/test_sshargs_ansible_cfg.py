"""ansible.cfg's [ssh_connection] ssh_args (issue 43: `-F ssh.config -i key` was dropped without a word), and -F
wherever ssh arguments are written. ssh_args is the option a host's ansible_ssh_args sets: that replaces it, and
Ansible writes it first on ssh's command line (first value of an -o wins, the last -F wins). Ansible passes it to ssh
as text, and ssh runs in Ansible's working directory: relative paths start there, not at the file's directory. The
rule is measured here against Ansible itself, running a recording ssh_executable (ansible-core is a test-only
oracle, run as a subprocess)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from provision.core import sshargs
from provision.core.connection import SSHConnection, SSHOptions
from provision.core.sshargs import ARGS_KEYS, host_args, refusals
from provision.inventory.ansiblecfg import read_config
from provision.inventory.load import load_inventory

ANSIBLE = shutil.which("ansible", path=str(Path(sys.executable).parent))
SSH_ARGS = "-F ssh.config -i keys/cluster -o ControlMaster=auto -o ControlPersist=60s"


def args_of(variables: dict, base: Path):
    return host_args(variables, dict.fromkeys(ARGS_KEYS, base), None, None)[0]


@pytest.fixture
def project(tmp_path: Path) -> dict[str, Path]:
    """ansible.cfg in one directory, the inventory beside it; the run from another, holding what ssh_args names."""
    cfg_dir, cwd = tmp_path / "project", tmp_path / "work"
    for directory in (cfg_dir, cwd / "keys"):
        directory.mkdir(parents=True)
    (cfg_dir / "ansible.cfg").write_text(f"[ssh_connection]\nssh_args = {SSH_ARGS}\n")
    (cfg_dir / "hosts").write_text("[gpu]\nrig1 ansible_host=10.0.0.5\nrig2 ansible_ssh_args=-C\n")
    (cwd / "ssh.config").write_text("Host 10.0.0.5\n  Port 2201\n  HostKeyAlias rig1-key\n")
    (cwd / "keys/cluster").write_text("key")
    return {"cfg": cfg_dir / "ansible.cfg", "cwd": cwd, "home": tmp_path}


# --- -F, as ssh reads it ---

def test_dash_f_is_read_relative_the_last_one_wins_and_none_is_no_ssh_config(tmp_path):
    for name in ("a.conf", "b.conf"):
        (tmp_path / name).write_text("Host *\n  User someone\n")
    assert args_of({"ansible_ssh_common_args": "-F a.conf"}, tmp_path).config_file == str(tmp_path / "a.conf")
    both = {"ansible_ssh_args": "-F a.conf", "ansible_ssh_common_args": "-F b.conf -F none"}
    assert args_of(both, tmp_path).config_file == ""  # ssh keeps the last -F on its command line
    assert args_of({"ansible_ssh_args": "-F a.conf", "ansible_ssh_extra_args": "-Fb.conf"}, tmp_path).config_file == (
        str(tmp_path / "b.conf"))


def test_a_dash_f_paramiko_cannot_read_is_refused_naming_where_relative_paths_start(tmp_path):
    (tmp_path / "key").write_bytes(b"\xff\xfe binary")
    [missing] = refusals("-F missing.conf", tmp_path)
    assert str(missing) == (f"-F missing.conf: 'missing.conf' cannot be read: No such file or directory "
                            f"(relative paths start at {tmp_path})")
    [binary] = refusals("-F key", tmp_path)
    assert "is not text" in str(binary) and "ssh_config" in binary.hint


def test_the_connection_reads_the_dash_f_file_alone_and_an_ssh_config_given_to_provision_wins(tmp_path):
    (tmp_path / "f.conf").write_text("Host 10.0.0.5\n  HostName gpu1.internal\n  Port 2201\n")
    (tmp_path / "other.conf").write_text("Host 10.0.0.5\n  Port 2202\n")
    by_args = args_of({"ansible_ssh_common_args": "-F f.conf"}, tmp_path)
    conn = SSHConnection("gpu1", "10.0.0.5", "root", None, SSHOptions(args=by_args))
    assert (conn.fabric.host, conn.fabric.port) == ("gpu1.internal", 2201)
    given = SSHConnection("gpu1", "10.0.0.5", "root", None,
                          SSHOptions(ssh_config=str(tmp_path / "other.conf"), args=by_args))
    assert (given.fabric.host, given.fabric.port) == ("10.0.0.5", 2202)
    none = SSHConnection("gpu1", "10.0.0.5", "root", None,
                         SSHOptions(args=args_of({"ansible_ssh_common_args": "-F none"}, tmp_path)))
    assert none.fabric.config.load_ssh_configs is False  # neither ~/.ssh/config nor /etc/ssh/ssh_config


# --- ansible.cfg ---

def test_ansible_cfg_ssh_connection_keys_are_every_hosts_lowest_level_and_the_environment_wins(project):
    config = read_config(env={"ANSIBLE_CONFIG": str(project["cfg"])}, cwd=project["cwd"])
    assert config.variables == {"ansible_ssh_args": SSH_ARGS}
    assert config.base_dir == project["cwd"]  # where ssh, run by Ansible, starts the relative paths
    project["cfg"].write_text("[ssh_connection]\nssh_common_args = -o ConnectTimeout=5\nssh_extra_args = -A\n"
                              "ssh_executable = /opt/site/ssh-wrapper\n")
    env = {"ANSIBLE_CONFIG": str(project["cfg"]), "ANSIBLE_SSH_ARGS": "-C", "ANSIBLE_SSH_EXTRA_ARGS": "-o Port=2"}
    assert read_config(env=env, cwd=project["cwd"]).variables == {
        "ansible_ssh_args": "-C", "ansible_ssh_common_args": "-o ConnectTimeout=5",
        "ansible_ssh_extra_args": "-o Port=2", "ansible_ssh_executable": "/opt/site/ssh-wrapper"}


def test_ansible_cfg_ssh_args_reach_the_hosts_and_a_hosts_own_ansible_ssh_args_replaces_them(project):
    config = read_config(env={"ANSIBLE_CONFIG": str(project["cfg"])}, cwd=project["cwd"])
    inventory = load_inventory(project["cfg"].parent / "hosts", config)
    rig1, rig2 = inventory.hosts["rig1"].ssh_args, inventory.hosts["rig2"].ssh_args
    cwd = project["cwd"]
    assert (rig1.config_file, rig1.identity_files) == (str(cwd / "ssh.config"), (str(cwd / "keys/cluster"),))
    assert (rig2.config_file, rig2.identity_files, rig2.compression) == (None, (), True)
    conn = SSHConnection("rig1", "10.0.0.5", None, None, SSHOptions(args=rig1))
    assert (conn.fabric.port, conn.host_key_alias) == (2201, "rig1-key")  # the -F file, read by the connection


@pytest.mark.skipif(ANSIBLE is None, reason="ansible not installed (pip install '.[test]' installs it)")
def test_ansible_runs_ssh_in_its_working_directory_with_ssh_args_first_as_provision_reads_them(project):
    """The oracle: Ansible's ssh command line for rig1 and the directory ssh runs in, recorded."""
    recorder = project["home"] / "record-ssh"
    recorder.write_text('#!/bin/sh\n{ pwd; printf "%s\\n" "$@"; } > "$0.out"\nexit 255\n')
    recorder.chmod(0o755)
    env = {"PATH": os.environ["PATH"], "HOME": str(project["home"]), "ANSIBLE_CONFIG": str(project["cfg"]),
           "ANSIBLE_SSH_EXECUTABLE": str(recorder), "ANSIBLE_LOCAL_TEMP": str(project["home"] / "tmp"),
           "LC_ALL": "C.UTF-8"}
    subprocess.run([ANSIBLE, "-i", str(project["cfg"].parent / "hosts"), "rig1", "-m", "ping"], env=env,
                   cwd=project["cwd"], capture_output=True, timeout=120)
    cwd, *argv = (project["home"] / "record-ssh.out").read_text().splitlines()
    assert cwd == str(project["cwd"]) != str(project["cfg"].parent)
    assert argv[:len(SSH_ARGS.split())] == SSH_ARGS.split()  # first on the command line, as written
    config = read_config(env={"ANSIBLE_CONFIG": str(project["cfg"])}, cwd=Path(cwd))
    rig1 = load_inventory(project["cfg"].parent / "hosts", config).hosts["rig1"].ssh_args
    assert (rig1.config_file, rig1.identity_files) == (f"{cwd}/ssh.config", (f"{cwd}/keys/cluster",))


def test_a_dash_f_file_is_read_once_per_version_however_many_hosts_name_it(tmp_path, monkeypatch):
    """host_args reads every host's args: a generated ssh_config of a few MiB parsed per host took minutes for
    2,000 hosts (over 300 s for a 1 MB file; 0.9 s read once)."""
    config = tmp_path / "hosts.conf"
    config.write_text("Host node1\n  User ops\n")
    reads: list[str] = []
    monkeypatch.setattr(sshargs, "_read_ssh_config", reads.append)
    for _ in range(50):
        assert args_of({"ansible_ssh_common_args": "-F hosts.conf"}, tmp_path).config_file == str(config)
    assert reads == [str(config)]
    config.write_text("Host node1\n  User someone-else\n")  # a new version: read again
    args_of({"ansible_ssh_common_args": "-F hosts.conf"}, tmp_path)
    assert reads == [str(config)] * 2
