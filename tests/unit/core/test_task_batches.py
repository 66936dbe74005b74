"""Which tasks of a playbook go to a host in one command: tasks in a row where none plans from what another
changes (Task.plans_from, Task.alters, the files each reads and writes) are planned on one read and applied
together (core/batches.py joins). A task that plans from what an earlier one changed waits for the read after it."""

from __future__ import annotations

import textwrap

from provision.commands.playbook import load_playbook
from provision.core.facts import overlaps
from provision.core.plan import Change, FileWrite
from provision.core.resources import playbook_path, templates_dir
from provision.core.results import TaskResult
from provision.core.batches import NOT_VERIFIED, ChangeOutcome, Planned, checked, joins
from provision.inventory.load import load_inventory

from builders.facts import facts

NODE = """\
all:
  hosts:
    node-1:
      ansible_host: 192.0.2.1
      provision_driver: {version: "580.95.05", source: local, repository: "deb [trusted=yes] http://mirror/ ./"}
      provision_gpu: {persistence: true, power_limit: 200, clocks: {mem: 877, sm: 1005}}
      provision_nccl: {socket_ifname: "=ens803f0,ens803f1"}
      provision_launcher: {nproc_per_node: gpu}
      provision_slurm: {controller: node-1, role: both}
"""


def batches(tmp_path, changing=lambda task: True) -> list[list[str]]:
    """The playbook's tasks as the engine batches them on a first converge, each task that `changing` names
    writing the files it reads."""
    (tmp_path / "inventory.yaml").write_text(textwrap.dedent(NODE))
    host = load_inventory(str(tmp_path / "inventory.yaml")).hosts["node-1"]
    tasks = load_playbook(playbook_path("site"), templates_dir())
    out: list[list[str]] = []
    batch: list[Planned | TaskResult] = []
    for task in tasks:
        if batch and (task.waits_for_peers or not joins(task, host, batch)):  # a stage begins (core/stages.py)
            out.append([p.task.name if isinstance(p, Planned) else p.name for p in batch])
            batch = []
        if changing(task):
            writes = [Change(path, "file", "", "", write=FileWrite(path, "")) for path in task.reads(host).paths]
            batch.append(Planned(task, [], writes or [Change("host", "it", "", "")]))
        else:
            batch.append(TaskResult(task.name, "ok"))
    return out + [[p.task.name if isinstance(p, Planned) else p.name for p in batch]]


def without_the_toolkit(task) -> bool:
    """NODE sets no provision_driver.container_toolkit or dcgm: their tasks skip (tests/unit/capabilities/containers
    has their batches where it is set); nor has it NVSwitches: the fabric manager's task skips; nor provision_gpu.mig:
    the MIG tasks skip (a layout waits for the mode: test_a_mig_layout_is_planned_after_its_mode)."""
    return not {"containers", "fabric", "dcgm", "mig"} & task.tags


def test_a_whole_node_converges_in_five_commands_of_changes(tmp_path):
    assert batches(tmp_path, without_the_toolkit) == [
        # the driver's packages change anything: the host is read again before the GPUs are planned
        ["nouveau-blacklist", "driver-repository", "nvidia-driver"],
        # each GPU setter plans from its own setting; files from their own; packages change anything
        ["fabric-manager", "container-toolkit", "cdi-spec", "container-runtime", "dcgm", "nvidia-peermem", "gpu-layout", "gpu-persistence", "gpu-mig-mode", "gpu-mig-layout", "gpu-ecc", "gpu-compute-mode", "gpu-power-limit", "gpu-clocks", "gpu-locked-clocks", "gpu-boot-conf",
         "gpu-boot-script", "gpu-boot-unit-file", "gpu-boot-unit", "nccl-files", "slurm-packages"],
        ["munge-key"],
        # a stage of its own: slurm.conf plans from every host's facts as the first stage left them
        ["slurm-config", "enroot-pyxis", "pyxis-plugstack"],  # the last two skip: no containers here
        # the daemons restart for the files just written: planned on the read after them
        ["slurm-daemons", "torchrun-launcher"],
    ]


def test_the_gpu_settings_and_their_boot_unit_are_one_command(tmp_path):
    driver_ready = lambda task: without_the_toolkit(task) and task.name not in (  # noqa: E731
        "nouveau-blacklist", "driver-repository", "nvidia-driver")
    first, *_ = batches(tmp_path, driver_ready)
    assert first[:3] == ["nouveau-blacklist", "driver-repository", "nvidia-driver"]  # ok: nothing to wait for
    assert first[-2:] == ["nccl-files", "slurm-packages"]


def test_a_mig_layout_is_planned_after_its_mode(tmp_path):
    """The layout plans from the mode the mode task changes: the host is read again between them."""
    first, second, *_ = batches(tmp_path, lambda task: task.name in ("gpu-mig-mode", "gpu-mig-layout"))
    assert first[-1] == "gpu-mig-mode" and second[0] == "gpu-mig-layout"


def test_fact_names_overlap_by_part_and_star_holds_everything():
    assert overlaps(frozenset({"nvidia"}), frozenset({"nvidia.power_limit"}))
    assert overlaps(frozenset({"nvidia.power_limit"}), frozenset({"nvidia"}))
    assert not overlaps(frozenset({"nvidia.power_limit"}), frozenset({"nvidia.persistence"}))
    assert not overlaps(frozenset({"nvidia.gpus"}), frozenset({"nvidia.gpus_x"}))
    assert overlaps(frozenset({"*"}), frozenset({"units.enabled"})) and overlaps(frozenset({"cpu"}), frozenset({"*"}))
    assert not overlaps(frozenset(), frozenset({"*"}))


def test_a_template_of_the_users_that_reads_facts_is_planned_on_a_fresh_read(tmp_path):
    templates = tmp_path / "templates"
    templates.mkdir()
    (templates / "plain.j2").write_text("{{ host.name }}\n")
    (templates / "facts.j2").write_text("{% for g in facts.nvidia.gpus %}{{ g.power_limit }}{% endfor %}\n")
    (templates / "include.j2").write_text("{% include 'facts.j2' %}\n")
    book = tmp_path / "book.yaml"
    book.write_text("tasks:\n  - task: gpu-power-limit\n" + "".join(
        f"  - task: template\n    name: {n}\n    src: {n}.j2\n    dest: /etc/{n}\n" for n in ("plain", "facts", "include")))
    (tmp_path / "inventory.yaml").write_text(textwrap.dedent(NODE))
    host = load_inventory(str(tmp_path / "inventory.yaml")).hosts["node-1"]
    power, plain, facts, include = load_playbook(book, templates)
    batch: list[Planned | TaskResult] = [Planned(power, [], [Change("GPU0", "power limit", "300", "200")])]
    assert joins(plain, host, batch)
    assert not joins(facts, host, batch) and not joins(include, host, batch)


def test_a_task_for_blocks_the_host_does_not_set_never_splits_a_batch(tmp_path):
    """No Slurm here: slurm-daemons, which plans from the units the boot unit's task enables, is skipped, and the
    last batch's re-read still gives the lock back (no command of its own)."""
    (tmp_path / "inventory.yaml").write_text(textwrap.dedent("""\
        all:
          hosts:
            node-1: {provision_gpu: {persistence: true}, provision_nccl: {socket_ifname: "=ens803f0"}}
        """))
    host = load_inventory(str(tmp_path / "inventory.yaml")).hosts["node-1"]
    tasks = {t.name: t for t in load_playbook(playbook_path("site"), templates_dir())}
    unit = Planned(tasks["gpu-boot-unit"], [], [Change("provision-gpu-tuning.service", "unit", "", "")])
    assert joins(tasks["slurm-daemons"], host, [unit]) and joins(tasks["torchrun-launcher"], host, [unit])


def test_each_change_is_judged_on_the_read_after_its_batch_or_unverified_when_the_host_was_lost():
    tasks = load_playbook(playbook_path("site"), templates_dir())
    power = next(task for task in tasks if task.name == "gpu-power-limit")
    held = Change("GPU0", "power limit", "300", "200", verify=lambda facts: "GPU0 is at 300 W")
    taken = Change("GPU1", "power limit", "300", "200", verify=lambda facts: None)
    broken = Change("GPU2", "power limit", "300", "200")
    batch = Planned(power, [], [held, taken, broken])
    outcomes = [ChangeOutcome(held, None, ""), ChangeOutcome(taken, None, ""), ChangeOutcome(broken, "exit 3", "")]
    judged = checked(batch, outcomes, facts(), lost=None)
    assert [(i.target, i.status, i.message) for i in judged.items] == [
        ("GPU0", "failed", "the command succeeded but GPU0 is at 300 W"), ("GPU1", "changed", ""),
        ("GPU2", "failed", "exit 3")]
    lost = checked(batch, outcomes, None, lost="the connection closed")
    assert [(i.status, i.message) for i in lost.items] == [("changed", NOT_VERIFIED), ("changed", NOT_VERIFIED),
                                                           ("failed", "exit 3")]
