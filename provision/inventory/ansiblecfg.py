"""What the user's Ansible configuration says about inventories and connections, found as Ansible finds it:
the first of $ANSIBLE_CONFIG, ./ansible.cfg (not in a world-writable directory), ~/.ansible.cfg and
/etc/ansible/ansible.cfg; its ANSIBLE_* environment variables win over the file.

    [defaults]
    inventory = inventories/prod/hosts, inventories/prod/extra    # the sources when no -i is given
    remote_user = ubuntu
    private_key_file = ~/.ssh/cluster_ed25519
    [privilege_escalation]
    become = true
    become_user = root
    [ssh_connection]
    ssh_args = -F ssh.config -i keys/cluster -o ControlMaster=auto      # also ssh_common_args, ssh_extra_args
    ssh_executable = ssh

The connection settings are the lowest level of every host's variables (an inventory's ansible_user wins, as
in Ansible); they are validated like the inventory's own, with the file named. [ssh_connection] ssh_args is
the option a host's ansible_ssh_args sets (that replaces it, as in Ansible), written first on ssh's command line;
Ansible passes its text to ssh as it is, and ssh runs in Ansible's working directory (measured with a recording
ssh_executable and ANSIBLE_CONFIG elsewhere: cwd was the working directory, not the file's), so relative paths in
the ssh args start at the working directory, where the file's own paths (inventory, private_key_file) start at
its directory, as Ansible's `path` type does. The file is read as the inventory's
files are (files.py): a regular file, of at most files.MAX_FILE_BYTES.
"""

from __future__ import annotations

import configparser
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from provision.core.errors import InputError, Problem
from provision.core.localfiles import read_text

DEFAULT_INVENTORY = "/etc/ansible/hosts"  # Ansible's, when neither -i nor the configuration names one
# (section, key, environment variable, the inventory variable it stands for)
CONNECTION = [("defaults", "remote_user", "ANSIBLE_REMOTE_USER", "ansible_user"),
              ("defaults", "private_key_file", "ANSIBLE_PRIVATE_KEY_FILE", "ansible_private_key_file"),
              ("privilege_escalation", "become", "ANSIBLE_BECOME", "ansible_become"),
              ("privilege_escalation", "become_user", "ANSIBLE_BECOME_USER", "ansible_become_user"),
              ("privilege_escalation", "become_method", "ANSIBLE_BECOME_METHOD", "ansible_become_method"),
              # Ansible's ssh plugin: the same options as these variables (ansible-doc -t connection ssh)
              ("ssh_connection", "ssh_args", "ANSIBLE_SSH_ARGS", "ansible_ssh_args"),
              ("ssh_connection", "ssh_common_args", "ANSIBLE_SSH_COMMON_ARGS", "ansible_ssh_common_args"),
              ("ssh_connection", "ssh_extra_args", "ANSIBLE_SSH_EXTRA_ARGS", "ansible_ssh_extra_args"),
              ("ssh_connection", "ssh_executable", "ANSIBLE_SSH_EXECUTABLE", "ansible_ssh_executable")]


@dataclass
class AnsibleConfig:
    file: str = ""  # the configuration file read ("" for none)
    inventory: list[str] = field(default_factory=list)  # the sources to read when no -i is given
    variables: dict[str, Any] = field(default_factory=dict)  # ansible_user & co.: every host's lowest level
    # Where the relative paths still in `variables` start: only the ssh args keep theirs (the module's docstring)
    base_dir: Path = field(default_factory=Path.cwd)


def find_config(env: Mapping[str, str], cwd: Path) -> Path | None:
    candidates = [Path(env["ANSIBLE_CONFIG"]).expanduser() if env.get("ANSIBLE_CONFIG") else None,
                  cwd / "ansible.cfg" if not _world_writable(cwd) else None,
                  Path(env.get("HOME", "~")).expanduser() / ".ansible.cfg",
                  Path("/etc/ansible/ansible.cfg")]
    if candidates[0] is not None and candidates[0].is_dir():  # ANSIBLE_CONFIG may name the directory
        candidates[0] = candidates[0] / "ansible.cfg"
    return next((path for path in candidates if path is not None and path.is_file()), None)


def read_config(env: Mapping[str, str] | None = None, cwd: Path | None = None) -> AnsibleConfig:
    env, cwd = os.environ if env is None else env, cwd or Path.cwd()
    path = find_config(env, cwd)
    parser = configparser.ConfigParser(inline_comment_prefixes=(";",), interpolation=None)
    if path is not None:
        text = read_text(path, "the Ansible configuration")
        try:
            parser.read_string(text, source=str(path))
        except configparser.Error as exc:
            raise InputError([Problem(str(path), "", "", f"cannot read the Ansible configuration: {exc}")]) from None
    config = AnsibleConfig(str(path or ""), base_dir=cwd)
    file_dir = path.parent if path else cwd  # the file's own paths start here
    if env.get("ANSIBLE_INVENTORY"):
        config.inventory = [_path(p, cwd) for p in env["ANSIBLE_INVENTORY"].split(",") if p.strip()]
    elif parser.get("defaults", "inventory", fallback=None):
        config.inventory = [_path(p, file_dir) for p in parser.get("defaults", "inventory").split(",")
                            if p.strip()]
    elif Path(DEFAULT_INVENTORY).exists():
        config.inventory = [DEFAULT_INVENTORY]
    for section, key, variable, name in CONNECTION:
        value = env.get(variable) or parser.get(section, key, fallback=None)
        if value:
            if key == "private_key_file" and not env.get(variable):
                value = _path(value, file_dir)
            config.variables[name] = value.strip()
    return config


def _path(text: str, base: Path) -> str:
    """A path the configuration names: ~ expanded, relative to the file's directory (Ansible's `path` type).
    A host list ("a,b") never gets here: it was split on its commas."""
    path = Path(text.strip()).expanduser()
    return str(path if path.is_absolute() else base / path)


def _world_writable(directory: Path) -> bool:
    """Ansible ignores ./ansible.cfg there: anyone could have put it."""
    try:
        return bool(directory.stat().st_mode & stat.S_IWOTH)
    except OSError:
        return True
