"""Planning clocks, locked clocks, the daemon drop-in, the boot file and boot unit: pure, per GPU model.

GPU facts come from parsing what nvidia-smi prints: the real H100 capture,
and for the other models the simulator's output (its figures are sourced in
provision_lab/gpu_models.md and golden-tested against real captures).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from provision.capabilities.gpu import smi as parsers
from provision.capabilities.gpu.model import ClockPair, NvidiaFacts
from provision.capabilities.host import HostFacts
from provision.capabilities.gpu import boot
from provision.capabilities.gpu.clocks import ApplicationClocks, LockedClocks
from provision.capabilities.gpu.tasks import DAEMON_DROPIN, PACKAGED_UNITS, Persistence
from provision.capabilities.system.services import ServiceEnabled
from builders.facts import facts, file
from builders.hosts import host
from paths import GPUSIM

_cache: dict[str, list] = {}


def gpus_of(model: str, count: int = 1, tmp: Path = Path("/tmp")) -> list:
    """Parsed facts of `count` GPUs of a model, as nvidia-smi (the simulator) prints them."""
    if (model, count) not in _cache:
        workdir = Path(os.environ.get("TMPDIR", "/tmp")) / f"plan-clocks-{os.getpid()}-{model}-{count}"
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / "config.json").write_text(json.dumps({"gpus": [{"model": model, "count": count}]}))
        env = dict(os.environ, NVIDIA_SIM_CONFIG=str(workdir / "config.json"),
                   NVIDIA_SIM_STATE=str(workdir / "state.json"), NVIDIA_SIM_KMSG=str(workdir / "kmsg"))

        def smi(argv: list[str]) -> str:
            done = subprocess.run([sys.executable, str(GPUSIM), *argv], capture_output=True, text=True, env=env)
            assert done.returncode == 0, done.stderr
            return done.stdout

        gpus, _ = parsers.parse_query_gpu(smi(parsers.QUERY_GPU_ARGV))
        supported = parsers.parse_supported_clocks_csv(smi(parsers.SUPPORTED_CLOCKS_ARGV))
        for g in gpus:
            g.supported_clocks = supported[g.uuid]
        _cache[(model, count)] = gpus
    return [replace(g) for g in _cache[(model, count)]]


# --- application clocks -----------------------------------------------------------------------------

def test_the_basement_v100_fix_sets_application_clocks_on_every_gpu_then_nothing():
    v100s = gpus_of("v100-sxm2-16gb", 4)
    plan = ApplicationClocks().plan(host(provision_gpu={"clocks": {"mem": 877, "sm": 1005}}), facts(gpus=v100s))
    assert [(c.target, c.before, c.after) for c in plan.changes] == [
        (f"GPU{i}", "877,1312", "877,1005 (-ac)") for i in range(4)]
    # every GPU to the same pair: ONE nvidia-smi without -i (every GPU); each GPU keeps its change and check
    assert plan.changes[0].commands == [["nvidia-smi", "-eow", "-ac", "877,1005"]]
    assert all(c.commands == [] and c.runs_with is plan.changes[0] for c in plan.changes[1:])
    done = [replace(g, app_clock_mem=877, app_clock_sm=1005) for g in v100s]
    assert all(c.verify(facts(gpus=done)) is None for c in plan.changes)
    assert plan.changes[3].verify(facts(gpus=[*done[:3], v100s[3]])).startswith(
        "GPU3 application clocks read 877,1312, not")
    two = ApplicationClocks().plan(host(provision_gpu={"clocks": {"mem": 877, "sm": 1005}}),
                                   facts(gpus=[*done[:2], *v100s[2:]]))
    assert [c.commands for c in two.changes] == [  # not every GPU: one call per GPU, each by its UUID
        [["nvidia-smi", "-i", g.uuid, "-eow", "-ac", "877,1005"]] for g in v100s[2:]]
    again = ApplicationClocks().plan(host(provision_gpu={"clocks": {"mem": 877, "sm": 1005}}), facts(gpus=done))
    assert again.changes == [] and len(again.unchanged) == 4


def test_an_unsupported_pair_is_refused_with_the_nearest_real_v100_pairs(real_output):
    pairs = next(iter(parsers.parse_supported_clocks_q(real_output("supported-clocks/v100-pcie-32gb-ttu-hpcc.txt"))
                      .values()))
    v100 = replace(gpus_of("v100-sxm2-16gb")[0], supported_clocks=pairs)
    plan = ApplicationClocks().plan(host(provision_gpu={"clocks": {"mem": 877, "sm": 1001}}), facts(gpus=[v100]))
    [problem] = plan.problems
    assert "GPU0 (Tesla V100-SXM2-16GB)" in problem and "mem 877, sm 1001 is not a supported" in problem
    nearest = problem.split("nearest: ")[1].split(".")[0].split()
    assert nearest[0] in ("877,997", "877,1005") and all(ClockPair(*map(int, p.split(","))) in pairs for p in nearest)
    assert plan.changes == []


def test_nearest_true_snaps_to_the_nearest_pair_and_says_so():
    plan = ApplicationClocks().plan(host(provision_gpu={"clocks": {"mem": 877, "sm": 1004, "nearest": True}}),
                                    facts(gpus=[gpus_of("v100-sxm2-16gb")[0]]))
    [change] = plan.changes
    assert change.after == "877,1005 (-ac, nearest supported pair to 877,1004)"
    assert change.commands[0][-1] == "877,1005"


@pytest.mark.parametrize("model", ["rtx-3090", "rtx-4090"])
def test_application_clocks_on_geforce_is_a_plan_error_suggesting_locked_clocks(model):
    [geforce] = gpus_of(model)
    assert geforce.supported_clocks, "GeForce lists pairs yet refuses -ac: decided by default clocks, not the list"
    plan = ApplicationClocks().plan(host(provision_gpu={"clocks": {"mem": 9751, "sm": 1005}}), facts(gpus=[geforce]))
    [problem] = plan.problems
    assert "not supported by this GPU" in problem and "use provision_gpu.locked_clocks" in problem and "1005]}" in problem
    reset = ApplicationClocks().plan(host(provision_gpu={"clocks": "default"}), facts(gpus=[geforce]))
    assert reset.problems == [] and reset.changes == [] and "no application clocks" in reset.unchanged[0].after


def test_clocks_default_resets_with_rac_where_they_differ():
    [h100] = gpus_of("h100-80gb-hbm3")
    moved = replace(h100, app_clock_mem=1593, app_clock_sm=1005)
    [change] = ApplicationClocks().plan(host(provision_gpu={"clocks": "default"}), facts(gpus=[moved])).changes
    assert change.commands == [["nvidia-smi", "-i", h100.uuid, "-eow", "-rac"]]
    assert change.after == "2619,1980 (-rac, the default)"


# --- locked clocks ----------------------------------------------------------------------------------

def test_geforce_locks_graphics_and_memory_and_records_them():
    [rtx] = gpus_of("rtx-4090")
    settings = {"locked_clocks": {"sm": [210, 2500], "mem": [405, 10501]}}
    plan = LockedClocks().plan(host(provision_gpu=settings), facts(gpus=[rtx]))
    assert [c.commands[0] for c in plan.changes] == [
        ["nvidia-smi", "-i", rtx.uuid, "-eow", "-lgc", "210,2500"],
        ["nvidia-smi", "-i", rtx.uuid, "-eow", "-lmc", "405,10501"]]
    record = plan.changes[-1].commands[-1]
    assert record[:2] == ["sh", "-c"] and record[-1] == f"{rtx.uuid} sm=210,2500 mem=405,10501"
    recorded = replace(rtx, locked={"sm": "210,2500", "mem": "405,10501"})
    assert plan.changes[-1].verify(facts(gpus=[recorded])) is None
    again = LockedClocks().plan(host(provision_gpu=settings), facts(gpus=[recorded]))
    assert again.changes == [] and [i.after for i in again.unchanged] == ["210,2500", "405,10501"]


def test_one_value_locks_both_ends_and_only_the_changed_lock_runs():
    [rtx] = gpus_of("rtx-3090")
    recorded = replace(rtx, locked={"sm": "210,1695", "mem": "405,9751"})
    plan = LockedClocks().plan(host(provision_gpu={"locked_clocks": {"sm": 1500, "mem": [405, 9751]}}),
                               facts(gpus=[recorded]))
    [change] = plan.changes
    assert change.commands[0][-2:] == ["-lgc", "1500,1500"] and change.before == "210,1695"
    assert change.commands[-1][-1] == f"{rtx.uuid} sm=1500,1500 mem=405,9751"


def test_volta_locks_graphics_but_memory_lock_is_refused():
    [v100] = gpus_of("v100-sxm2-16gb")
    assert LockedClocks().plan(host(provision_gpu={"locked_clocks": {"sm": [135, 1005]}}), facts(gpus=[v100])).changes
    plan = LockedClocks().plan(host(provision_gpu={"locked_clocks": {"mem": [877, 877]}}), facts(gpus=[v100]))
    [problem] = plan.problems
    assert "needs Ampere or newer" in problem and "this GPU is 7.0" in problem and "provision_gpu.clocks" in problem


def test_hopper_locks_memory_at_the_next_driver_load_with_lmcd():
    [h100] = gpus_of("h100-80gb-hbm3")
    plan = LockedClocks().plan(host(provision_gpu={"locked_clocks": {"mem": 1593}}), facts(gpus=[h100]))
    [change] = plan.changes
    assert change.commands[0][-2:] == ["-lmcd", "1593"] and "next driver load" in change.what
    for bad in ([1593, 2619], 877):
        [problem] = LockedClocks().plan(host(provision_gpu={"locked_clocks": {"mem": bad}}),
                                        facts(gpus=[h100])).problems
        assert "Hopper" in problem and "supported: 2619, 1593" in problem


def test_a_lock_outside_the_gpus_clocks_names_the_range():
    [h100] = gpus_of("h100-80gb-hbm3")
    [problem] = LockedClocks().plan(host(provision_gpu={"locked_clocks": {"sm": [100, 2500]}}),
                                    facts(gpus=[h100])).problems
    assert "GPU0 (NVIDIA H100 80GB HBM3)" in problem and "[100, 2500]" in problem and "345..1980 MHz" in problem


def test_locked_default_resets_only_what_provision_locked_since_boot():
    [rtx] = gpus_of("rtx-3090")
    fresh = LockedClocks().plan(host(provision_gpu={"locked_clocks": "default"}), facts(gpus=[rtx]))
    assert fresh.changes == [] and len(fresh.unchanged) == 2
    locked = replace(rtx, locked={"sm": "210,1500", "mem": "405,9751"})
    plan = LockedClocks().plan(host(provision_gpu={"locked_clocks": "default"}), facts(gpus=[locked]))
    assert [c.commands[0][-1] for c in plan.changes] == ["-rgc", "-rmc"]
    assert plan.changes[-1].commands[-1][-1] == f"{rtx.uuid} sm=default mem=default"


def test_per_gpu_overrides_pick_the_mechanism_per_gpu():
    gpus = [gpus_of("v100-sxm2-16gb")[0], replace(gpus_of("rtx-3090")[0], index=1)]
    settings = {"overrides": [{"model": "V100", "clocks": {"mem": 877, "sm": 1005}},
                              {"model": "3090", "locked_clocks": {"sm": [210, 1005]}}]}
    app = ApplicationClocks().plan(host(provision_gpu=settings), facts(gpus=gpus))
    locks = LockedClocks().plan(host(provision_gpu=settings), facts(gpus=gpus))
    assert [c.target for c in app.changes] == ["GPU0"] and [c.target for c in locks.changes] == ["GPU1"]
    assert app.problems == locks.problems == []


# --- persistence daemon drop-in (Ubuntu's static unit with --no-persistence-mode) ---------------------

UBUNTU_UNIT = """[Unit]
Description=NVIDIA Persistence Daemon
Wants=syslog.target
StopWhenUnneeded=true
Before=systemd-backlight@backlight:nvidia_0.service

[Service]
Type=forking
ExecStart=/usr/bin/nvidia-persistenced --user nvidia-persistenced --no-persistence-mode --verbose
ExecStopPost=/bin/rm -rf /var/run/nvidia-persistenced
"""


def test_a_no_persistence_mode_unit_gets_a_drop_in_and_a_restart_where_systemd_runs():
    [h100] = gpus_of("h100-80gb-hbm3")
    off = replace(h100, persistence=False)
    files = {PACKAGED_UNITS[0]: file(PACKAGED_UNITS[0], UBUNTU_UNIT), DAEMON_DROPIN: file(DAEMON_DROPIN, None)}
    read = facts(gpus=[off], systemd=True, files=files)
    read.nvidia.persistenced_path, read.nvidia.persistenced_running = "/usr/bin/nvidia-persistenced", True
    [dropin] = Persistence().plan(host(provision_gpu={"persistence": True}), read).changes
    assert dropin.write.path == DAEMON_DROPIN
    assert "ExecStart=\nExecStart=/usr/bin/nvidia-persistenced --user nvidia-persistenced --verbose\n" in dropin.write.content
    assert dropin.after_write == [["systemctl", "daemon-reload"], ["systemctl", "restart", "nvidia-persistenced"]]
    files[DAEMON_DROPIN] = file(DAEMON_DROPIN, dropin.write.content)
    read.nvidia.gpus = [replace(h100, persistence=True)]  # on after the restart
    again = Persistence().plan(host(provision_gpu={"persistence": True}), read)
    assert again.changes == []


# --- the boot file and the boot unit ----------------------------------------------------------------

def test_the_boot_file_has_one_resolved_line_per_gpu_and_keeps_a_gpu_that_is_gone():
    v100, rtx, h100 = gpus_of("v100-sxm2-16gb")[0], gpus_of("rtx-3090")[0], gpus_of("h100-80gb-hbm3")[0]
    rtx, h100 = replace(rtx, index=1), replace(h100, index=2)
    node = host(provision_gpu={
        "persistence": True, "power_limit": 250,
        "overrides": [{"model": "V100", "clocks": {"mem": 877, "sm": 1004, "nearest": True}},
                      {"model": "3090", "locked_clocks": {"sm": [210, 1005], "mem": [405, 9751]}},
                      {"model": "H100", "power_limit": "default", "locked_clocks": {"mem": 2619}}]})
    old = "gpu=GPU-gone index=3 persistence=on power_limit=200\n"
    text = boot.render(node, facts(gpus=[v100, rtx, h100]), old)
    assert text.startswith("# Managed by provision for node1")
    lines = [line.partition("  #")[0] for line in text.splitlines() if line.startswith(("gpu=", "model="))]
    assert lines == [
        f"gpu={v100.uuid} index=0 persistence=on power_limit=250 clocks=877,1005",
        f"gpu={rtx.uuid} index=1 persistence=on power_limit=250 locked_sm=210,1005 locked_mem=405,9751",
        f"gpu={h100.uuid} index=2 persistence=on power_limit=700 mem_deferred=2619",
        "gpu=GPU-gone persistence=on power_limit=250",  # by UUID only, as the inventory gives it now
        # then a line per model, by name, for a card the file does not list
        f"model={rtx.name.replace(' ', '_')} persistence=on power_limit=250 locked_sm=210,1005 locked_mem=405,9751",
        f"model={h100.name.replace(' ', '_')} persistence=on power_limit=700 mem_deferred=2619",
        f"model={v100.name.replace(' ', '_')} persistence=on power_limit=250 clocks=877,1005",
        "model=* persistence=on power_limit=250"]  # a model never seen here: the lowest limit given
    assert "# not seen at the last run: was_index=3\n" in text
    assert boot.parse(text)[rtx.uuid]["locked_mem"] == "405,9751" and "GPU-gone" in boot.parse(text)


def test_the_boot_file_is_never_rewritten_without_a_working_nvidia_smi():
    node = host(provision_gpu={"persistence": True})
    plan = boot.BootConf().plan(node, HostFacts(nvidia=NvidiaFacts(state="no-devices", message="No devices were found")))
    assert plan.failed and "cannot write /etc/provision/gpu-tuning.conf" in plan.failed and plan.changes == []


def test_the_boot_unit_is_enabled_offline_and_started_only_where_systemd_runs():
    task = ServiceEnabled({"unit": "provision-gpu-tuning.service", "when": "gpu"})
    node = host(provision_gpu={"persistence": True})
    assert [u.key for u in task.unit_names(node)] == ["provision-gpu-tuning.service"]
    [offline] = task.plan(node, facts(units={"provision-gpu-tuning.service": "disabled"})).changes
    assert offline.commands == [["systemctl", "enable", "provision-gpu-tuning.service"]]
    [live] = task.plan(node, facts(systemd=True)).changes
    assert live.commands == [["systemctl", "enable", "--now", "provision-gpu-tuning.service"]]
    done = task.plan(node, facts(units={"provision-gpu-tuning.service": "enabled"}))
    assert done.changes == [] and done.unchanged[0].after == "enabled"


def test_a_unit_under_another_root_is_read_and_enabled_there_and_never_started():
    task = ServiceEnabled({"unit": "provision-gpu-tuning.service", "root": "/srv/image", "when": "gpu"})
    node = host(provision_gpu={"persistence": True})
    [unit] = task.unit_names(node)
    assert unit.systemctl("is-enabled") == ["systemctl", "--root=/srv/image", "is-enabled", "provision-gpu-tuning.service"]
    [change] = task.plan(node, facts(systemd=True, units={unit.key: "disabled"})).changes
    assert change.commands == [["systemctl", "--root=/srv/image", "enable", "provision-gpu-tuning.service"]]
    assert task.plan(node, facts(units={unit.key: "enabled"})).changes == []
    assert ServiceEnabled({"unit": "x.service", "root": "image"}).check_params("pb.yaml")[0].key == "root"
