"""A playbook entry's parameters are checked before any host is touched: tasks that take none say so per key."""

from __future__ import annotations

import pytest

from provision.core.errors import InputError
from provision.commands.playbook import load_playbook
from provision.core.resources import templates_dir


def test_a_parameter_given_to_a_task_that_takes_none_is_named(tmp_path):
    book = tmp_path / "site.yaml"
    book.write_text("tasks:\n  - task: gpu-persistence\n    dest: /x\n  - task: slurm-config\n    conf_dir: /etc\n"
                    "  - task: template\n    src: nccl.conf.j2\n    dest: /etc/nccl.conf\n")
    with pytest.raises(InputError) as caught:
        load_playbook(book, templates_dir())
    said = [str(p) for p in caught.value.problems]
    assert len(said) == 2
    assert "task gpu-persistence: dest: unknown parameter (hint: gpu-persistence takes none)" in said[0]
    assert "task slurm-config: conf_dir: unknown parameter (hint: slurm-config takes none)" in said[1]
