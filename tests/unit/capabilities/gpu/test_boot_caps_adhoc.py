"""An ad-hoc setter that fails installs nothing that would run at boot (issue 42): the shipped gpu playbook's boot
tasks (the file, the script, the unit file, the unit enabled), as `provision persistence|power|clocks` runs them,
planned on a host where the setter failed, on one where it has not run yet (--check), and in the run's batches.
tests/engine/test_adhoc_boot.py runs the commands themselves."""

from __future__ import annotations

from builders.facts import facts
from builders.gpus import gpu, gpus
from builders.hosts import host
from provision.capabilities.gpu import boot
from provision.capabilities.gpu.adhoc import AfterTheSetting, settings_from_boot_file
from provision.capabilities.gpu.model import GpuFacts, NvidiaFacts
from provision.capabilities.host import HostFacts
from provision.commands.playbook import load_playbook
from provision.core.facts import SystemFacts
from provision.core.plan import Change
from provision.core.resources import playbook_path, templates_dir
from provision.core.batches import Planned, joins

BOOT_TASKS = ["gpu-boot-conf", "gpu-boot-script", "gpu-boot-unit-file", "gpu-boot-unit"]


def adhoc_tasks(setting: str, check: bool):
    playbook = load_playbook(playbook_path("gpu"), templates_dir(None))
    setters = [t for t in playbook if t.name == f"gpu-{setting.replace('_', '-')}"]
    return setters, [AfterTheSetting(t, setters, check) for t in playbook if "boot" in t.tags]


def v100(power: float) -> GpuFacts:
    return gpu(0, "V100", power_limit=power)


def test_without_a_driver_no_boot_task_is_planned_and_each_says_why():
    setters, boot = adhoc_tasks("persistence", check=False)
    assert [t.name for t in boot] == BOOT_TASKS
    missing = HostFacts(system=SystemFacts(uid=0), nvidia=NvidiaFacts(state="missing", message="nvidia-smi: not found"))
    for task in boot:
        plan = task.plan(host(provision_gpu={"persistence": True}), missing)
        assert plan.changes == [] and plan.skipped.startswith(
            "not installed for the next boot: gpu-persistence failed on this host ("), plan


def test_a_setting_not_in_place_after_its_setter_ran_installs_nothing_but_check_shows_what_would_be():
    read = facts(gpus=[v100(300.0)])
    _, boot = adhoc_tasks("power_limit", check=False)
    plan = boot[0].plan(host(provision_gpu={"power_limit": 200}), read)
    assert plan.skipped == ("not installed for the next boot: gpu-power-limit did not take effect "
                            "(GPU0 power limit 300.00 W, not 200.00 W)")
    _, checked = adhoc_tasks("power_limit", check=True)  # --check: the setter has not run, nor will it
    assert not checked[0].plan(host(provision_gpu={"power_limit": 200}), read).skipped
    done = facts(gpus=[v100(200.0)])
    [change] = boot[0].plan(host(provision_gpu={"power_limit": 200}), done).changes
    assert "power_limit=200" in change.write.content


def test_the_boot_tasks_never_go_in_the_setters_command():
    """Planned after the setter's changes ran and the host was read again: never on the facts read before them."""
    setters, boot = adhoc_tasks("power_limit", check=False)
    batch = [Planned(setters[0], [], [Change("GPU0", "power limit", "300.00 W", "200.00 W")])]
    assert not joins(boot[0], host(provision_gpu={"power_limit": 200}), batch)
    assert all(joins(task, host(provision_gpu={"power_limit": 200}), [Planned(boot[0], [], [])]) for task in boot[1:])


def test_the_boot_file_read_back_as_an_adhoc_commands_settings_renders_itself():
    """An ad-hoc change starts from the boot file (adhoc.py): every other line, the lines for a card the file does
    not list included, stays as it was, caps and all."""
    cards = gpus(3, "V100", power_limit=300.0)
    inventory = {"persistence": True, "power_limit": 250, "overrides": [{"index": 2, "power_limit": 200}]}
    old = boot.render(host(provision_gpu=inventory), facts(gpus=cards, recorded=cards))
    text = boot.render(host(provision_gpu=inventory), facts(gpus=cards[:2], recorded=cards), old)  # card 2 off the bus
    read_back = host(provision_gpu=settings_from_boot_file(text))
    assert boot.render(read_back, facts(gpus=cards[:2], recorded=cards), text) == text
    assert "model=Tesla_V100-SXM2-16GB persistence=on power_limit=250\n" in text
    assert "model=* persistence=on power_limit=200\n" in text
