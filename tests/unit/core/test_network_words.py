"""An unreachable host is said in words that name the cause and what to check, never the library's."""

from __future__ import annotations

import errno
import socket

import paramiko
from paramiko.ssh_exception import NoValidConnectionsError

from provision.core.connection import network_words


def test_each_cause_has_its_words_and_what_to_check():
    refused = NoValidConnectionsError({("192.0.2.10", 22): ConnectionRefusedError(errno.ECONNREFUSED, "refused")})
    assert str(refused) == "[Errno None] Unable to connect to port 22 on 192.0.2.10"  # what users used to see
    assert network_words(refused, "192.0.2.10", 22) == (
        "connection refused on port 22: is sshd running there, and on that port (ansible_port)?")
    assert network_words(socket.gaierror(-2, "Name or service not known"), "gpu-99", None) == (
        "the name gpu-99 does not resolve: check its ansible_host, DNS or /etc/hosts")
    assert network_words(TimeoutError("timed out"), "192.0.2.10", 2222).startswith(
        "no answer on port 2222 within the connect timeout")
    assert network_words(OSError(errno.EHOSTUNREACH, "No route to host"), "h", 22).startswith("no route to the host")
    banner = paramiko.SSHException("Error reading SSH protocol banner[Errno 104] Connection reset by peer")
    assert network_words(banner, "h", 22).startswith("SSH did not answer on port 22 (sshd gone, restarting")
    assert network_words(EOFError(), "h", 22).startswith("the connection was closed")


def test_a_gateway_that_cannot_reach_the_host_says_so():
    refused = paramiko.ChannelException(2, "Connect failed")  # a ProxyJump hop's answer to direct-tcpip
    assert network_words(refused, "10.0.0.5", 22) == (
        "the gateway could not connect to it (Connect failed): is it up, and is port 22 open to the gateway?")
