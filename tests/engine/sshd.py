"""A real OpenSSH server on 127.0.0.1 for tests: its own host key, config and authorized key."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class SSHServer:
    def __init__(self, root: Path, env: dict[str, str]):
        self.root = root
        self.port = free_port()
        root.mkdir(parents=True, exist_ok=True)
        os.chmod(root, 0o755)
        self.host_key = root / "ssh_host_ed25519_key"
        self.client_key = root / "id_ed25519"
        for key in (self.host_key, self.client_key):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
        authorized = root / "authorized_keys"
        shutil.copy(f"{self.client_key}.pub", authorized)
        os.chmod(authorized, 0o600)
        set_env = " ".join(f"{k}={v}" for k, v in env.items())
        self.config = root / "sshd_config"
        self.config.write_text(
            f"Port {self.port}\nListenAddress 127.0.0.1\nHostKey {self.host_key}\n"
            f"AuthorizedKeysFile {authorized}\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
            f"PermitRootLogin prohibit-password\nUsePAM no\nStrictModes no\nPidFile {root}/sshd.pid\n"
            f"SetEnv {set_env}\n"
        )
        os.makedirs("/run/sshd", exist_ok=True)  # privilege separation directory
        self.proc = subprocess.Popen(["/usr/sbin/sshd", "-D", "-e", "-f", str(self.config)],
                                     stderr=open(root / "sshd.log", "w"))
        self._wait()

    def _wait(self) -> None:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"sshd did not start: {(self.root / 'sshd.log').read_text()}")

    def known_hosts_line(self) -> str:
        key = (Path(f"{self.host_key}.pub").read_text().split()[:2])
        return f"[127.0.0.1]:{self.port} {' '.join(key)}\n"

    def client_config(self, known_hosts: Path) -> Path:
        """An ssh_config for the client side: alias 'sshnode' -> this server."""
        path = self.root / "ssh_config"
        path.write_text(
            f"Host sshnode\n  HostName 127.0.0.1\n  Port {self.port}\n  User root\n"
            f"  IdentityFile {self.client_key}\n  UserKnownHostsFile {known_hosts}\n"
        )
        return path

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)
