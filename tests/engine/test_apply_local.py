"""apply / --check / facts end to end on this machine, with the GPU simulator as nvidia-smi."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import yaml
from simnode import needs_root

pytestmark = needs_root()

V100_FIX = {"persistence": True, "power_limit": 200, "clocks": {"mem": 877, "sm": 1005}}  # the basement V100 fix


def lines_with(output: str, *words: str) -> list[str]:
    return [line for line in output.splitlines() if all(w in line for w in words)]


def test_first_apply_converges_every_gpu_and_second_apply_changes_nothing(v100_node):
    inventory = v100_node.inventory(V100_FIX)
    first = v100_node.apply(inventory)
    assert first.exit_code == 0, first.output
    for index in range(4):
        assert lines_with(first.output, "gpu-persistence", f"GPU{index}", "changed", "Disabled -> Enabled")
        assert lines_with(first.output, "gpu-power-limit", f"GPU{index}", "changed", "300.00 W -> 200.00 W")
    assert v100_node.query("persistence_mode") == ["Enabled"] * 4
    assert v100_node.query("power.limit") == ["200.00"] * 4

    second = v100_node.apply(inventory)
    assert second.exit_code == 0, second.output
    assert "changed" not in second.output.replace("changed=0", "")
    assert lines_with(second.stdout, "node1", "ok=5 changed=0 failed=0 skipped=1")
    assert second.stdout.splitlines() == [lines_with(second.stdout, "node1")[0], "", "1 host: 1 ok"]  # a no-op
    assert "layout: as recorded at the last good run" in v100_node.provision("facts", inventory).output
    verbose = v100_node.apply(inventory, "-v")  # every task and GPU
    for index in range(4):
        assert lines_with(verbose.stdout, "gpu-persistence", f"GPU{index}", "ok", "Enabled")
        assert lines_with(verbose.stdout, "gpu-power-limit", f"GPU{index}", "ok", "200.00 W")


def test_check_shows_exactly_the_drift_and_touches_nothing(v100_node):
    inventory = v100_node.inventory(V100_FIX)
    assert v100_node.apply(inventory).exit_code == 0
    assert v100_node.smi("-i", "2", "-pl", "250").returncode == 0  # someone "fixed" GPU2 by hand
    before = v100_node.query("power.limit")

    check = v100_node.apply(inventory, "--check")
    assert check.exit_code == 8, check.output  # would change: the drift gate's bit
    assert lines_with(check.output, "gpu-power-limit", "GPU2", "would change", "250.00 W -> 200.00 W")
    assert [line.split()[:2] for line in check.stdout.splitlines() if line.startswith("    ")] == [
        ["would", "change"]]  # under the host line: the one drift, nothing else
    assert "check mode: nothing was changed" in check.output
    assert v100_node.query("power.limit") == before


def test_out_of_range_power_limit_is_refused_before_any_gpu_is_touched(v100_node):
    inventory = v100_node.inventory({"persistence": True, "power_limit": 400})
    result = v100_node.apply(inventory)
    assert result.exit_code == 2
    assert "no host was touched" in result.output
    problem = lines_with(result.output, inventory, "host node1", "GPU0", "400 W", "150..300 W")
    assert problem, result.output
    assert v100_node.query("persistence_mode") == ["Disabled"] * 4  # not even the valid part ran


def test_invalid_inventory_value_is_refused_before_connecting(v100_node):
    inventory = v100_node.inventory({"power_limit": -5})
    result = v100_node.apply(inventory)
    assert result.exit_code == 2
    assert inventory in result.output and "provision_gpu.power_limit" in result.output
    assert not (v100_node.root / "state" / "provision" / "runs.jsonl").exists()  # the run never started


def test_missing_nvidia_smi_is_reported_per_task_not_a_crash(v100_node, monkeypatch):
    monkeypatch.setenv("PATH", os.environ["PATH"].replace(f"{v100_node.bin}:", ""))
    result = v100_node.apply(v100_node.inventory(V100_FIX))
    assert result.exit_code == 1
    assert lines_with(result.output, "gpu-persistence", "failed", "nvidia-smi is not installed")
    assert lines_with(result.output, "gpu-power-limit", "failed", "nvidia-smi is not installed")


def test_no_devices_found_is_reported(tmp_path, monkeypatch):
    from simnode import SimNode
    node = SimNode(tmp_path, monkeypatch, [], daemon=False)
    result = node.apply(node.inventory(V100_FIX))
    assert result.exit_code == 1
    assert lines_with(result.output, "gpu-persistence", "failed", "found no GPU")


def test_json_output_has_every_gpu_item(v100_node):
    result = v100_node.apply(v100_node.inventory(V100_FIX), "--json")
    assert result.exit_code == 0
    data = json.loads(result.output)
    [host] = data["hosts"]
    assert host["host"] == "node1" and host["status"] == "changed"
    power = next(t for t in host["tasks"] if t["name"] == "gpu-power-limit")
    assert [(i["target"], i["status"], i["before"], i["after"]) for i in power["items"]] == [
        (f"GPU{n}", "changed", "300.00 W", "200.00 W") for n in range(4)]
    # A first converge, every task with something to change: the read, the read under the host lock, ONE command
    # with every task's changes (the supported-clocks cache with them), and one re-read that gives the lock back.
    assert [t["name"] for t in host["tasks"] if t["status"] == "changed"] == [
        "gpu-layout", "gpu-persistence", "gpu-power-limit", "gpu-clocks", "gpu-boot-conf"]
    assert host["commands"] == 4
    assert not os.path.exists("/run/lock/provision.lock")  # given back by that re-read
    assert len(list(Path(os.environ["PROVISION_CLOCK_CACHE"]).glob("*/GPU-*"))) == 4
    again = json.loads(v100_node.apply(v100_node.inventory(V100_FIX), "--json").output)
    assert again["hosts"][0]["status"] == "ok" and again["hosts"][0]["commands"] == 1  # read from the cache


def test_another_runs_changes_between_the_read_and_the_lock_are_seen(v100_node, monkeypatch):
    """The lock taken at once, with the lock generation as the first read saw it, the facts read stand (the
    command takes the lock and nothing more); another run that held the host in between left a new generation:
    the host is read again under the lock, and planned on what that run did."""
    from provision.core import hostlock
    from provision.core.connection import LocalConnection

    inventory = v100_node.inventory(V100_FIX)
    real_run = LocalConnection._run
    between = []

    def another_run_first(self, argv, stdin, timeout):
        if not between and "provision-lock " in " ".join(argv):  # our take: another run got there just before
            other = hostlock.Owner.this_run("clocks")
            assert subprocess.run(hostlock.take_argv(other), capture_output=True).returncode == 0
            for setting in (["-pm", "1"], ["-pl", "200"]):  # what it changed (persistence keeps the limit)
                assert v100_node.smi(*setting).returncode == 0
            subprocess.run(hostlock.release_argv(other), check=True)
            between.append(other)
        return real_run(self, argv, stdin, timeout)

    monkeypatch.setattr(LocalConnection, "_run", another_run_first)
    [host] = json.loads(v100_node.apply(inventory, "--json").output)["hosts"]
    assert between and host["status"] == "changed"
    done = {t["name"]: t["status"] for t in host["tasks"]}
    assert done["gpu-persistence"] == done["gpu-power-limit"] == "ok" and done["gpu-clocks"] == "changed", done
    assert host["commands"] == 5  # read, take the lock (the generation moved), read again, apply, re-read


def test_settings_file_is_written_atomically_with_a_backup_and_diffed(v100_node):
    inventory = v100_node.inventory(V100_FIX)
    assert v100_node.apply(inventory).exit_code == 0
    conf = v100_node.root / "etc" / "provision" / "gpu-tuning.conf"
    first = conf.read_text()
    assert "power_limit=200" in first and oct(conf.stat().st_mode)[-3:] == "644"

    changed = v100_node.inventory({"persistence": True, "power_limit": 250})
    result = v100_node.apply(changed, "--diff")
    assert result.exit_code == 0, result.output
    assert lines_with(result.output, "-gpu=", "power_limit=200") and lines_with(result.output, "+gpu=", "power_limit=250")
    backups = [p for p in conf.parent.iterdir() if p.name.startswith("gpu-tuning.conf.") and p.name.endswith("~")]
    assert len(backups) == 1 and backups[0].read_text() == first
    assert not [p for p in conf.parent.iterdir() if p.name.startswith(".provision.")]  # no temp file left


def test_run_log_records_what_changed(v100_node):
    v100_node.apply(v100_node.inventory(V100_FIX))
    records = [json.loads(line) for line in (v100_node.root / "state" / "provision" / "runs.jsonl").read_text().splitlines()]
    assert [r["event"] for r in records][0] == "start" and records[-1]["event"] == "end"
    power = next(r for r in records if r.get("task") == "gpu-power-limit")
    assert power["host"] == "node1" and power["status"] == "changed" and len(power["items"]) == 4


def test_a_held_lock_is_reported_with_its_owner(v100_node):
    os.makedirs("/run/lock/provision.lock")
    try:
        with open("/run/lock/provision.lock/owner", "w") as fh:
            fh.write("provision apply by alice@laptop pid 42\n")
        result = v100_node.apply(v100_node.inventory(V100_FIX), "--lock-wait", "1")
    finally:
        subprocess.run(["rm", "-rf", "/run/lock/provision.lock"], check=True)
    assert result.exit_code == 1
    assert lines_with(result.output, "another run holds the lock", "alice@laptop")
    assert "node1: waiting up to 1 s for the host lock, held by provision apply by alice@laptop" in result.output
    assert v100_node.query("persistence_mode") == ["Disabled"] * 4


def held_lock(line: str):
    os.makedirs("/run/lock/provision.lock")
    with open("/run/lock/provision.lock/owner", "w") as fh:
        fh.write(line + "\n")


def test_a_lock_whose_run_is_gone_is_taken_over_at_once_with_a_notice(v100_node):
    from provision.core.hostlock import Owner, boot_id, machine_id
    gone = subprocess.Popen(["true"])
    gone.wait()  # a pid of this machine that no longer runs: a run killed with SIGKILL, a crashed laptop session
    dead = Owner(f"provision apply by ops@here pid {gone.pid} since 2026-11-24T08:00:00Z", "deadbeef0001",
                 machine_id(), boot_id(), gone.pid, "12345")
    held_lock(f"{dead.line()} lease_until=9999999999")
    try:
        result = v100_node.apply(v100_node.inventory(V100_FIX), "--lock-wait", "0")
    finally:
        subprocess.run(["rm", "-rf", "/run/lock/provision.lock"], check=True)
    assert result.exit_code == 0, result.output
    assert (f"node1: took over the host lock of provision apply by ops@here pid {gone.pid} since "
            f"2026-11-24T08:00:00Z (pid {gone.pid} no longer runs)") in result.output
    assert v100_node.query("power.limit") == ["200.00"] * 4


def test_a_lock_of_another_machine_is_waited_for_until_its_lease_expires_or_unlock_removes_it(v100_node):
    inventory = v100_node.inventory(V100_FIX)
    elsewhere = "provision apply by ops@ci-runner pid 77 since 2026-11-24T08:00:00Z; run=0a0a machine=ci boot=b pid=77"
    held_lock(f"{elsewhere} pidstart=1 lease_until=9999999999")  # a live lease: its run may still be changing
    try:
        waited = v100_node.apply(inventory, "--lock-wait", "0")
        assert waited.exit_code == 1 and lines_with(waited.output, "another run holds the lock", "ops@ci-runner",
                                                     f"provision unlock {inventory} --limit node1")
        unlocked = v100_node.provision("unlock", inventory)
        assert unlocked.exit_code == 0, unlocked.output
        assert lines_with(unlocked.output, "node1", "removed", "the lock of provision apply by ops@ci-runner pid 77")
        assert not os.path.exists("/run/lock/provision.lock")
        assert lines_with(v100_node.provision("unlock", inventory).output, "node1", "no lock")

        held_lock(f"{elsewhere} pidstart=1 lease_until=1000")  # its run stopped renewing it long ago
        expired = v100_node.apply(inventory, "--lock-wait", "0")
        assert expired.exit_code == 0, expired.output
        assert "(its lease expired without a heartbeat)" in expired.output
    finally:
        subprocess.run(["rm", "-rf", "/run/lock/provision.lock"], check=True)


def test_unlock_leaves_the_lock_of_a_run_still_running_here_alone_unless_forced(v100_node):
    from provision.core.hostlock import Owner
    inventory = v100_node.inventory(V100_FIX)
    held_lock(f"{Owner.this_run('apply').line()} lease_until=9999999999")  # this test's own process: alive
    try:
        kept = v100_node.provision("unlock", inventory)
        assert kept.exit_code == 1 and lines_with(kept.output, "node1", "left alone", "still running on this machine")
        assert os.path.exists("/run/lock/provision.lock")
        forced = v100_node.provision("unlock", inventory, "--force")
        assert forced.exit_code == 0 and lines_with(forced.output, "node1", "removed")
    finally:
        subprocess.run(["rm", "-rf", "/run/lock/provision.lock"], check=True)


def test_a_no_op_and_check_read_each_host_once_and_never_wait_for_the_lock(v100_node):
    inventory = v100_node.inventory(V100_FIX)
    first = v100_node.apply(inventory)
    assert lines_with(first.output, "node1", "changed=5")
    os.makedirs("/run/lock/provision.lock")
    try:  # another run holds the host: reading it changes nothing, so neither waits
        noop = v100_node.apply(inventory, "--lock-wait", "0")
        check = v100_node.apply(inventory, "--check", "--lock-wait", "0")
    finally:
        subprocess.run(["rm", "-rf", "/run/lock/provision.lock"], check=True)
    assert noop.exit_code == 0 and lines_with(noop.output, "node1", "changed=0", "(1 command,")
    assert check.exit_code == 0 and lines_with(check.output, "node1", "would change=0", "(1 command,")


def test_a_cold_host_caches_its_supported_clocks_and_a_warm_one_calls_nvidia_smi_once(v100_node, tmp_path):
    inventory = v100_node.inventory(V100_FIX)
    assert v100_node.apply(inventory, "--check").exit_code == 8  # all would change
    cache = tmp_path / "cache" / "supported-clocks" / "580.159.04"
    assert not cache.exists()  # --check reads only
    assert v100_node.apply(inventory).exit_code == 0
    assert len(list(cache.iterdir())) == 4
    data = json.loads(v100_node.provision("facts", inventory, "--json").output)["node1"]["nvidia"]
    assert data["supported_clocks_source"] == "cache" and {"mem": 877, "sm": 1005} in data["gpus"][3]["supported_clocks"]


def test_the_lock_is_released_after_a_run(v100_node):
    result = v100_node.apply(v100_node.inventory(V100_FIX))  # changes: takes the lock
    assert result.exit_code == 0 and lines_with(result.output, "node1", "changed=5")
    assert not os.path.exists("/run/lock/provision.lock")


def test_an_unreachable_host_fails_alone(v100_node):
    # 127.0.0.1:1 refuses connections at once: unreachable, while node1 converges.
    inventory = v100_node.inventory(V100_FIX, extra_hosts={"ghost": {"ansible_host": "127.0.0.1", "ansible_port": 1}})
    result = v100_node.apply(inventory)
    assert result.exit_code == 4, result.output
    assert lines_with(result.output, "ghost", "UNREACHABLE", "cannot connect to 127.0.0.1:1: connection refused on "
                      "port 1: is sshd running there, and on that port (ansible_port)?")
    assert "Errno" not in result.output  # the library's own words are not shown
    assert lines_with(result.output, "node1", "ok=0 changed=5 failed=0")
    progress = [line.split(" ", 1)[1] for line in result.output.splitlines() if line.startswith("[")]
    # on a pipe, one line a host: its word after the changes, or its failed read's
    assert sorted(progress) == ["ghost unreachable", "node1 changed"]
    assert v100_node.query("power.limit") == ["200.00"] * 4


def test_persistenced_is_preferred_where_installed(v100_node_with_daemon):
    node = v100_node_with_daemon
    result = node.apply(node.inventory({"persistence": True}), "--tags", "persistence")
    assert result.exit_code == 0, result.output
    assert lines_with(result.output, "gpu-persistence", "host", "nvidia-persistenced", "stopped -> running")
    assert node.query("persistence_mode") == ["Enabled"] * 4
    again = node.apply(node.inventory({"persistence": True}), "--tags", "persistence")
    assert lines_with(again.output, "node1", "ok=1 changed=0")


def test_tags_and_skip_tags_select_tasks(v100_node):
    inventory = v100_node.inventory(V100_FIX)
    result = v100_node.apply(inventory, "--skip-tags", "power,files")
    assert result.exit_code == 0
    assert "gpu-power-limit" not in result.output and "gpu-persistence" in result.output
    assert v100_node.query("power.limit") == ["300.00"] * 4


def test_a_tag_no_task_has_is_bad_input_before_any_host_is_touched(v100_node):
    inventory = v100_node.inventory(V100_FIX)
    typo = v100_node.apply(inventory, "--tags", "powr")
    assert typo.exit_code == 2 and "--tags: no task has the tag 'powr' (hint: did you mean 'power'?)" in typo.output
    unknown = v100_node.apply(inventory, "--skip-tags", "bogusxyz")
    assert unknown.exit_code == 2 and "--skip-tags: no task has the tag 'bogusxyz'" in unknown.output
    known = unknown.output.split("known tags: ", 1)[1].split(")", 1)[0].split(", ")
    assert known == sorted(known) and {"power", "clocks", "driver", "nccl"} <= set(known)  # every tag, in order
    assert v100_node.query("persistence_mode") == ["Disabled"] * 4


def test_a_block_no_task_applies_is_named_once_per_run(v100_node):
    inventory = v100_node.inventory(V100_FIX, extra_hosts={"node2": {"ansible_connection": "local"}})
    data = yaml.safe_load(open(inventory))
    data["all"]["children"]["nodes"]["vars"].update(provision_nccl={"socket_ifname": "ens803f"},
                                                  provision_launcher={"nproc_per_node": 1})
    with open(inventory, "w") as fh:
        yaml.safe_dump(data, fh)
    result = v100_node.apply(inventory, "--check", "--limit", "node1")
    warnings = [line for line in result.output.splitlines() if line.startswith("warning:")]
    assert warnings == [
        "warning: the inventory's `provision_nccl` (node1) is checked but not applied: no task of playbook.yaml "
        "applies it",
        "warning: the inventory's `provision_launcher` (node1) is checked but not applied: no task of playbook.yaml "
        "applies it"]
    assert not any("provision_gpu" in line for line in warnings)


def test_an_adhoc_gpu_choice_that_matches_nothing_is_bad_input_before_anything_changes(v100_node):
    hostile = v100_node.provision("power", "--watts", "200", "--gpu", "0;id")
    assert hostile.exit_code == 2 and "--gpu: '0;id' is not a GPU index or UUID" in hostile.output
    absent = v100_node.provision("power", "--watts", "200", "--gpu", "99")
    assert absent.exit_code == 2, absent.output
    assert "host localhost: --gpu: matches no GPU here; GPUs: 0 GPU-" in absent.output
    assert v100_node.query("power.limit") == ["300.00"] * 4 and not os.path.exists("/etc/provision/gpu-tuning.conf")


def test_facts_table_and_json(v100_node):
    inventory = v100_node.inventory(V100_FIX)
    table = v100_node.provision("facts", inventory)
    assert table.exit_code == 0, table.output
    assert len(lines_with(table.output, "Tesla V100-SXM2-16GB", "off")) == 4
    data = json.loads(v100_node.provision("facts", inventory, "--json").output)
    gpus = data["node1"]["nvidia"]["gpus"]
    assert [g["index"] for g in gpus] == [0, 1, 2, 3]
    assert {"mem": 877, "sm": 1005} in gpus[0]["supported_clocks"]
    matrix = data["node1"]["topology"]["matrix"]  # nvidia-smi topo -m: the SXM2 board's NVLink mesh
    assert matrix["gpus"] == ["GPU0", "GPU1", "GPU2", "GPU3"] and matrix["links"]["GPU0"]["GPU3"].startswith("NV")


def test_facts_local_without_inventory(v100_node):
    result = v100_node.provision("facts", "--local")
    assert result.exit_code == 0 and "driver 580.159.04, 4 GPU(s)" in result.output


def test_a_run_stopped_by_bad_input_found_on_the_hosts_still_logs_its_end(v100_node, tmp_path):
    log = tmp_path / "runs.jsonl"
    result = v100_node.apply(v100_node.inventory({"power_limit": 900}), "--log", str(log))
    assert result.exit_code == 2 and "outside this GPU's range 150..300 W" in result.output
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert records[0]["event"] == "start" and records[-1]["event"] == "end"
    assert records[-1]["aborted"] == "bad input" and "900 W" in records[-1]["detail"]


def test_a_stopped_persistenced_is_started_again_and_verify_says_it_was_stopped(v100_node_with_daemon):
    node = v100_node_with_daemon
    inventory = node.inventory({"persistence": True})
    assert node.apply(inventory, "--tags", "persistence").exit_code == 0
    pidfile = Path("/var/run/nvidia-persistenced/nvidia-persistenced.pid")
    os.kill(int(pidfile.read_text().strip()), signal.SIGTERM)
    for _ in range(50):
        if not pidfile.exists():
            break
        time.sleep(0.1)
    assert node.smi("-pm", "1").returncode == 0  # someone's legacy -pm 1: Enabled until the driver unloads
    assert node.query("persistence_mode") == ["Enabled"] * 4
    verified = node.provision("verify", inventory, "--playbook", node.playbook(), "--json")
    [host] = json.loads(verified.stdout)["hosts"]
    [finding] = [f for f in host["findings"] if f["check"] == "as_intended[gpu-persistence]"]
    assert finding["found"] == "host nvidia-persistenced stopped" and finding["severity"] == "error"
    again = node.apply(inventory, "--tags", "persistence")
    assert again.exit_code == 0 and lines_with(again.output, "gpu-persistence", "host", "nvidia-persistenced",
                                               "stopped -> running")
