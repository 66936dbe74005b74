"""Ad-hoc GPU settings (`provision clocks|power|persistence|ecc|compute-mode|mig`): one setting, now and after every
reboot (ECC mode: at the next reboot, which the driver keeps it across; MIG mode: at the GPU's next reset or
reboot where it is in use, its layout made at every boot by the boot file's mig= word).

An ad-hoc change is planned and applied like `apply` (same checks, same
tasks), on settings made per host once its facts are read:

  base    the host's boot file (/etc/provision/gpu-tuning.conf), i.e. what the
          host is promised after a reboot now; the inventory's gpu block where
          the host has no boot file yet
  change  the command's setting, as a per-UUID override for the chosen GPUs

So the boot file keeps every other line and gains this change. When the
inventory says otherwise, the user is warned: the next `apply` converges
back to the inventory.

The boot tasks (the boot file, its script, its unit) run on a host only once
the change's own tasks succeeded there (AfterTheSetting): a setter that failed
(no driver, nvidia-smi refused it) installs nothing that would run at boot,
and the host's result says why each boot task was skipped.

The value came from the command line, so what a GPU refuses is said in the
command's flags (`provision clocks --mem 877 --sm 1001`), not in inventory
keys, once per host and refusal with its GPUs listed; values are printed as
the user would type them (flags, or YAML when quoting the inventory).
"""

from __future__ import annotations

import re
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING, Any, Callable

from pydantic import ValidationError

from provision.capabilities.gpu import tuning
from provision.core.errors import InputError, Problem
from provision.capabilities.gpu.model import GpuFacts
from provision.capabilities.gpu.settings import COMPUTE_MODES, GpuOverride, GpuSettings
from provision.core.settings import number_or_word, yaml_words
from provision.core.plan import FAILED, Plan, Task
from provision.capabilities.gpu import boot, mig_boot, mig_facts
from provision.capabilities.gpu.mig_fit import fit
from provision.capabilities.gpu.mig_settings import DISABLED, layout_of
from provision.capabilities.gpu.mig_tasks import mig_gpu

if TYPE_CHECKING:  # types only
    from provision.capabilities.host import HostFacts
    from provision.core.cluster import Cluster
    from provision.core.facts import UnitRef
    from provision.inventory.model import Host

# What each setting means for one GPU (tuning.py); persistence is taken by every GPU.
RESOLVERS: dict[str, Callable[[GpuFacts, Any], Any]] = {
    "power_limit": tuning.power_target, "clocks": tuning.app_clocks_target, "locked_clocks": tuning.locked_targets,
    "ecc": tuning.ecc_target, "compute_mode": tuning.compute_mode_target}


FLAGS = {"power_limit": "--watts", "persistence": "STATE", "ecc": "STATE", "compute_mode": "MODE", "mig": "LAYOUT",
         "clocks.mem": "--mem", "clocks.sm": "--sm",
         "locked_clocks.mem": "--mem", "locked_clocks.sm": "--sm"}


# `provision mig on`: MIG mode on, each GPU keeping the layout its boot file (else the inventory) gives it, none
# where there is none; not an inventory value (there a layout, [] for none, says the mode too).
MIG_ON = "on"
# The tasks of a setting whose task is not gpu-<setting>: MIG's mode, then its layout (mig_tasks.py).
SETTERS = {"mig": ("gpu-mig-mode", "gpu-mig-layout")}


def setter_names(change: dict[str, Any]) -> set[str]:
    """The gpu playbook's tasks that set a change (provision_gpu.power_limit -> gpu-power-limit)."""
    return {name for setting in change for name in SETTERS.get(setting, ("gpu-" + setting.replace("_", "-"),))}


def check_change(change: dict[str, Any], option: str) -> None:
    """The command-line value, validated like an inventory value (InputError names the flag, else `option`)."""
    if change.get("mig") == MIG_ON:
        change = {**change, "mig": []}
    try:
        GpuOverride.model_validate({"index": 0, **change})
    except ValidationError as exc:
        problems: dict[tuple[str, str], Problem] = {}
        for error in exc.errors():
            keys = [part for part in error["loc"] if isinstance(part, str) and not part.startswith("[")]
            flag = FLAGS.get(".".join(keys[:2])) or FLAGS.get(keys[0] if keys else "") or option
            problems.setdefault((flag, error["msg"]), Problem("command line", "", flag,
                                                              error["msg"].removeprefix("Value error, ")))
        raise InputError(list(problems.values())) from None


def with_gpu_block(host: Host) -> Host:
    """A host with a gpu block (empty if the inventory has none), so that the boot file is read and written."""
    if host.settings.gpu is not None:
        return host
    return replace(host, settings=host.settings.model_copy(update={"gpu": GpuSettings()}))


GPU_WORD = re.compile(r"^(\d+|GPU-[0-9a-fA-F-]+)$")


def gpu_chooser(spec: str | None) -> Callable[[GpuFacts], bool]:
    """--gpu "0,2" or UUIDs, comma-separated; None: every GPU. Anything else is bad input."""
    if spec is None:
        return lambda gpu: True
    words = [word.strip() for word in spec.split(",")]
    bad = [word for word in words if not GPU_WORD.match(word)]
    if bad:
        raise InputError([Problem("command line", "", "--gpu", f"{', '.join(map(repr, bad))} is not a GPU index or "
                                  "UUID", "indexes (0,2) or UUIDs (GPU-...), comma-separated; see `provision facts`")])
    wanted = {word.lower() for word in words}
    return lambda gpu: str(gpu.index) in wanted or gpu.uuid.lower() in wanted


def settings_from_boot_file(text: str) -> GpuSettings:
    """The boot file's lines back as overrides (a GPU's resolved values are valid settings): per UUID for its
    cards, per model for the lines of a card it does not list, so that those keep their caps. The line for any
    model is made again from these (the lowest limit they give) and its persistence and compute mode, the
    block's: a card's line has them wherever the block sets them, so no card takes on one its line does not
    have."""
    entries = [{"uuid": uuid, **_settings(words)} for uuid, words in boot.parse(text).items()]
    models = boot.parse_models(text)
    entries += [{"model": name, **_settings(words)} for name, words in models.items() if name != boot.ANY_MODEL]
    block = {k: v for k, v in _settings(models.get(boot.ANY_MODEL, {})).items() if k in ("persistence", "compute_mode")}
    overrides = []
    for entry in entries:
        try:
            overrides.append(GpuOverride.model_validate(entry))
        except ValidationError:
            continue  # a line edited by hand into nonsense: the inventory's value (if any) applies
    return GpuSettings(**block, overrides=overrides)


def _settings(words: dict[str, str]) -> dict[str, Any]:
    """One line's settings, as the inventory would write them."""
    entry: dict[str, Any] = {}
    if words.get("persistence") in ("on", "off"):
        entry["persistence"] = words["persistence"] == "on"
    if words.get("compute_mode") in COMPUTE_MODES:
        entry["compute_mode"] = words["compute_mode"]
    if "power_limit" in words:
        try:
            watts = float(words["power_limit"])
        except ValueError:
            return {"power_limit": words["power_limit"]}  # refused by the validation, as nonsense
        entry["power_limit"] = int(watts) if watts.is_integer() else watts
    if "clocks" in words:
        entry["clocks"] = _clocks(words["clocks"])
    if mig_boot.KEY in words:  # a MIG layout, kept: the file written again must still make it at every boot
        entry["mig"] = mig_boot.layout_of_words(words[mig_boot.KEY])
    locks = {key: words[word] for key, word in (("sm", "locked_sm"), ("mem", "locked_mem"),
                                                ("mem", "mem_deferred")) if word in words}
    if locks:
        entry["locked_clocks"] = _locks(locks)
    return entry


def _clocks(value: str) -> str | dict[str, int]:
    if value == "default":
        return "default"
    mem, sm = value.split(",")
    return {"mem": int(mem), "sm": int(sm)}


def _locks(values: dict[str, str]) -> str | dict[str, list[int]]:
    if all(v == "default" for v in values.values()):
        return "default"
    ranges = {}
    for key, value in values.items():
        if value != "default":
            low, _, high = value.partition(",")
            ranges[key] = [int(low), int(high or low)]
    return ranges


class AdhocSettings:
    """The engine's settings hook for one ad-hoc change; collects the warnings to show after the run."""

    def __init__(self, change: dict[str, Any], choose: Callable[[GpuFacts], bool], from_inventory: bool,
                 conf_path: str = boot.CONF):
        self.change = change
        self.choose = choose
        self.from_inventory = from_inventory
        self.conf_path = conf_path
        self.warnings: list[str] = []

    def __call__(self, host: Host, facts: HostFacts) -> Host:
        current = facts.files.get(self.conf_path)
        if current is not None and current.exists:
            base = settings_from_boot_file(current.text or "")
        else:
            base = host.settings.gpu or GpuSettings()
        if facts.nvidia.state != "ok":  # no GPU to pick: set it host-wide, so the task says why it cannot
            gpu = base.model_copy(update=self.change)
            return replace(host, settings=host.settings.model_copy(update={"gpu": gpu}))
        chosen = [g for g in facts.nvidia.gpus if self.choose(g)]
        if not chosen:  # before anything changes here (the engine stops the run on it)
            raise InputError([Problem("command line", f"host {host.name}", "--gpu", "matches no GPU here; GPUs: "
                                      + ", ".join(f"{g.index} {g.uuid}" for g in facts.nvidia.gpus),
                                      "give indexes or UUIDs from this list")])
        changes = [self.change_for(g, base) for g in chosen]
        overrides = [GpuOverride.model_validate({"uuid": g.uuid, **change}) for g, change in zip(chosen, changes)]
        refused = self._refusals(host, facts, list(zip(chosen, overrides)))
        if refused:  # said here in the command's flags, before the tasks would say it in inventory words
            raise InputError(refused)
        if self.from_inventory:
            self._warn_if_inventory_differs(host, list(zip(chosen, overrides, changes)))
        gpu = base.model_copy(update={"overrides": [*base.overrides, *overrides]})
        return replace(host, settings=host.settings.model_copy(update={"gpu": gpu}))

    def change_for(self, gpu: GpuFacts, base: GpuSettings) -> dict[str, Any]:
        """The change as this GPU takes it: `mig on` keeps the layout the base gives the GPU ([] for none)."""
        if self.change.get("mig") != MIG_ON:
            return self.change
        kept = layout_of(base.for_gpu(gpu.index, gpu.uuid, gpu.name).mig)
        return {**self.change, "mig": kept or []}

    def _refusals(self, host: Host, facts: HostFacts, chosen: list[tuple[GpuFacts, GpuOverride]]) -> list[Problem]:
        """What the chosen GPUs refuse of this change, one problem per host and refusal, its GPUs listed."""
        groups: dict[tuple[str, str, str], list[GpuFacts]] = {}
        resolvers: dict[str, Callable[[GpuFacts, Any], Any]] = {**RESOLVERS, "mig": partial(_fits, facts)}
        for gpu, override in chosen:
            for key, resolve in resolvers.items():
                if key not in self.change:
                    continue
                try:
                    resolve(gpu, getattr(override, key))
                except tuning.Refused as exc:
                    message, hint = self._refusal_words(exc)
                    groups.setdefault((gpu.name, message, hint), []).append(gpu)
        return [Problem("command line", f"host {host.name}", as_typed(self.change),
                        f"{gpu_list(gpus)} ({name}): {message}", hint)
                for (name, message, hint), gpus in groups.items()]

    def _refusal_words(self, exc: tuning.Refused) -> tuple[str, str]:
        """(what is wrong, what to type instead) for one refusal, in the command's flags."""
        message = exc.problem + (f"; {exc.allowed}" if exc.allowed else "")
        if exc.instead is None:
            return message, ""
        refused = exc.key.split(".")[0]
        instead = {k: v for k, v in self.change.items() if k != refused}
        for key, value in exc.instead.items():  # the refused setting's own fields merge: --sm stays with --mem
            given = self.change.get(key)
            instead[key] = {**given, **value} if isinstance(given, dict) and isinstance(value, dict) else value
        typed, better = as_typed(self.change), as_typed(instead)
        hint = f"add {better.removeprefix(typed + ' ')}" if better.startswith(typed + " ") else f"use `{better}`"
        if "clocks" in exc.instead:  # application clocks: only listed pairs
            hint += ", or see `provision clocks --list`"
        return message, hint

    def _warn_if_inventory_differs(self, host: Host,
                                   chosen: list[tuple[GpuFacts, GpuOverride, dict[str, Any]]]) -> None:
        """One warning per host and setting the inventory says otherwise, its GPUs listed, values as typed."""
        inventory = host.settings.gpu or GpuSettings()
        differ: dict[tuple[str, str], tuple[Any, list[GpuFacts]]] = {}
        for gpu, override, change in chosen:
            resolved = inventory.for_gpu(gpu.index, gpu.uuid, gpu.name)
            for key, value in change.items():
                said = getattr(resolved, key)
                if said is not None and _same_on(gpu, key, said, getattr(override, key)):
                    continue  # e.g. --nearest snaps to the inventory's pair
                said = said.model_dump(exclude_defaults=True) if hasattr(said, "model_dump") else said
                if said is None or _normal(said) != _normal(value):
                    differ.setdefault((key, yaml_words(said)), (said, []))[1].append(gpu)
        for (key, words), (said, where) in differ.items():
            if said is None:
                self.warnings.append(f"{host.name} {gpu_list(where)}: the inventory does not set provision_gpu.{key}; the "
                                     "next `provision apply` removes it from the boot file (it stays until reboot)")
            else:
                self.warnings.append(f"{host.name} {gpu_list(where)}: the inventory says provision_gpu.{key} {words} "
                                     f"(`{as_typed({key: said})}`); the next `provision apply` sets that back")


def _fits(facts: HostFacts, gpu: GpuFacts, layout: Any) -> None:
    """A MIG layout this GPU cannot take is Refused (mig_fit.py); "disabled" asks nothing of it."""
    if layout != DISABLED:
        fit(gpu, mig_gpu(facts, gpu), list(layout))


# --- the boot tasks, after the setting ---------------------------------------------------------------------

class AfterTheSetting(Task):
    """A boot task of an ad-hoc change, planned on a host only after the change's tasks (the setters) ran there
    (it plans from what they change, so it never joins their command), and skipped where they did not succeed:
    their plan, made again on the host as it is now, fails, or (not --check) still has changes to make."""

    def __init__(self, task: Task, setters: list[Task], check: bool):
        super().__init__(task.params, task.name, sorted(task.tags))
        self.task, self.setters, self.check = task, setters, check
        self.settings_blocks = task.settings_blocks
        self.alters = task.alters
        self.templates = task.templates

    @property  # the engine gives every task the cluster: the wrapped one needs it
    def cluster(self) -> Cluster | None:
        return self.task.cluster

    @cluster.setter
    def cluster(self, value: Cluster | None) -> None:
        self.task.cluster = value

    def planned_from(self) -> frozenset[str]:
        return self.task.planned_from().union(*(setter.alters for setter in self.setters))

    def blocks(self) -> frozenset[str]:
        return self.task.blocks()

    def file_paths(self, host: Host) -> list[str]:
        return self.task.file_paths(host)

    def peer_hosts(self, host: Host, everyone: list[Host]) -> list[Host]:
        return self.task.peer_hosts(host, everyone)

    def unit_names(self, host: Host) -> list[UnitRef]:
        return self.task.unit_names(host)

    def package_names(self, host: Host) -> list[str]:
        return self.task.package_names(host)

    def fact_sections(self, host: Host) -> list[str]:
        """The wrapped task's, and the MIG listings: a host's boot file may give a GPU a layout the inventory does
        not (`provision mig`), and its mig= word is written again with the placements they list (mig_boot.py)."""
        return [*self.task.fact_sections(host), *mig_facts.SECTION_NAMES]

    def check_params(self, file: str) -> list[Problem]:
        return self.task.check_params(file)

    def plan(self, host: Host, facts: HostFacts) -> Plan:
        why = self.setting_failed(host, facts)
        if why:
            return Plan(skipped=f"not installed for the next boot: {why}")
        return self.task.plan(host, facts)

    def setting_failed(self, host: Host, facts: HostFacts) -> str:
        """Why the change is not in place on this host ("" when it is, or under --check would be)."""
        for setter in self.setters:
            plan = setter.plan(host, facts)
            refused = [f"{item.target}: {item.message}" for item in plan.refused if item.status == FAILED]
            if plan.failed or plan.problems or refused:
                return f"{setter.name} failed on this host ({plan.failed or '; '.join(plan.problems + refused)})"
            if plan.changes and not self.check:
                return f"{setter.name} did not take effect (" + "; ".join(
                    f"{c.target} {c.what} {c.before}, not {c.after}" for c in plan.changes) + ")"
        return ""


# --- values as the user types them -----------------------------------------------------------------

def gpu_list(gpus: list[GpuFacts]) -> str:
    """GPU labels, runs of three or more shortened: "GPU0-3", "GPU0, GPU2", "GPU0-2, GPU5"."""
    indexes = sorted({g.index for g in gpus})
    runs: list[list[int]] = []
    for index in indexes:
        if runs and index == runs[-1][-1] + 1:
            runs[-1].append(index)
        else:
            runs.append([index])
    words = []
    for run in runs:
        words += [f"GPU{run[0]}-{run[-1]}"] if len(run) >= 3 else [f"GPU{i}" for i in run]
    return ", ".join(words)


def as_typed(change: dict[str, Any]) -> str:
    """A change (settings, as the command makes them or the inventory has them) as the command line that makes it:
    `provision clocks --mem 877 --sm 1005`, `provision power --watts 200`, `provision persistence on`,
    `provision mig 3g.71gb,3g.71gb`."""
    if "persistence" in change:
        return f"provision persistence {'on' if change['persistence'] else 'off'}"
    if "ecc" in change:
        return f"provision ecc {'on' if change['ecc'] else 'off'}"
    if "compute_mode" in change:
        return f"provision compute-mode {change['compute_mode']}"
    if "mig" in change:
        mig = change["mig"]
        return "provision mig " + ("off" if mig == DISABLED else ",".join(mig) if isinstance(mig, list) and mig
                                   else MIG_ON)
    if "power_limit" in change:
        return f"provision power --watts {number_or_word(change['power_limit'])}"
    words = ["provision", "clocks"]
    clocks, locked = change.get("clocks"), change.get("locked_clocks")
    if tuning.DEFAULT in (clocks, locked):
        return "provision clocks --reset"
    if isinstance(clocks, dict):
        words += ["--mem", number_or_word(clocks.get("mem")), "--sm", number_or_word(clocks.get("sm"))]
        words += ["--nearest"] if clocks.get("nearest") else []
    if isinstance(locked, dict):
        words.append("--locked")
        for key in ("sm", "mem"):
            bounds = locked.get(key)
            if bounds is not None:
                low, high = bounds
                words += [f"--{key}", number_or_word(low) if low == high else f"{number_or_word(low)},"
                                                                                f"{number_or_word(high)}"]
    return " ".join(words)


def _same_on(gpu: GpuFacts, key: str, said: Any, asked: Any) -> bool:
    """Whether two values of a setting come to the same on this GPU (what tuning.py makes of each)."""
    resolve = RESOLVERS.get(key)
    if resolve is None:
        return bool(said == asked)
    try:
        one, other = resolve(gpu, said), resolve(gpu, asked)
    except tuning.Refused:
        return False
    if key == "clocks":  # (pair, note): the note says how it was reached
        one, other = one[0], other[0]
    return bool(one == other)


def _normal(value: Any) -> Any:
    """Settings compared as the validator would store them: [a, b] and (a, b) alike, 200 and 200.0 alike."""
    if isinstance(value, dict):
        return {k: _normal(v) for k, v in value.items() if not (k == "nearest" and v is False)}
    if isinstance(value, (list, tuple)):
        return [_normal(v) for v in value]
    return float(value) if isinstance(value, int) and not isinstance(value, bool) else value
