"""ansible_ssh_executable (issue 43: dropped without a word). Ansible runs that program for ssh; provision connects
with paramiko and runs none. OpenSSH's own ssh (Ansible's default `ssh`, or where distributions install it)
changes nothing; any other program, a wrapper that logs or picks a route, would be skipped: refused by name, with
the reason and what to write instead. key_refusals() is what the inventory calls for every connection key it
checks (CHECKED_KEYS), the ssh args included."""

from __future__ import annotations

from pathlib import Path

import pytest

from provision.core.sshargs import CHECKED_KEYS, EXECUTABLE_KEY, executable_refusals, key_refusals, refusals


@pytest.mark.parametrize("value", ["ssh", "/usr/bin/ssh", "/bin/ssh", "/usr/local/bin/ssh"])
def test_openssh_own_ssh_is_honoured(value):
    assert executable_refusals(value) == []


@pytest.mark.parametrize("value", ["/opt/site/bin/ssh-wrapper", "~/bin/teleport-ssh", "./ssh", "sshpass"])
def test_another_program_is_refused_by_name_with_the_reason_and_what_to_do(value):
    [refused] = executable_refusals(value)
    assert str(refused).startswith(f"{value!r}: provision connects with paramiko and runs no ssh program")
    assert "ansible_ssh_common_args" in refused.hint and "--limit" in refused.hint


@pytest.mark.parametrize("value, kind", [(["ssh"], "list"), (22, "int"), (None, "NoneType")])
def test_a_value_that_is_no_text_is_refused_by_its_type(value, kind):
    [refused] = executable_refusals(value)
    assert str(refused) == f"is {kind}, not a program's path"


def test_key_refusals_reads_each_key_as_its_own_kind(tmp_path):
    assert CHECKED_KEYS[-1] == EXECUTABLE_KEY == "ansible_ssh_executable"
    assert [str(r) for r in key_refusals(EXECUTABLE_KEY, "/opt/wrap", tmp_path)] == [
        str(r) for r in executable_refusals("/opt/wrap")]
    for key in CHECKED_KEYS[:-1]:  # the ssh args, as refusals() reads them
        assert [str(r) for r in key_refusals(key, "-X", tmp_path)] == [str(r) for r in refusals("-X", Path("/"))]
    assert key_refusals("ansible_user", "-X", tmp_path) == []  # not one of these keys
