"""apply --via slurm, its pure parts (commands/via_slurm.py): who goes through srun and who over SSH, the task
each node runs (executed here by a real sh, with a stand-in provision), and srun's labelled output read back
into per-host results. The whole path runs on the Slurm lab: tests/lab/test_slurm.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from provision.commands import via_slurm
from provision.core.errors import InputError
from provision.core.plan import CHANGED, FAILED, Item
from provision.core.results import HostResult, TaskResult, from_json, to_json
from provision.inventory.load import load_inventory
from provision.output import verify_json
from provision.verify import Failure, Verdict

INVENTORY = """
all:
  children:
    controller:
      hosts:
        head: {ansible_host: 10.0.0.1}
      vars:
        provision_slurm: {controller: head}
    gpu:
      hosts:
        gpu-1: {ansible_host: 10.0.0.11}
        gpu-2: {ansible_host: 10.0.0.12}
        gpu-3: {ansible_host: 10.0.0.13}
        gpu-4: {ansible_host: 10.0.0.14}
      vars:
        provision_slurm: {controller: head, provision_command: /usr/local/bin/provision}
        provision_gpu: {persistence: true}
    other:
      hosts:
        ws: {ansible_host: 10.0.0.50, provision_gpu: {persistence: true}}
"""
# sinfo --noheader --Node --format=%N|%o|%t, as Slurm prints it: NodeName|NodeAddr|compact state
SINFO = """node-a|10.0.0.11|idle
node-b|10.0.0.12|mix
node-c|10.0.0.13|drain
head|10.0.0.1|idle
"""


@pytest.fixture
def hosts(tmp_path):
    path = tmp_path / "inventory.yaml"
    path.write_text(INVENTORY)
    inv = load_inventory([str(path)])
    return {h.name: h for h in inv.hosts.values()}


def test_the_controller_is_the_selected_compute_nodes_one(hosts):
    everyone = list(hosts.values())
    assert via_slurm.controller_of([hosts["gpu-1"], hosts["ws"]], everyone, "inv.yaml").name == "head"


def test_no_compute_node_selected_is_refused_before_anything(hosts):
    with pytest.raises(InputError, match="none of the selected hosts is a Slurm compute node"):
        via_slurm.controller_of([hosts["ws"], hosts["head"]], list(hosts.values()), "inv.yaml")


def test_each_host_goes_through_srun_only_where_it_takes_a_job(hosts):
    selected = [hosts[n] for n in ("head", "gpu-1", "gpu-2", "gpu-3", "gpu-4", "ws")]
    plan = via_slurm.plan_fanout(selected, hosts["head"], SINFO)
    assert {name: host.name for name, host in plan.nodes.items()} == {"node-a": "gpu-1", "node-b": "gpu-2"}
    assert plan.over_ssh == {
        "head": "not a Slurm compute node of head",
        "gpu-3": "Slurm node node-c is drain: it takes no job now",
        "gpu-4": "sinfo on head lists no node at 10.0.0.14",
        "ws": "not a Slurm compute node of head",
    }


def test_a_not_responding_node_takes_no_job(hosts):
    plan = via_slurm.plan_fanout([hosts["gpu-1"]], hosts["head"], "node-a|10.0.0.11|idle*\n")
    assert not plan.nodes and plan.over_ssh == {"gpu-1": "Slurm node node-a is idle*: it takes no job now"}


def run_task(nodes, node_name: str, tmp_path: Path, stdin: str = "the inventory\n"):
    """The task script as srun runs it on one node, its provision a stand-in that says what it got."""
    fake = tmp_path / "provision"
    fake.write_text('#!/bin/sh\necho "args: $*"\necho "inventory: $(cat "$2")"\n')
    fake.chmod(0o755)
    script = via_slurm.task_script(nodes, "apply", ["--check", "--tags", "gpu"]).replace(
        'exec "$p" apply', f'exec {fake} apply')
    return subprocess.run(["sh", "-c", script], input=stdin, capture_output=True, text=True,
                          env={"SLURMD_NODENAME": node_name, "PATH": "/usr/bin:/bin"})


def test_each_task_applies_its_own_host_with_the_inventory_from_stdin(hosts, tmp_path):
    nodes = {"node-a": hosts["gpu-1"], "node-d": hosts["gpu-4"]}
    done = run_task(nodes, "node-d", tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == via_slurm.MARK + "gpu-4"
    assert lines[1] == "args: apply /dev/fd/3 --local --limit gpu-4 --json --check --tags gpu"
    assert lines[2] == "inventory: the inventory"


def test_a_node_srun_was_not_asked_for_says_so(hosts, tmp_path):
    done = run_task({"node-a": hosts["gpu-1"]}, "node-z", tmp_path)
    assert done.returncode == 2 and "no inventory host for Slurm node node-z" in done.stderr


def test_the_srun_command_names_every_node_once_and_waits_no_longer_than_asked(hosts):
    argv = via_slurm.srun_argv({"node-a": hosts["gpu-1"], "node-b": hosts["gpu-2"]}, "apply", ["--check"],
                               "provision-apply-1a2b", wait=30)
    assert argv[:8] == ["srun", "--nodelist=node-a,node-b", "--nodes=2", "--ntasks-per-node=1", "--label",
                        "--input=all", "--immediate=30", "--job-name=provision-apply-1a2b"]
    assert argv[-3:-1] == ["sh", "-c"]


def labelled(label: int, text: str) -> str:
    return "".join(f"{label:>2}: {line}\n" for line in text.splitlines())


def test_the_nodes_json_comes_back_as_their_results_and_a_silent_node_says_why(hosts):
    plan = via_slurm.plan_fanout([hosts["gpu-1"], hosts["gpu-2"]], hosts["head"], SINFO)
    result = HostResult("gpu-1", CHANGED, [
        TaskResult("gpu-persistence", CHANGED, [Item("GPU0", CHANGED, "persistence mode", "off", "on")]),
        TaskResult("slurm-config", "skipped", message="needs the facts of head")], commands=4, seconds=1.5)
    result.settle()
    out = labelled(0, via_slurm.MARK + "gpu-1\n" + json.dumps(to_json([result], False), indent=2))
    err = "srun: error: node-b: task 1: Exited with exit code 1\n"
    said = via_slurm.gather(plan, out, err, 1, "apply", "inv.yaml")
    assert [s.host for s in said] == ["gpu-1", "gpu-2"]
    assert from_json(said[0].data) == [result]  # every field back, as the node had it
    assert not said[1].ran and said[1].data is None
    assert said[1].words == ("srun on head did not run provision on it (exit 1): "
                             "srun: error: node-b: task 1: Exited with exit code 1")


def test_a_node_whose_provision_printed_no_json_says_so_in_its_own_words(hosts):
    plan = via_slurm.plan_fanout([hosts["gpu-1"]], hosts["head"], SINFO)
    out = labelled(0, via_slurm.MARK + "gpu-1\n")
    err = labelled(0, "sh: 1: /usr/local/bin/provision: not found")
    [said] = via_slurm.gather(plan, out, err, 127, "verify", "inv.yaml")
    assert said.ran and said.data is None
    assert said.words == "provision verify on the node gave no report: sh: 1: /usr/local/bin/provision: not found"


def test_the_next_steps_a_node_gives_name_the_users_inventory_not_the_nodes_copy(hosts):
    plan = via_slurm.plan_fanout([hosts["gpu-1"]], hosts["head"], SINFO)
    result = HostResult("gpu-1", FAILED, message="another run holds the lock on this host (...); if none is "
                        "running, `provision unlock /dev/fd/3 --limit gpu-1` removes it")
    out = labelled(0, via_slurm.MARK + "gpu-1\n" + json.dumps(to_json([result], False)))
    [said] = via_slurm.gather(plan, out, "", 1, "apply", 'inventories/my "lab".yaml')
    assert from_json(said.data)[0].message.endswith(
        '`provision unlock inventories/my "lab".yaml --limit gpu-1` removes it')


def test_a_nodes_verdict_comes_back_whole():
    failure = Failure("nccl_interfaces_are_up_at_speed", "10000 Mb/s", "ens803f1 1000 Mb/s", "recable it",
                      ["nic_link"], ["ens803f1"], "error")
    verdict = Verdict("gpu-1", "fail", "", ["no_gpu_is_lost"], [failure], ["nvlink_has_no_errors: no NVLink"],
                      ["a note"])
    told = [{"host": "gpu-1", "node": "node-a", "action": "drain", "said": "drained"}]
    data = json.loads(json.dumps(verify_json.to_json([verdict], told)))
    assert verify_json.from_json(data) == ([verdict], told)


def test_options_that_cannot_travel_are_refused_and_the_rest_are_passed_on():
    flags = frozenset({"accept_gpu_changes"})
    assert via_slurm.apply_arguments(True, "gpu", "", "gpu", None, 60, 3, flags, False, False) == [
        "--check", "--tags", "gpu", "--playbook", "gpu", "--lock-wait", "60", "--keep-backups", "3",
        "--accept-gpu-changes"]
    with pytest.raises(InputError) as refused:
        via_slurm.apply_arguments(False, "", "", "my/site.yaml", "tpl", 60, 3, frozenset(), True, True)
    assert [str(p).split(":")[2] for p in refused.value.problems] == [
        " with --reboot", " with --local", " with --templates tpl", " with --playbook my/site.yaml"]
    assert str(refused.value.problems[0]) == (
        "command line: --via slurm: with --reboot: a node cannot reboot itself from inside its own job step "
        "(hint: leave out --via to reboot over SSH)")
    assert via_slurm.verify_arguments("gpu", None, False, True, False, 20.0, None) == [
        "--playbook", "gpu", "--drain", "--active", "--duration", "20"]
    with pytest.raises(InputError, match="--junitxml out.xml: the JUnit XML is pytest's"):
        via_slurm.verify_arguments(None, None, False, False, False, None, "out.xml")


@pytest.mark.parametrize("everyone", [True, False], ids=["every process of the step", "the task alone"])
def test_a_signal_to_the_step_reaches_provision_once_and_its_report_still_comes_back(hosts, tmp_path, everyone):
    """Slurm signals every process of a step (proctrack/cgroup) or only the task (the lab's nodes): either way
    provision, the task's only process, gets the signal once (a second would abandon its run), its report comes
    back, and no copy of the inventory is left in $TMPDIR."""
    fake = tmp_path / "provision"
    ready = tmp_path / "ready"
    fake.write_text(f'#!/bin/sh\nn=0\ntrap \'n=$((n+1))\' TERM\nhead -c 9 "$2" > {ready}\n'
                    'i=0; while [ $i -lt 30 ]; do sleep 0.1; i=$((i+1)); done\n'
                    'echo "{\\"terms\\": $n}"; exit 143\n')
    fake.chmod(0o755)
    temp = tmp_path / "tmp"
    temp.mkdir()
    script = via_slurm.task_script({"node-a": hosts["gpu-1"]}, "apply", []).replace('exec "$p" apply',
                                                                                   f"exec {fake} apply")
    proc = subprocess.Popen(["sh", "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            env={"SLURMD_NODENAME": "node-a", "PATH": "/usr/bin:/bin", "TMPDIR": str(temp)},
                            start_new_session=True)
    proc.stdin.write("all: {}\n")
    proc.stdin.close()
    deadline = time.monotonic() + 10
    while not (ready.exists() and ready.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ready.read_text() == "all: {}\n"  # the inventory, read through the descriptor
    (os.killpg if everyone else os.kill)(proc.pid, signal.SIGTERM)
    out = proc.stdout.read()
    assert proc.wait(10) == 143
    assert out.splitlines() == [via_slurm.MARK + "gpu-1", '{"terms": 1}']
    assert list(temp.iterdir()) == []
