"""A testinfra backend over provision's own connections: the checks' `host` object speaks through the same
SSH settings (ssh_config, host-key policy, user, sudo) as `apply`, so the user writes no pytest options."""

from __future__ import annotations

import testinfra.backend.base
import testinfra.host

from provision.core.connection import Connection


class ProvisionBackend(testinfra.backend.base.BaseBackend):
    NAME = "provision"

    def __init__(self, name: str, connection: Connection):
        super().__init__(name)
        self.connection = connection

    def get_pytest_id(self) -> str:
        return self.hostname

    def run(self, command: str, *args: str, **kwargs) -> testinfra.backend.base.CommandResult:
        command = self.get_command(command, *args)
        done = self.connection.run(["sh", "-c", command], timeout=120)
        return self.result(done.rc, self.encode(command), done.stdout, done.stderr)


def testinfra_host(name: str, connection: Connection) -> testinfra.host.Host:
    backend = ProvisionBackend(name, connection)
    host = testinfra.host.Host(backend)
    backend.set_host(host)
    return host
