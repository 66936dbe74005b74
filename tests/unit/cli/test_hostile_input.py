"""The hostile-input drill (issue 41): inventories and command lines an attacker or a careless user would give, each
run as the real `provision` process, as a user runs it. Every case must end with exit 2 and a message that names
what is at fault, within seconds and bounded memory, with no traceback, no host contacted (every host of every
inventory points at a listener that counts connections) and nothing executed (a canary file that an injected
command would create never appears).

Grow it with each new input the project reads: a case is a name, the files to make (text, or "fifo"), the command
line (CANARY, ROOT and PORT are replaced), and words the message must hold.
"""

from __future__ import annotations

import os
import resource
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

import pytest

PROVISION = [sys.executable, "-m", "provision"]
SECONDS = 30  # each case's bound: the hangs ran for minutes
MEMORY = 2 * 2**30  # address space: -i /dev/zero once read until the kernel killed it (~24 GB)

HOSTS = """all:
  hosts:
    n1: {ansible_host: 127.0.0.1, ansible_port: PORT}
    n2: {ansible_host: 127.0.0.2, ansible_port: PORT}
"""
LAUGHS = "\n".join(["a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
                   + [f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 10)}]" for i in range(9)])


def laughs_under(key: str) -> str:
    """A billion laughs (10^10 strings from 1 KB) as the value of key, for n1."""
    body = LAUGHS.replace("\n", "\n      ")
    return f"all:\n  hosts:\n    n1:\n      ansible_host: 127.0.0.1\n      ansible_port: PORT\n      laughs:\n        {body}\n      {key}: *j\n"


@dataclass
class Case:
    name: str
    args: list[str]
    files: dict[str, str] = field(default_factory=dict)  # relative path -> text, or "fifo"
    says: tuple[str, ...] = ()  # words the message holds
    never_says: tuple[str, ...] = ()  # words it must not hold (a secret it must not quote)


CASES = [
    # Names and values that would run or write where they should not.
    Case("a group name that runs a command in the wrapper",
         ["apply", "ROOT/inv.yaml", "--check"],
         {"inv.yaml": "all:\n  vars: {provision_launcher: {}}\n  children:\n    'g$(cd;touch${IFS}CANARY)':\n"
                      "      hosts: {n1: {ansible_host: 127.0.0.1, ansible_port: PORT}}\n"},
         ("provision_launcher.group", "inv.yaml")),
    Case("a group name that writes the wrapper outside /usr/local/bin",
         ["apply", "ROOT/inv.yaml", "--check"],
         {"inv.yaml": "all:\n  vars: {provision_launcher: {}}\n  children:\n    ../../../tmp/x:\n"
                      "      hosts: {n1: {ansible_host: 127.0.0.1, ansible_port: PORT}}\n"},
         ("provision_launcher.group", "../../../tmp/x")),
    Case("a wrapper path with a command in it",
         ["apply", "ROOT/inv.yaml", "--check"],
         {"inv.yaml": HOSTS + "  vars: {provision_launcher: {wrapper_path: '/usr/local/bin/$(touch CANARY)'}}\n"},
         ("provision_launcher.wrapper_path",)),
    Case("an nccl.conf path with ; in it",
         ["apply", "ROOT/inv.yaml", "--check"],
         {"inv.yaml": HOSTS + "  vars: {provision_nccl: {conf_path: '/etc/x;touch CANARY'}}\n"},
         ("provision_nccl.conf_path",)),
    Case("an apt source with a command in it",
         ["apply", "ROOT/inv.yaml", "--check"],
         {"inv.yaml": HOSTS + "  vars: {provision_driver: {version: '580.1.2', source: local, "
                              "repository: 'deb [trusted=yes] http://m/$(touch CANARY) ./'}}\n"},
         ("provision_driver.repository",)),
    # A --limit that would widen the run.
    Case("an unbalanced [ in a regex limit", ["apply", "ROOT/inv.yaml", "--check", "--limit", "~["],
         {"inv.yaml": HOSTS}, ("limit", "[")),
    Case("an unbalanced [ after a valid regex", ["apply", "ROOT/inv.yaml", "--check", "--limit", "~n2|["],
         {"inv.yaml": HOSTS}, ("limit", "[")),
    # Unbounded work from a small input.
    Case("a YAML alias that contains itself", ["facts", "ROOT/inv.yaml"],
         {"inv.yaml": HOSTS + "  vars:\n    loop: &x [*x]\n"}, ("inv.yaml",)),
    Case("a billion laughs in a variable of another role", ["apply", "ROOT/inv.yaml", "--check"],
         {"inv.yaml": laughs_under("site_flag")}, ("inv.yaml",)),
    Case("a billion laughs in the custom block", ["verify", "ROOT/inv.yaml"],
         {"inv.yaml": laughs_under("custom")}, ("inv.yaml",)),
    Case("a billion laughs in -e @file", ["apply", "ROOT/inv.yaml", "--check", "-e", "@ROOT/vars.yaml"],
         {"inv.yaml": HOSTS, "vars.yaml": LAUGHS + "\nsite_flag: *j\n"}, ("vars.yaml",)),
    Case("/dev/zero as the inventory", ["apply", "/dev/zero", "--check"], {}, ("/dev/zero",)),
    Case("a FIFO as the inventory", ["apply", "ROOT/fifo.yaml", "--check"], {"fifo.yaml": "fifo"}, ("fifo.yaml",)),
    Case("an INI range of ten million hosts", ["apply", "ROOT/hosts.ini", "--check"],
         {"hosts.ini": "[gpu]\nn[0000000:9999999] ansible_host=127.0.0.1 ansible_port=PORT\n"}, ("hosts.ini",)),
    Case("an address that renders a terabyte", ["apply", "ROOT/inv.yaml", "--check"],
         {"inv.yaml": "all:\n  hosts:\n    n1: {ansible_host: \"{{ 'a' * 10**12 }}\", ansible_port: PORT}\n"},
         ("inv.yaml", "n1")),
    Case("an address that renders 200 MB by fan-out", ["apply", "ROOT/inv.yaml", "--check"],
         {"inv.yaml": "all:\n  vars:\n    a: \"{{ 'x' * 10000 }}\"\n    b: \"{{ a ~ a ~ a ~ a ~ a ~ a ~ a ~ a ~ a ~ a }}\"\n"
                      "    c: \"{{ b ~ b ~ b ~ b ~ b ~ b ~ b ~ b ~ b ~ b }}\"\n"
                      "    d: \"{{ c ~ c ~ c ~ c ~ c ~ c ~ c ~ c ~ c ~ c }}\"\n"
                      "    e: \"{{ d ~ d ~ d ~ d ~ d ~ d ~ d ~ d ~ d ~ d }}\"\n"
                      "  hosts:\n    n1: {ansible_host: '{{ e ~ e }}', ansible_port: PORT}\n"},
         ("inv.yaml", "n1")),
    Case("an address longer than DNS takes", ["apply", "ROOT/inv.yaml", "--check"],
         {"inv.yaml": "all:\n  hosts:\n    n1: {ansible_host: '" + "a" * 300 + "', ansible_port: PORT}\n"},
         ("inv.yaml", "253 characters")),
    # Files the run would write, and files it would read.
    Case("a run log in a directory that cannot exist", ["apply", "ROOT/inv.yaml", "--check", "--log", "/proc/nope/x"],
         {"inv.yaml": HOSTS}, ("--log", "/proc/nope/x")),
    Case("metrics in a directory that cannot exist",
         ["verify", "ROOT/inv.yaml", "--prometheus", "/proc/nope/x.prom"],
         {"inv.yaml": HOSTS}, ("--prometheus", "/proc/nope/x.prom")),
    Case("an ssh_config that is a secret, not an ssh_config", ["apply", "ROOT/inv.yaml", "--check"],
         {"inv.yaml": HOSTS + "  vars: {ansible_ssh_common_args: '-F ROOT/shadow'}\n",
          "shadow": "root:$6$SECRETHASH$abc:19000:0:99999:7:::\n"},
         ("-F",), ("SECRETHASH",)),
    Case("an ssh_config key naming a secret", ["apply", "ROOT/inv.yaml", "--check"],
         {"inv.yaml": HOSTS + "  vars: {provision_ssh_config: ROOT/shadow}\n",
          "shadow": "root:$6$SECRETHASH$abc:19000:0:99999:7:::\n"},
         ("ssh_config", "shadow"), ("SECRETHASH",)),
    Case("a FIFO as the SSH key", ["apply", "ROOT/inv.yaml", "--check", "--identity", "ROOT/key"],
         {"inv.yaml": HOSTS, "key": "fifo"}, ("--identity", "a FIFO")),
    Case("a FIFO as the inventory's SSH key", ["apply", "ROOT/inv.yaml", "--check"],
         {"inv.yaml": HOSTS + "  vars: {ansible_ssh_private_key_file: ROOT/key}\n", "key": "fifo"},
         ("ansible_ssh_private_key_file", "a FIFO")),
    Case("a billion laughs in a playbook", ["apply", "ROOT/inv.yaml", "--check", "--playbook", "ROOT/pb.yaml"],
         {"inv.yaml": HOSTS, "pb.yaml": LAUGHS + "\ntasks: *j\n"}, ("pb.yaml",)),
    Case("a FIFO as the playbook", ["verify", "ROOT/inv.yaml", "--playbook", "ROOT/pb.yaml"],
         {"inv.yaml": HOSTS, "pb.yaml": "fifo"}, ("pb.yaml", "a FIFO")),
    # A lookalike letter is named, not only the near name.
    Case("a Cyrillic letter in a setting's name", ["apply", "ROOT/inv.yaml", "--check"],
         {"inv.yaml": HOSTS + "  vars: {provision_gpu: {power_lim\u0456t: 200}}\n"}, ("power_limit", "U+0456")),
]


class Listener:
    """A TCP port every host of every case points at: it counts the connections made to it."""

    def __init__(self):
        self.sock = socket.create_server(("0.0.0.0", 0))  # 127.0.0.1 and 127.0.0.2: two hosts, one listener
        self.port = self.sock.getsockname()[1]
        self.count = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.count += 1
            conn.close()


@pytest.fixture(scope="module")
def listener():
    listening = Listener()
    yield listening
    listening.sock.close()


def _bounded():
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_hostile_input_is_refused_cleanly_at_once(case, listener, tmp_path):
    canary = tmp_path / "pwned"

    def filled(text: str) -> str:
        return text.replace("CANARY", str(canary)).replace("ROOT", str(tmp_path)).replace("PORT", str(listener.port))

    for name, text in case.files.items():
        if text == "fifo":
            os.mkfifo(tmp_path / name)
        else:
            (tmp_path / name).write_text(filled(text))
    before = listener.count
    started = time.monotonic()
    proc = subprocess.run([*PROVISION, *map(filled, case.args)], capture_output=True, text=True, timeout=SECONDS,
                          stdin=subprocess.DEVNULL, preexec_fn=_bounded, cwd=tmp_path,
                          env={**os.environ, "HOME": str(tmp_path), "XDG_STATE_HOME": str(tmp_path / "state"),
                               "COLUMNS": "200", "PROVISION_NO_PROGRESS": "1"})
    said = proc.stdout + proc.stderr
    assert proc.returncode == 2, said
    assert "Traceback" not in said and "internal error" not in said, said
    assert listener.count == before, f"a host was contacted: {said}"
    assert not canary.exists(), said
    for words in case.says:
        assert filled(words) in said, said
    for words in case.never_says:
        assert words not in said, said
    assert time.monotonic() - started < SECONDS
