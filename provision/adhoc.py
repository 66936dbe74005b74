"""Ad-hoc GPU settings (`provision clocks|power|persistence`): one setting, now and after every reboot.

An ad-hoc change is planned and applied like `apply` (same checks, same
tasks), on settings made per host once its facts are read:

  base    the host's boot file (/etc/provision/gpu-tuning.conf), i.e. what the
          host is promised after a reboot now; the inventory's gpu block where
          the host has no boot file yet
  change  the command's setting, as a per-UUID override for the chosen GPUs

So the boot file keeps every other line and gains this change. When the
inventory says otherwise, the user is warned: the next `apply` converges
back to the inventory.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any, Callable

from pydantic import ValidationError

from provision.errors import InputError, Problem
from provision.facts.model import GpuFacts, HostFacts
from provision.inventory import Host
from provision.settings import GpuOverride, GpuSettings
from provision.tasks import boot


def check_change(change: dict[str, Any], option: str) -> None:
    """The command-line value, validated like an inventory value (InputError names the option)."""
    try:
        GpuOverride.model_validate({"index": 0, **change})
    except ValidationError as exc:
        raise InputError([Problem("command line", "", option, error["msg"].removeprefix("Value error, "))
                          for error in exc.errors()]) from None


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
    """The boot file's lines back as per-UUID overrides (a GPU's resolved values are valid settings)."""
    overrides = []
    for uuid, words in boot.parse(text).items():
        entry: dict[str, Any] = {"uuid": uuid}
        if words.get("persistence") in ("on", "off"):
            entry["persistence"] = words["persistence"] == "on"
        if "power_limit" in words:
            watts = float(words["power_limit"])
            entry["power_limit"] = int(watts) if watts.is_integer() else watts
        if "clocks" in words:
            entry["clocks"] = _clocks(words["clocks"])
        locks = {key: words[word] for key, word in (("sm", "locked_sm"), ("mem", "locked_mem"),
                                                    ("mem", "mem_deferred")) if word in words}
        if locks:
            entry["locked_clocks"] = _locks(locks)
        try:
            overrides.append(GpuOverride.model_validate(entry))
        except ValidationError:
            continue  # a line edited by hand into nonsense: the inventory's value (if any) applies
    return GpuSettings(overrides=overrides)


def _clocks(value: str):
    if value == "default":
        return "default"
    mem, sm = value.split(",")
    return {"mem": int(mem), "sm": int(sm)}


def _locks(values: dict[str, str]):
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
            base = settings_from_boot_file(current.content.decode("utf-8", "replace"))
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
        overrides = [GpuOverride.model_validate({"uuid": g.uuid, **self.change}) for g in chosen]
        if self.from_inventory:
            self._warn_if_inventory_differs(host, chosen)
        gpu = base.model_copy(update={"overrides": [*base.overrides, *overrides]})
        return replace(host, settings=host.settings.model_copy(update={"gpu": gpu}))

    def _warn_if_inventory_differs(self, host: Host, gpus: list[GpuFacts]) -> None:
        inventory = host.settings.gpu or GpuSettings()
        for gpu in gpus:
            resolved = inventory.for_gpu(gpu.index, gpu.uuid, gpu.name)
            for key, value in self.change.items():
                said = getattr(resolved, key)
                said = said.model_dump(exclude_defaults=True) if hasattr(said, "model_dump") else said
                if said is None:
                    self.warnings.append(f"{host.name} {gpu.label}: the inventory does not set gpu.{key}; the next "
                                         "`provision apply` removes it from the boot file (it stays until reboot)")
                elif _normal(said) != _normal(value):
                    self.warnings.append(f"{host.name} {gpu.label}: the inventory says gpu.{key} {said}; the next "
                                         "`provision apply` sets that back")


def _normal(value: Any) -> Any:
    """Settings compared as the validator would store them: [a, b] and (a, b) alike, 200 and 200.0 alike."""
    if isinstance(value, dict):
        return {k: _normal(v) for k, v in value.items() if not (k == "nearest" and v is False)}
    if isinstance(value, (list, tuple)):
        return [_normal(v) for v in value]
    return float(value) if isinstance(value, int) and not isinstance(value, bool) else value
