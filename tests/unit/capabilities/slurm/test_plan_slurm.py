"""Slurm's packages, munge key and daemons, planned from facts: the key is the controller's, never shown; a daemon
restarts only when a file it reads changed after it started."""

from __future__ import annotations

import base64
import os
import subprocess
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from builders.facts import facts as host_facts
from builders.hosts import host
from provision.core.cluster import Cluster
from provision.capabilities.slurm.facts import parse_slurm_node
from provision.capabilities.system import daemons
from provision.core.facts import parse_packages
from provision.capabilities.system.daemons import DaemonProcess
from provision.core.facts import FileFacts, SystemFacts
from provision.capabilities.host import HostFacts
from provision.inventory.load import load_inventory
from provision.capabilities.slurm.tasks import MUNGE_KEY, MungeKey, SlurmDaemons, SlurmPackages

CLUSTER = """
all:
  children:
    head:
      hosts:
        head-1: {ansible_host: 192.0.2.1, provision_slurm: {controller: head-1}}
    blades:
      hosts:
        blade-1: {ansible_host: 192.0.2.11}
        blade-2: {ansible_host: 192.0.2.12}
      vars:
        provision_slurm: {controller: head-1}
"""
KEY = bytes(range(128))


@pytest.fixture
def inv(tmp_path):
    path = tmp_path / "inventory.yaml"
    path.write_text(textwrap.dedent(CLUSTER))
    return load_inventory(str(path))


def key_file(content: bytes | None, owner="munge", mode="400", exists=True) -> dict:
    return {MUNGE_KEY: FileFacts(MUNGE_KEY, exists, content, mode, owner, owner)}


def munge(inv, read: dict[str, HostFacts], unread: dict[str, str] | None = None) -> MungeKey:
    task = MungeKey()
    task.cluster = Cluster(list(inv.hosts.values()), read, unread or {})
    return task


def test_packages_follow_the_role():
    read = host_facts(packages={"munge": "0.5.15-2", "slurm-client": None, "slurmd": None})
    blade = host("blade-1", provision_slurm={"controller": "head-1"})
    plan = SlurmPackages().plan(blade, read)
    (change,) = plan.changes
    assert change.target == "slurm-client slurmd" and change.commands[-1][-2:] == ["slurm-client", "slurmd"]
    assert change.prepare[0][-1] == "update" and [i.target for i in plan.unchanged] == ["munge"]
    head = host("head-1", provision_slurm={"controller": "head-1"})
    assert SlurmPackages().package_names(head) == ["munge", "slurm-client", "slurmctld"]


def test_every_node_takes_the_controllers_key_and_it_is_never_shown(inv):
    head = host_facts(files=key_file(KEY))
    blade = host_facts(files=key_file(b"x" * 128))  # the key its own munge package made at install
    task = munge(inv, {"head-1": head, "blade-1": blade})
    assert task.plan(inv.hosts["head-1"], head).changes == []
    (change,) = task.plan(inv.hosts["blade-1"], blade).changes
    write = change.write
    assert base64.b64decode(write.content) == KEY and write.base64 and write.sensitive and change.diff == ""
    assert (write.mode, write.owner, write.group) == ("0400", "munge", "munge")
    shown = f"{change.before} {change.after}"
    assert change.before.startswith("another key (sha256 ") and base64.b64encode(KEY).decode()[:8] not in shown
    assert change.verify(host_facts(files=key_file(KEY))) is None
    assert "does not hold the cluster's key" in change.verify(blade)


def test_a_key_with_a_wrong_owner_is_fixed(inv):
    head = host_facts(files=key_file(KEY))
    blade = host_facts(files=key_file(KEY, owner="root"))
    (change,) = munge(inv, {"head-1": head}).plan(inv.hosts["blade-1"], blade).changes
    assert change.before == "owner root:root mode 400"


def test_a_new_cluster_gets_one_new_key_for_all_its_nodes(inv):
    nothing = host_facts(files=key_file(None, exists=False))
    task = munge(inv, {"head-1": nothing, "blade-1": nothing, "blade-2": nothing})
    keys = {task.plan(inv.hosts[name], nothing).changes[0].write.content for name in ("head-1", "blade-1", "blade-2")}
    assert len(keys) == 1 and len(base64.b64decode(keys.pop())) == 128
    assert munge(inv, {}).plan(inv.hosts["head-1"], nothing).changes[0].write.content not in keys


def test_without_the_controllers_key_a_node_fails_and_says_why(inv):
    nothing = host_facts(files=key_file(None, exists=False))
    unreachable = munge(inv, {"blade-1": nothing}, {"head-1": "connection refused"}).plan(inv.hosts["blade-1"], nothing)
    assert unreachable.failed == ("the cluster's munge key is the controller's, and head-1 could not be read "
                                  "(connection refused)")
    task = munge(inv, {"blade-1": nothing})
    task.cluster.facts["head-1"] = None  # not read in this run at all
    del task.cluster.facts["head-1"]
    assert "head-1 could not be read (not read)" in task.plan(inv.hosts["blade-1"], nothing).failed
    unreadable = host_facts(files=key_file(None))
    said = munge(inv, {"head-1": unreadable}).plan(inv.hosts["blade-1"], nothing).failed
    assert said.startswith("cannot read /etc/munge/munge.key on head-1: log in as root")


def test_the_controller_is_read_even_when_the_run_is_limited_to_a_blade(inv):
    everyone = list(inv.hosts.values())
    assert [h.name for h in MungeKey().peer_hosts(inv.hosts["blade-2"], everyone)] == ["head-1"]


def running(name: str, started: float) -> dict:
    return {name: [DaemonProcess(100, "root", started)]}


def test_daemons_restart_only_when_a_file_they_read_changed_after_they_started(inv):
    files = {"/etc/slurm/slurm.conf": FileFacts("/etc/slurm/slurm.conf", True, b"", "644", "root", "root", 1000.0),
             "/etc/slurm/gres.conf": FileFacts("/etc/slurm/gres.conf", True, b"", "644", "root", "root", 900.0),
             MUNGE_KEY: FileFacts(MUNGE_KEY, True, KEY, "400", "munge", "munge", 500.0)}
    facts = host_facts(files=files, units={"munge.service": "enabled", "slurmd.service": "enabled"},
                      daemons={**running("munged", 600.0), **running("slurmd", 1000.5)})
    blade = inv.hosts["blade-1"]
    plan = SlurmDaemons().plan(blade, facts)
    assert plan.changes == [] and [i.target for i in plan.unchanged] == ["munge.service", "slurmd.service"]
    facts.files["/etc/slurm/slurm.conf"].mtime = 1000.7  # written after slurmd started
    (change,) = SlurmDaemons().plan(blade, facts).changes
    assert (change.target, change.before, change.after) == ("slurmd.service",
                                                            "/etc/slurm/slurm.conf changed since it started",
                                                            "restarted")
    assert change.commands == [["service", "slurmd", "restart"]]  # no systemd running: the init script
    facts.system = SystemFacts(systemd_running=True)
    assert SlurmDaemons().plan(blade, facts).changes[0].commands == [["systemctl", "restart", "slurmd.service"]]


def test_a_daemon_not_running_or_not_enabled_is_started_and_enabled(inv):
    facts = host_facts(units={"munge.service": "disabled", "slurmctld.service": "enabled"})
    munged, slurmctld = SlurmDaemons().plan(inv.hosts["head-1"], facts).changes
    assert munged.commands == [["systemctl", "enable", "munge.service"], ["service", "munge", "restart"]]
    assert (munged.before, munged.after) == ("not enabled, not running", "enabled and started")
    assert slurmctld.commands == [["service", "slurmctld", "restart"]] and slurmctld.after == "started"
    assert "slurmctld is not running" in slurmctld.verify(host_facts())


def test_package_and_daemon_sections_parse_what_dpkg_and_proc_print():
    packages = parse_packages("asked munge slurmd slurmctld nvidia-driver-580\n"
                                      "munge 0.5.15-2+deb12u1 ii \nslurmd 22.05.8-4+deb12u3 rc \n"
                                      "nvidia-driver-580 580.159.04-1provision1 hi \n")
    assert packages == {"munge": "0.5.15-2+deb12u1", "slurmd": None, "slurmctld": None,
                        "nvidia-driver-580": "580.159.04-1provision1"}
    running = daemons.parse_daemons("clock 100 1000.50 1763900000.25\nproc munged 812 munge 12345\n"
                                    "proc slurmd 900 root -\nproc bogus 1 root 1\n")
    assert running["munged"] == [DaemonProcess(812, "munge", 1763900000.25 - (1000.50 - 123.45))]
    assert running["slurmd"] == [DaemonProcess(900, "root", None)] and running["slurmctld"] == []


def test_a_key_the_controllers_munge_package_makes_mid_run_does_not_replace_the_runs_key(inv):
    nothing = host_facts(files=key_file(None, exists=False))
    task = munge(inv, {"head-1": nothing, "blade-1": nothing})
    given = task.plan(inv.hosts["blade-1"], nothing).changes[0].write.content
    installed = host_facts(files=key_file(b"p" * 128))  # the head, re-read after apt installed munge
    assert task.plan(inv.hosts["head-1"], installed).changes[0].write.content == given


def test_scontrol_show_node_is_read_as_states_and_reason():
    drained = parse_slurm_node(
        "NodeName=lab-gpu-1 Arch=x86_64 CoresPerSocket=2 State=IDLE+DRAIN ThreadsPerCore=1 Partitions=gpu "
        "Reason=provision-verify: GPU2 lost [root@2026-11-23T14:00:00] Comment=(null)")
    assert (drained.name, drained.states) == ("lab-gpu-1", ("IDLE", "DRAIN"))
    assert drained.reason == "provision-verify: GPU2 lost"
    assert drained.out_of_service and not parse_slurm_node("NodeName=n State=MIXED Weight=1").out_of_service
    down = parse_slurm_node("NodeName=n1 State=DOWN+NOT_RESPONDING Reason=Not responding [slurm@2026-11-23]")
    assert down.reason == "Not responding" and down.out_of_service
    unreachable = parse_slurm_node("slurm_load_node error: Unable to contact slurm controller (connect failure)")
    assert unreachable.error.startswith("slurm_load_node error") and parse_slurm_node("no-scontrol\n") is None


def test_drain_only_failed_nodes_and_resume_only_what_verify_drained(inv):
    from types import SimpleNamespace

    from provision.capabilities.slurm.facts import SlurmNodeState
    from provision.verify import FAIL, PASS, Failure, Verdict
    from provision.commands.drain import slurm_actions

    def state(name, states, reason=""):
        return SimpleNamespace(host=inv.hosts[name], facts=host_facts(slurm_node=SlurmNodeState(name, states, reason)))

    states = [state("head-1", ("IDLE",)), state("blade-1", ("IDLE",)), state("blade-2", ("IDLE", "DRAIN"), "psu")]
    verdicts = {"head-1": Verdict("head-1", FAIL, failures=[Failure("x", "y", "z")]),
                "blade-1": Verdict("blade-1", FAIL, failures=[Failure("nccl_interfaces_are_up_at_speed", "up",
                                                                      "ens803f1 1000   Mb/s"), Failure("b", "", "")]),
                "blade-2": Verdict("blade-2", PASS)}
    (drain,) = slurm_actions(states, verdicts, drain=True, resume=True)
    assert drain.argv() == ["scontrol", "update", "NodeName=blade-1", "State=DRAIN",
                            "Reason=provision-verify: nccl_interfaces_are_up_at_speed: ens803f1 1000 Mb/s (+1 more)"]
    states[2] = state("blade-2", ("IDLE", "DRAIN"), "provision-verify: gpu_count: 3")
    resume = slurm_actions(states, verdicts, drain=False, resume=True)
    assert [a.argv() for a in resume] == [["scontrol", "update", "NodeName=blade-2", "State=RESUME"]]


def test_with_local_the_cluster_wide_files_and_key_are_not_judged_from_one_node(inv):
    from provision.core.resources import templates_dir
    from provision.capabilities.slurm.tasks import SlurmConfig

    blade = host_facts(files=key_file(None, exists=False))
    cluster = Cluster(list(inv.hosts.values()), {"blade-1": blade}, local_only=True)
    config, key = SlurmConfig(), MungeKey()
    config.templates = templates_dir()
    config.cluster = key.cluster = cluster
    skipped = config.plan(inv.hosts["blade-1"], blade).skipped
    assert skipped == ("needs the facts of head-1, blade-2, and --local reads this machine only: run it from the "
                       "control machine")
    assert key.plan(inv.hosts["blade-1"], blade).skipped.startswith("needs the facts of head-1,")


def test_slurm_conf_waits_while_a_node_of_the_cluster_waits_for_its_new_drivers_reboot(inv):
    """A driver moved under a rolling reboot: the nodes not rebooted yet answer 'Driver/library version mismatch'
    and list no GPU. slurm.conf waits for them (skipped, the file as it is) rather than failing on every node."""
    from provision.core.resources import templates_dir
    from provision.capabilities.slurm.tasks import SlurmConfig

    read = {"head-1": host_facts(), "blade-1": host_facts(),
            "blade-2": host_facts(state="mismatch", message="Failed to initialize NVML: Driver/library version "
                                  "mismatch NVML library version: 570.195")}
    config = SlurmConfig()
    config.templates = templates_dir()
    config.cluster = Cluster(list(inv.hosts.values()), read, {})
    plan = config.plan(inv.hosts["blade-1"], read["blade-1"])
    assert plan.skipped == ("waits for the reboot of blade-2: its new driver lists no GPU until then, and "
                            "slurm.conf needs them; the file stays as it is") and not plan.failed


def test_the_health_check_runs_verify_on_the_node_against_an_inventory_that_means_the_same(inv, tmp_path):
    from provision.capabilities import clusters
    from provision.core.resources import templates_dir
    from provision.capabilities.slurm.tasks import HEALTH_CHECK, NODE_INVENTORY, SlurmConfig, node_inventory

    text = textwrap.dedent(CLUSTER).replace("provision_slurm: {controller: head-1}\n",
                                            "provision_slurm: {controller: head-1, health_check_interval: 60}\n"
                                            "        provision_launcher: {nproc_per_node: 2}\n")
    text = text.replace("provision_slurm: {controller: head-1}}", "provision_slurm: {controller: head-1, health_check_interval: 60}}")
    (tmp_path / "inventory.yaml").write_text(text)
    inv = load_inventory(str(tmp_path / "inventory.yaml"))
    copy = tmp_path / "node.yaml"
    copy.write_text(node_inventory(list(inv.hosts.values())))
    again = load_inventory(str(copy))
    for name, written in inv.hosts.items():
        other = again.hosts[name]
        assert (other.address, other.settings.slurm, other.settings.launcher) == (
            written.address, written.settings.slurm.model_copy(update={"partition": clusters.partition_of(written)}),
            written.settings.launcher)
        assert clusters.launcher_group(other) == clusters.launcher_group(written)
    config = SlurmConfig()
    config.templates = templates_dir()
    assert HEALTH_CHECK in config.file_paths(inv.hosts["blade-1"]) and NODE_INVENTORY in config.file_paths(
        inv.hosts["blade-1"])
    assert config.file_paths(inv.hosts["head-1"]) == [f"/etc/slurm/{n}" for n in ("slurm.conf", "gres.conf",
                                                                                  "cgroup.conf")]


def render_health_check(tmp_path, **settings) -> Path:
    """The health check script as apply writes it for blade-1, its verdict under tmp_path, run with stand-ins:
    `provision` (exits $VERIFY_RC), `scontrol` (says $SCONTROL_STATE; records what it is asked) on PATH."""
    from provision.capabilities.slurm.tasks import HEALTH_CHECK_TEMPLATE
    from provision.capabilities.system.files import render
    from provision.core.resources import templates_dir

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True)
    for name, body in {"provision": 'echo "provision $*" >> "$LOG"; echo "{}"; exit "${VERIFY_RC:-0}"',
                       "scontrol": 'echo "scontrol $*" >> "$LOG"; echo "NodeName=x State=${SCONTROL_STATE:-IDLE}"',
                       "site-check": 'echo "site-check" >> "$LOG"; exit "${ALSO_RC:-0}"'}.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    verdict = tmp_path / "run" / "health-check.json"
    context = {"host": SimpleNamespace(name="blade-1"), "interval": 60, "verdict": str(verdict),
               "verdict_dir": str(verdict.parent), "inventory": "/etc/provision/inventory.yaml",
               "provision": str(bin_dir / "provision"), "prometheus": settings.get("prometheus"),
               "also": str(bin_dir / "site-check") if settings.get("also") else None,
               "active_verdict": str(verdict.parent / "verify-active.json"),
               "active_sbatch": "/usr/local/sbin/provision-verify-active.sbatch"}
    script = tmp_path / "provision-health-check"
    script.write_text(render(templates_dir(), HEALTH_CHECK_TEMPLATE, context))
    return script


def run_health_check(script: Path, *args: str, **env) -> tuple[int, list[str]]:
    log = script.parent / "log"
    log.unlink(missing_ok=True)
    proc = subprocess.run(["sh", str(script), *args], env={"PATH": f"{script.parent / 'bin'}:/usr/bin:/bin",
                                                    "LOG": str(log), **env}, capture_output=True, text=True)
    return proc.returncode, log.read_text().splitlines() if log.exists() else []


def test_the_health_check_writes_the_metrics_where_configured(tmp_path):
    script = render_health_check(tmp_path, prometheus="/var/lib/prometheus/node-exporter/provision.prom")
    code, said = run_health_check(script)
    assert code == 0 and said == ["provision verify /etc/provision/inventory.yaml --local --limit=blade-1 --drain "
                                  "--resume --json --prometheus /var/lib/prometheus/node-exporter/provision.prom"]
    assert (tmp_path / "run" / "health-check.json").read_text() == "{}\n"
    plain = render_health_check(tmp_path / "plain")
    assert "--prometheus" not in plain.read_text() and "site-check" not in plain.read_text()


def test_a_chained_site_checker_that_fails_drains_the_node_and_holds_its_resume(tmp_path):
    script = render_health_check(tmp_path, also=True)
    code, said = run_health_check(script)  # both pass: verify may resume what it drained
    assert code == 0 and said[0] == "site-check" and said[1].endswith("--drain --resume --json")
    code, said = run_health_check(script, ALSO_RC="3")  # theirs fails, ours passes: drained, never resumed
    assert code == 1 and said[1].endswith("--limit=blade-1 --drain --json")
    assert said[-1].startswith("scontrol update NodeName=") and "State=DRAIN" in said[-1]
    assert said[-1].endswith(f"Reason=provision-verify: health_check_also: {tmp_path}/bin/site-check exited 3")
    code, said = run_health_check(script, ALSO_RC="3", SCONTROL_STATE="IDLE+DRAIN")  # NHC drained it itself
    assert code == 1 and not any(line.startswith("scontrol update") for line in said)
    code, said = run_health_check(script, VERIFY_RC="1")  # ours fails: verify drains (its own reason)
    assert code == 1 and not any(line.startswith("scontrol update") for line in said)


def test_the_active_sbatch_script_runs_the_health_check_with_active_on_each_node_of_its_job(tmp_path):
    """The sbatch script for active runs: srun (a stand-in running its command here, once per "node") starts the
    health check with --active and the script's arguments; each node's verdict goes to its own file, not the
    periodic check's, and is printed after a header; the job fails when a node does."""
    from provision.capabilities.slurm.tasks import ACTIVE_SBATCH_TEMPLATE
    from provision.capabilities.system.files import render
    from provision.core.resources import templates_dir

    check = render_health_check(tmp_path)
    check.chmod(0o755)  # as apply writes it
    (tmp_path / "run" / "health-check.json").parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / "run" / "health-check.json").write_text("periodic\n")
    srun = tmp_path / "bin" / "srun"
    srun.write_text('#!/bin/sh\nwhile [ "${1#--}" != "$1" ]; do shift; done\n"$@"\n')
    srun.chmod(0o755)
    verdict = tmp_path / "run" / "verify-active.json"
    text = render(templates_dir(), ACTIVE_SBATCH_TEMPLATE, {"path": "/usr/local/sbin/provision-verify-active.sbatch",
                                                            "check": str(check), "verdict": str(verdict),
                                                            "partition": "gpu"})
    assert "#SBATCH --exclusive" in text and "#SBATCH --partition=gpu" in text
    sbatch = tmp_path / "provision-verify-active.sbatch"
    sbatch.write_text(text)
    env = {"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin", "LOG": str(tmp_path / "log"), "SLURM_JOB_ID": "41",
           "SLURM_JOB_NUM_NODES": "1", "SLURM_JOB_NODELIST": "blade-1"}
    proc = subprocess.run(["bash", str(sbatch), "--duration", "30"], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "log").read_text().splitlines() == [
        "provision verify /etc/provision/inventory.yaml --local --limit=blade-1 --drain --resume --json --active "
        "--duration 30"]
    assert verdict.read_text() == "{}\n" and (tmp_path / "run" / "health-check.json").read_text() == "periodic\n"
    assert proc.stdout.splitlines()[1:] == [f"== {os.uname().nodename.split('.')[0]}: exit 0", "{}"]
    failed = subprocess.run(["bash", str(sbatch)], env={**env, "VERIFY_RC": "1"}, capture_output=True, text=True)
    assert failed.returncode == 1 and ": exit 1" in failed.stdout
