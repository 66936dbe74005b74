"""provision clocks|power|persistence|ecc|compute-mode|mig: one GPU setting, now and at every boot, planned and applied like apply
(capabilities/gpu/adhoc.py says how the setting is made per host); and clocks --list."""

from __future__ import annotations

from typing import Any

from provision.capabilities.gpu.adhoc import (MIG_ON, AdhocSettings, AfterTheSetting, check_change,  # noqa: F401  (MIG_ON: for the CLI)
                                              gpu_chooser, setter_names, with_gpu_block)
from provision.capabilities.gpu.boot import CONF, BootConf
from provision.capabilities.gpu.clock_models import clock_models, lines as clock_lines  # noqa: F401  (clock_lines: for the CLI, which imports no capability)
from provision.commands.playbook import load_playbook
from provision.commands.run import Target, engine_for, run_stoppable
from provision.core.connection import SSHOptions
from provision.core.resources import playbook_path, templates_dir
from provision.core.results import HostResult
from provision.core.run import HostState, RunOptions
from provision.core.runlog import RunLog


def adhoc(target: Target, change: dict[str, Any], option: str, gpus: str | None, from_inventory: bool,
          options: RunOptions, ssh: SSHOptions, log: RunLog) -> tuple[list[HostResult], int | None, list[str], str]:
    """(results, the signal that stopped the run or None, warnings, why the run log stopped short or ""). The
    tasks: the ones of each changed setting (provision_gpu.power_limit -> gpu-power-limit), and the boot ones."""
    check_change(change, option)
    task_names = setter_names(change)
    playbook = load_playbook(playbook_path("gpu"), templates_dir(None))
    setters = [t for t in playbook if t.name in task_names]
    # A setter that fails on a host installs nothing there that would run at boot (AfterTheSetting).
    tasks = [*setters, *(AfterTheSetting(t, setters, options.check) for t in playbook
                         if "boot" in t.tags and t.name not in task_names)]
    # The boot file the playbook writes is the one read back as what the host is promised after a reboot.
    conf = next((t.path for t in playbook if isinstance(t, BootConf)), CONF)
    hook = AdhocSettings(change, gpu_chooser(gpus), from_inventory=from_inventory, conf_path=conf)
    options.adjust_host = hook
    engine = engine_for(target, tasks, options, ssh, log)
    results = run_stoppable(engine, [with_gpu_block(h) for h in target.hosts])
    return results, engine.stop.signum, hook.warnings, log.unwritten


def read_gpus(target: Target, options: RunOptions, ssh: SSHOptions) -> list[HostState]:
    """clocks --list: each host read, nothing planned."""
    return engine_for(target, [], options, ssh).read_facts(target.hosts)


def clock_list(target: Target, options: RunOptions, ssh: SSHOptions
               ) -> tuple[list[dict[str, Any]], dict[str, str], list[HostResult]]:
    """clocks --list: the supported clocks per GPU model (capabilities/gpu/clock_models.py's rows), why each host
    without a GPU nvidia-smi can read has none, and each host's read."""
    states = read_gpus(target, options, ssh)
    models = clock_models([s.facts for s in states if s.facts])
    unusable = {s.host.name: s.facts.nvidia.message if s.facts else s.result.message
                for s in states if not s.facts or s.facts.nvidia.state != "ok"}
    return models, unusable, [s.result for s in states]
