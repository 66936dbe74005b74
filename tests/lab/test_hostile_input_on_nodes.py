"""Hostile names and values on real nodes (issue 41), on the basement lab: a name that would run a command or write
outside its place is refused before any node is touched; values that are accepted, however odd, reach the node's
torchrun wrapper as the one argument or variable each is, and the wrapper run there over SSH executes nothing else;
a template that links out of --templates never reaches a node; a --limit that cannot be read touches nothing.

Each test leaves the lab as it found it (what it wrote on a node is removed).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.lab

BLADE = "lab-rtx3090-1"
CANARY = "/tmp/provision-pwned"
STAND_IN = "/usr/local/bin/provision-argv"  # a torchrun that prints its arguments and MY_VAR, one a line
WRAPPER = "/usr/local/bin/lab-hostile-torchrun"


def edited(lab, tmp_path: Path, change) -> Path:
    """The lab's inventory with change(tree) applied, in tmp_path."""
    tree = yaml.safe_load(lab.inventory.read_text())
    change(tree)
    path = tmp_path / "inventory.yaml"
    path.write_text(yaml.safe_dump(tree, sort_keys=False))
    return path


def blades(tree: dict) -> dict:
    return tree["all"]["children"]["gpu_nodes"]["children"]


def no_canary_anywhere(lab) -> None:
    for node in ("lab-v100-1", BLADE, "lab-rtx4090-1"):
        assert not lab.node_file(node, CANARY).exists(), node


def test_a_group_name_that_would_run_a_command_reaches_no_node(basement, tmp_path):
    def rename(tree):
        group = blades(tree)
        group[f"rtx3090$(touch${{IFS}}{CANARY})"] = group.pop("rtx3090")

    before = sorted(basement.node_file(BLADE, "/usr/local/bin").iterdir())
    code, result = basement.apply(inventory=edited(basement, tmp_path, rename))
    assert code == 2 and "provision_launcher.group" in result["stderr"] and "no host was touched" in result["stderr"], result
    assert sorted(basement.node_file(BLADE, "/usr/local/bin").iterdir()) == before
    no_canary_anywhere(basement)


STAND_IN_SCRIPT = f"""cat > {STAND_IN} <<'EOF'
#!/bin/sh
for a do printf '[%s]\\n' "$a"; done
printf 'MY_VAR=[%s]\\n' "$MY_VAR"
EOF
chmod 755 {STAND_IN}"""


def test_odd_values_that_are_accepted_reach_the_wrapper_as_written_and_run_nothing_else(basement, tmp_path):
    made = basement.ssh(BLADE, STAND_IN_SCRIPT)
    assert made.returncode == 0, made.stderr

    def odd(tree):
        blades(tree)["rtx3090"]["vars"]["provision_launcher"] = {
            "torchrun": STAND_IN, "wrapper_path": WRAPPER, "options": ["--log-dir=/tmp/%s,y:z@d+e"],
            "env": {"MY_VAR": "~root%s=a,b:c@d+e#f"}}

    try:
        code, result = basement.apply("--limit", BLADE, "--tags", "launcher,nccl",
                                      inventory=edited(basement, tmp_path, odd))
        assert code == 0, result
        ran = basement.ssh(BLADE, f"{WRAPPER} train.py 'a b' '$(touch {CANARY})' '`id`'")
        assert ran.returncode == 0, ran.stderr
        assert ran.stdout.splitlines() == [
            "[--nnodes=4]", "[--nproc-per-node=1]", "[--rdzv-backend=c10d]", f"[--rdzv-endpoint={rdzv(basement)}]",
            "[--rdzv-id=rtx3090]", "[--log-dir=/tmp/%s,y:z@d+e]", "[train.py]", "[a b]", f"[$(touch {CANARY})]",
            "[`id`]", "MY_VAR=[~root%s=a,b:c@d+e#f]"]
        no_canary_anywhere(basement)
    finally:
        basement.ssh(BLADE, f"rm -f {STAND_IN} {WRAPPER} {WRAPPER}.*~")
        code, result = basement.apply("--limit", BLADE, "--tags", "launcher")  # the lab's own all-reduce file back
        assert code == 0, result


def rdzv(lab) -> str:
    """The rendezvous the blades' wrapper names: the first blade's address, port 29400."""
    tree = yaml.safe_load(lab.inventory.read_text())
    return f"{blades(tree)['rtx3090']['hosts'][BLADE]['ansible_host']}:29400"


def test_a_template_that_links_out_of_its_folder_never_reaches_a_node(basement, tmp_path):
    from provision.core.resources import templates_dir

    templates = tmp_path / "templates"
    shutil.copytree(templates_dir(), templates)
    secret = tmp_path / "secret"
    secret.write_text("SECRET-OF-THE-CONTROL-MACHINE\n")
    (templates / "nccl.conf.j2").unlink()
    (templates / "nccl.conf.j2").symlink_to(secret)
    before = basement.node_file(BLADE, "/etc/nccl.conf")
    had = before.read_text() if before.exists() else None
    code, result = basement.apply("--limit", BLADE, "--templates", str(templates), "--check", "--diff")
    assert code == 2 and "outside the templates directory" in result["stderr"], result
    assert "SECRET" not in str(result)
    code, result = basement.apply("--limit", BLADE, "--templates", str(templates))
    assert code == 2 and "SECRET" not in str(result)
    assert (before.read_text() if before.exists() else None) == had


@pytest.mark.parametrize("limit", ["~[", "~rtx3090-1|[", "", "~"])
def test_a_limit_that_cannot_be_read_touches_no_node(basement, limit):
    code, result = basement.apply("--limit", limit, "--check")
    assert code == 2 and "limit" in result["stderr"] and "no host was touched" in result["stderr"], result
