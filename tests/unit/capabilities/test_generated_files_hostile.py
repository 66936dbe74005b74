"""Every file provision generates, from hostile names and values (issue 41): a value from the inventory is either
refused for the hosts that use it, before any host is touched, or it reaches its file quoted for its context.

The scripts are run for real, under `sh -x` (and bash, which is /bin/sh on some distributions), with stand-ins on
PATH that record the arguments and environment they are given: each value arrives as exactly the one argument it
should be, and nothing else runs (a canary file that any injected command would create never appears, and no
`touch` is in the shell's trace). The other files are read back as their readers split them: slurm.conf's
partition line and the apt source keep their words, provision_nccl.env its variables.

Names and values are drawn from payloads seen in the issue (command substitution, backticks, ; | &, quotes,
../, leading -, a=b, a trailing backslash, a lookalike letter) and from random text over shell characters.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import textwrap
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from provision.capabilities.driver.tasks import DriverRepository
from provision.capabilities.launcher.tasks import TorchrunLauncher
from provision.capabilities.nccl.tasks import NcclFiles
from provision.capabilities.nccl.facts import Interface
from provision.capabilities.slurm.tasks import ACTIVE_VERDICT, HEALTH_CHECK, NODE_INVENTORY, VERDICT, SlurmConfig
from provision.core.cluster import Cluster
from provision.core.errors import InputError
from provision.core.resources import templates_dir
from provision.inventory.load import load_inventory

from builders.slurmnodes import head_facts, v100_node

CANARY = "@CANARY@"  # replaced, in each example, by a path that only an injected command would create
PAYLOADS = [
    f"$(touch {CANARY})", f"`touch {CANARY}`", f";touch {CANARY}", f"|touch {CANARY}", f"&touch {CANARY}",
    f"$(touch${{IFS}}{CANARY})", f"'$(touch {CANARY})'", f'"; touch {CANARY}; "', f"x\ntouch {CANARY}",
    "../../../tmp/x", "..", ".", "-c", "-x", "a=b", "x\\", "#x", "${IFS}", "{{ 7*7 }}", "%s", "a b", "x'y", 'x"y',
    "power_lim\u0456t", "~root", "*", "-", "=",
]
SHELL_TEXT = st.text(alphabet="abz019_-.=/,:@%+$();`'\"\\ |&<>*?~#{}\u0456", min_size=1, max_size=10)
WORD = st.one_of(st.sampled_from(PAYLOADS), SHELL_TEXT, st.from_regex(r"[a-z][a-z0-9_-]{0,8}", fullmatch=True))
HOSTILE = settings(deadline=None, max_examples=60, suppress_health_check=[HealthCheck.too_slow])
SHELLS = [shell for shell in ("sh", "bash") if shutil.which(shell)]

STAND_IN = """#!/bin/sh
# Records how it was called: its name, its arguments, the environment's NCCL_ and MY_ variables.
python3 - "$0" "$@" <<'EOF' >> "$RECORD"
import json, os, sys
print(json.dumps({"argv": sys.argv[1:], "env": {k: v for k, v in os.environ.items() if k.startswith(("NCCL_", "MY_"))}}))
EOF
case $(basename "$0")/$2 in
    scontrol/hostnames) echo node2 ;;
    scontrol/*) echo "NodeName=node2 NodeAddr=10.0.0.2 State=IDLE" ;;
    srun/*) while [ "${1#--}" != "$1" ]; do shift; done; "$@" ;;
esac
"""


class Node:
    """One example's place: a canary path, stand-ins on PATH, and what they recorded."""

    def __init__(self, root: Path):
        self.root, self.bin, self.record = root, root / "bin", root / "record.jsonl"
        self.canary = root / "pwned"
        self.bin.mkdir()

    def stand_in(self, path: Path | str) -> bool:
        """A recording stand-in at path: False where that is not a file under bin/."""
        path = Path(path)
        if not path.is_relative_to(self.bin) or ".." in path.parts:
            return False
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(STAND_IN)
        path.chmod(0o755)
        return True

    def run(self, shell: str, script: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
        file = self.root / "script"
        file.write_text(script)
        self.record.unlink(missing_ok=True)
        return subprocess.run([shell, "-x", str(file), *args], capture_output=True, text=True, timeout=30,
                              cwd=self.root, env={"PATH": f"{self.bin}:/usr/bin:/bin", "RECORD": str(self.record),
                                                  **(env or {})})

    def calls(self) -> list[dict]:
        return [json.loads(line) for line in self.record.read_text().splitlines()] if self.record.exists() else []

    def assert_nothing_injected(self, proc: subprocess.CompletedProcess) -> None:
        assert not self.canary.exists(), proc.stderr
        traced = [line.lstrip("+ ").split(" ")[0] for line in proc.stderr.splitlines() if line.startswith("+")]
        assert "touch" not in traced, proc.stderr


# Each place a name or value of the inventory reaches a generated file, the key a refusal of it names, and a
# word that is accepted there (what the place goes back to when its hostile word is refused, so that the others are
# still rendered and run).
PLACES = {"group": ("provision_launcher.group", "gpu"), "host": ("", "n2"), "torchrun": ("provision_launcher.torchrun", "torchrun"),
          "option": ("provision_launcher.options", "max-restarts=3"), "env": ("provision_launcher.env", "x"),
          "wrapper": ("provision_launcher.wrapper_path", "run"), "nccl": ("provision_nccl.env", "INIT"), "env_file": ("provision_nccl.env_file", "n"),
          "conf": ("provision_nccl.conf_path", "n"), "provision": ("provision_slurm.provision_command", "provision"),
          "also": ("provision_slurm.health_check_also", "nhc"), "repo": ("provision_driver.repository", "nvidia")}


def inventory_text(node: Node, words: dict[str, str]) -> str:
    """Two hosts of one group: a Slurm controller and a compute node that trains; a word in every place."""
    w, bin_dir = words, node.bin
    data = {"all": {"children": {w["group"]: {
        "hosts": {"head": {"ansible_host": "192.0.2.11", "provision_slurm": {"controller": "head", "role": "controller"}},
                  w["host"]: {"ansible_host": "192.0.2.12"}},
        "vars": {
            "provision_launcher": {"torchrun": f"{bin_dir}/{w['torchrun']}", "options": [f"--{w['option']}"],
                         "env": {"MY_VAR": w["env"]}, "wrapper_path": f"{node.root}/{w['wrapper']}-torchrun"},
            "provision_nccl": {"env_file": f"{node.root}/{w['env_file']}.env", "conf_path": f"{node.root}/{w['conf']}.conf",
                     "env": {"NCCL_DEBUG_SUBSYS": w["nccl"]}},
            "provision_slurm": {"controller": "head", "health_check_interval": 60,
                      "provision_command": f"{bin_dir}/{w['provision']}", "health_check_also": f"{bin_dir}/{w['also']}"},
            "provision_driver": {"version": "580.1.2", "source": "local",
                       "repository": f"deb [trusted=yes] http://m/{w['repo']} ./"},
        }}}}}
    return yaml.safe_dump(data, sort_keys=False).replace(CANARY, str(node.canary))


def accepted_inventory(node: Node, words: dict[str, str]):
    """The inventory with each refused word put back to its accepted one, until none is refused: (inventory, the
    places whose hostile word was refused). A refusal must name the place's key, or the name, and its file."""
    path, refused = node.root / "inventory.yaml", []
    for _ in PLACES:
        try:
            path.write_text(inventory_text(node, words))
            inv = load_inventory(str(path))
            problems = inv.refusals(list(inv.hosts.values()))
        except InputError as exc:
            problems = exc.problems
        except ValueError:  # a name YAML cannot write as a key: refused by YAML itself
            problems = []
        if not problems and path.exists() and "inv" in locals():
            return inv, refused
        assert not node.canary.exists()
        keys = {problem.key for problem in problems}
        places = [place for place, (key, _) in PLACES.items()  # the key, a part of it, or its block
                  if key and any(k and (k.startswith(key) or key.startswith(k)) for k in keys)]
        places = places or ["group", "host"]  # a name: of the group or of the host
        places = [place for place in places if words[place] != PLACES[place][1]]  # those still drawn
        assert places, (words, problems)  # what is refused is one of the drawn words, never an accepted one
        for place in places:
            words[place] = PLACES[place][1]
        refused += places
        inv = None
        del inv
    raise AssertionError(f"still refused with every word put back: {words}")


def planned(task, inv, name: str, facts):
    task.templates = templates_dir()
    task.cluster = Cluster(list(inv.hosts.values()), facts)
    plan = task.plan(inv.hosts[name], facts[name])
    assert not plan.problems and not plan.failed, (plan.problems, plan.failed)
    return {change.write.path: change.write.content for change in plan.changes if change.write}


@HOSTILE
@given(words=st.fixed_dictionaries({place: WORD for place in PLACES}))
@example(words={**{place: accepted for place, (_, accepted) in PLACES.items()}, "group": f"g$(cd;touch${{IFS}}{CANARY})"})
@example(words={**{place: accepted for place, (_, accepted) in PLACES.items()}, "group": "../../../tmp/x"})
@example(words={**{place: accepted for place, (_, accepted) in PLACES.items()}, "host": "-n2", "torchrun": "a=b"})
@example(words={place: "$(id)" for place in PLACES})
@example(words={**{place: f"$(touch {CANARY})" for place in PLACES}, "wrapper": "{%"})  # found by CI: the refusals
@example(words={**{place: accepted for place, (_, accepted) in PLACES.items()}, "host": f"$(touch {CANARY})"})
@example(words={place: accepted for place, (_, accepted) in PLACES.items()})  # all accepted: the scripts do run
def test_every_generated_file_quotes_or_refuses_each_name_and_value(words):
    with tempfile.TemporaryDirectory() as tmp:
        node = Node(Path(tmp))
        inv, refused = accepted_inventory(node, dict(words))
        event(f"{len(PLACES) - len(set(refused))} of {len(PLACES)} places keep their drawn word")
        host = next(name for name in inv.hosts if name != "head")
        group = inv.hosts[host].groups[-1]
        settings_ = inv.hosts[host].settings
        facts = {"head": head_facts("head"), host: v100_node("node2")}
        facts[host].interfaces = [Interface("ens803f0", "up", 10000, ("BROADCAST", "UP", "LOWER_UP"), ("10.0.0.2/24",))]
        files = {**planned(TorchrunLauncher(), inv, host, facts), **planned(NcclFiles(), inv, host, facts),
                 **planned(SlurmConfig(), inv, host, facts), **planned(DriverRepository(), inv, host, facts)}
        wrapper = files[settings_.launcher.wrapper_path]
        env_file = Path(settings_.nccl.env_file)
        env_file.parent.mkdir(parents=True, exist_ok=True)
        env_file.write_text(files[str(env_file)])
        assert node.stand_in(settings_.launcher.torchrun)
        expected = ["--nnodes=2", "--nproc-per-node=4", "--rdzv-backend=c10d", "--rdzv-endpoint=192.0.2.11:29400",
                    f"--rdzv-id={group}", *settings_.launcher.options, "train.py", "a b", "$(touch x)"]
        for shell in SHELLS:
            proc = node.run(shell, wrapper, "train.py", "a b", "$(touch x)")
            node.assert_nothing_injected(proc)
            assert proc.returncode == 0, proc.stderr
            assert node.calls() == [{"argv": [settings_.launcher.torchrun, *expected],
                                     "env": {"MY_VAR": settings_.launcher.env["MY_VAR"],
                                             "NCCL_DEBUG_SUBSYS": settings_.nccl.env["NCCL_DEBUG_SUBSYS"]}}]

        # The sbatch script: srun (a stand-in that runs its command) starts the wrapper, which starts torchrun.
        assert node.stand_in(node.bin / "scontrol") and node.stand_in(node.bin / "srun")
        Path(settings_.launcher.wrapper_path).parent.mkdir(parents=True, exist_ok=True)  # the word may hold a /
        Path(settings_.launcher.wrapper_path).write_text(wrapper)
        Path(settings_.launcher.wrapper_path).chmod(0o755)
        proc = node.run("bash", files[settings_.launcher.wrapper_path + ".sbatch"], "train.py",
                        env={"SLURM_JOB_NODELIST": "node2", "SLURM_JOB_NUM_NODES": "1", "SLURM_JOB_ID": "7",
                             "SLURM_NODEID": "0"})
        node.assert_nothing_injected(proc)
        assert proc.returncode == 0, proc.stderr
        assert node.calls()[-1]["argv"][1:] == ["--nnodes=1", "--nproc-per-node=4", "--rdzv-backend=c10d",
                                                "--rdzv-endpoint=10.0.0.2:29400", "--rdzv-id=7",
                                                *settings_.launcher.options, "train.py"]

        # The health check: verify on this node, after the site's checker; the verdict under this example's root.
        check = files[HEALTH_CHECK].replace(VERDICT.rsplit("/", 1)[0], str(node.root / "run"))
        assert ACTIVE_VERDICT.rsplit("/", 1)[0] not in check
        assert node.stand_in(settings_.slurm.provision_command) and node.stand_in(settings_.slurm.health_check_also)
        proc = node.run("sh", check)
        node.assert_nothing_injected(proc)
        assert [call["argv"] for call in node.calls()] == [
            [settings_.slurm.health_check_also],
            [settings_.slurm.provision_command, "verify", NODE_INVENTORY, "--local", f"--limit={host}", "--drain",
             "--resume", "--json"]]

        # Files read by other programs keep their words.
        conf_dir = settings_.slurm.conf_dir
        partition = [line.split(" ") for line in files[f"{conf_dir}/slurm.conf"].splitlines()
                     if line.startswith("PartitionName=")]
        assert partition == [[f"PartitionName={group}", "Nodes=node2", "Default=YES", "MaxTime=INFINITE", "State=UP"]]
        source = [line for line in files["/etc/apt/sources.list.d/provision-nvidia.list"].splitlines()
                  if not line.startswith("#")]
        assert source == [settings_.driver.repository]  # one line, as validated


def test_a_group_name_that_would_inject_or_escape_is_refused_for_its_hosts_only(tmp_path):
    """The issue's cases: a group whose name runs a command in the wrapper, and one that would write the wrapper
    outside /usr/local/bin; a host of another group is still run."""
    path = tmp_path / "inventory.yaml"
    path.write_text(textwrap.dedent("""
        all:
          vars: {provision_launcher: {}}
          children:
            "g$(cd;touch${IFS}pwned)": {hosts: {n1: {ansible_host: 192.0.2.1}}}
            "../../../tmp/x": {hosts: {n2: {ansible_host: 192.0.2.2}}}
            blades: {hosts: {n3: {ansible_host: 192.0.2.3}}}
        """))
    inv = load_inventory(str(path))
    refused = inv.refusals(list(inv.hosts.values()))
    assert [(p.where, p.key) for p in refused] == [("host n1", "provision_launcher.group"), ("host n2", "provision_launcher.group")]
    assert "'../../../tmp/x' would be the torchrun wrapper's file and job name" in refused[1].message
    assert "rename the group, or set provision_launcher.group" in refused[1].hint
    assert inv.refusals([inv.hosts["n3"]]) == []


@pytest.mark.parametrize("block, value", [
    ({"provision_launcher": {"wrapper_path": "/usr/local/bin/$(id)"}}, "provision_launcher.wrapper_path"),
    ({"provision_launcher": {"wrapper_path": "/usr/local/bin/../../tmp/x"}}, "provision_launcher.wrapper_path"),
    ({"provision_nccl": {"conf_path": "/etc/x;touch y"}}, "provision_nccl.conf_path"),
    ({"provision_nccl": {"env_file": "/etc/a b"}}, "provision_nccl.env_file"),
    ({"provision_slurm": {"controller": "n1", "conf_dir": "/etc/slurm/./"}}, "provision_slurm.conf_dir"),
    ({"provision_slurm": {"controller": "n1", "health_check_also": "/usr/sbin/nhc`id`"}}, "provision_slurm.health_check_also"),
    ({"provision_slurm": {"controller": "n1", "provision_command": "PATH=/tmp"}}, "provision_slurm.provision_command"),
    ({"provision_launcher": {"torchrun": "-c"}}, "provision_launcher.torchrun"),
    ({"provision_active": {"python": "a=b"}}, "provision_active.python"),
    ({"provision_driver": {"version": "580.1.2", "source": "local", "repository": "deb [trusted=yes] http://m/$(id) ./"}},
     "provision_driver.repository"),
    ({"provision_driver": {"version": "580.1.2", "source": "local", "repository": "deb http://m ./; rm -rf /"}},
     "provision_driver.repository"),
])
def test_paths_commands_and_apt_sources_that_a_shell_or_a_path_would_misread_are_refused(tmp_path, block, value):
    path = tmp_path / "inventory.yaml"
    path.write_text(yaml.safe_dump({"all": {"hosts": {"n1": {"ansible_host": "192.0.2.1", **block}}}}))
    with pytest.raises(InputError) as refused:
        load_inventory(str(path))
    assert [problem.key for problem in refused.value.problems] == [value]
    assert str(path) in str(refused.value.problems[0])


def test_the_shipped_paths_and_commands_are_accepted(tmp_path):
    path = tmp_path / "inventory.yaml"
    path.write_text(yaml.safe_dump({"all": {"hosts": {"n1": {
        "ansible_host": "192.0.2.1",
        "provision_launcher": {"torchrun": "/opt/venv/bin/torchrun", "wrapper_path": "/usr/local/bin/train-torchrun"},
        "provision_nccl": {"conf_path": "/etc/nccl.conf", "env_file": "/etc/provision/nccl.env"},
        "provision_slurm": {"controller": "n1", "conf_dir": "/etc/slurm-llnl", "health_check_also": "/usr/sbin/nhc",
                  "provision_command": "/opt/provision/bin/provision"},
        "provision_driver": {"version": "580.1.2", "source": "local",
                   "repository": "deb [arch=amd64 signed-by=/usr/share/keyrings/n.gpg] https://m.lan/nvidia/$(ARCH) /"},
    }}}}))
    assert load_inventory(str(path)).hosts["n1"].settings.launcher.torchrun == "/opt/venv/bin/torchrun"


def test_a_hostname_read_from_a_node_that_is_not_one_is_not_written_into_slurm_conf(tmp_path):
    path = tmp_path / "inventory.yaml"
    path.write_text(textwrap.dedent("""
        all:
          vars: {provision_slurm: {controller: head}}
          hosts:
            head: {ansible_host: 192.0.2.1, provision_slurm: {controller: head, role: controller}}
            n2: {ansible_host: 192.0.2.2}
        """))
    inv = load_inventory(str(path))
    task = SlurmConfig()
    task.templates = templates_dir()
    facts = {"head": head_facts("head"), "n2": v100_node("node2 Default=YES")}
    task.cluster = Cluster(list(inv.hosts.values()), facts)
    plan = task.plan(inv.hosts["n2"], facts["n2"])
    assert "n2: its hostname 'node2 Default=YES' is not a host name" in plan.failed and not plan.changes
    assert os.path.exists(path)
