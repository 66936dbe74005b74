"""The boot file and its task: what every GPU of a host must be set to again after each boot.

/etc/provision/gpu-tuning.conf holds one line per GPU, addressed by UUID
(indexes may change across reboots), with values already resolved and
checked against that GPU (a nearest clock pair snapped, Hopper's deferred
memory lock chosen), then what the file needs to resolve that card again
when it is missing (its model, its power range), behind a "#":

  gpu=GPU-1c2f... index=0 persistence=on compute_mode=exclusive_process power_limit=200 clocks=877,1005  # model="Tesla V100-SXM2-16GB" power=100..300 default=300

Each GPU present has its whole line: every setting the inventory intends for
it, whatever happened to the other GPUs. A GPU missing now (gone, off the
bus, being reseated) keeps a line by UUID only, its index after the "#", and
that line is resolved again from the inventory as it is NOW, for that card
(its UUID, its last index, its model), so that it comes back from a reboot
capped as intended, not as it was:

  gpu=GPU-9a0b... persistence=on power_limit=200  # not seen at the last run: was_index=3 model="..." power=100..300 default=300

A missing card's power limit is clamped into its recorded range: nvidia-smi
refuses a value outside it, and a refused card keeps its default limit, the
highest on most boards; the value nearest the inventory's is the closest to
its intent it can take. (A card present is never clamped: apply refuses the
inventory, an input error, before anything changes.) Its clocks are checked
against a card of its model that is present; with none, it keeps the last
clock values checked against it (clocks are no cap; the next apply sets the
inventory's).

A card the boot meets that the file does not list (a replacement, a card
moved in from another host) gets the line of its model, resolved as the
inventory gives a card of that model it has never seen (no `index:` override
names a new card until the change is accepted), or, for a model this host
never showed, the line for any model: the lowest power limit the inventory
gives any card of this host, and persistence (no clocks: nothing to check
them against). Spaces in a model name are written as "_":

  model=Tesla_V100-SXM2-16GB persistence=on power_limit=200 clocks=877,1005
  model=* persistence=on power_limit=200

The boot script (templates/provision-gpu-tuning.sh, run by the
provision-gpu-tuning.service oneshot) applies each key with nvidia-smi; it
addresses GPUs by UUID (index= is for people) and stops reading a line at "#".
Keys: persistence=on|off, compute_mode=default|exclusive_process|prohibited,
power_limit=W, clocks=MEM,SM|default, locked_sm=MIN,MAX|default,
locked_mem=MIN,MAX|default, mem_deferred=MHz|default.

ECC mode has no key: the driver keeps it across reboots by itself (a change
waits for the next reboot, which brings it into effect; modes.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING, Callable

from provision.capabilities.gpu import layout, mig_boot, tuning
from provision.capabilities.gpu.tuning import Wanted
from provision.core.errors import Problem
from provision.capabilities.gpu.model import GpuFacts
from provision.capabilities.gpu.settings import GpuSettings
from provision.core.plan import FileWrite, Plan
from provision.capabilities.system.files import plan_file
from provision.capabilities.gpu.tasks import GPUS, GpuTask, cannot_use_gpus, resolve_gpus

if TYPE_CHECKING:  # types only
    from provision.capabilities.host import HostFacts
    from provision.inventory.model import Host

CONF = "/etc/provision/gpu-tuning.conf"
UNIT = "provision-gpu-tuning.service"  # the oneshot that applies CONF at every boot (playbooks: its service task)
LOCK_WORDS = {"sm": "locked_sm", "mem": "locked_mem", "mem_deferred": "mem_deferred"}
ANY_MODEL = "*"
HEADER = """\
# Managed by provision for {host}: do not edit here, change the inventory
# (or use `provision clocks|power|persistence`, which update this file too).
# provision-gpu-tuning.service applies these at every boot, one line per GPU,
# and to a GPU it does not list, the line of its model (else model=*).
"""


# What another part of the gpu capability adds to the line of a GPU present, from the host's facts and that GPU's
# resolved settings, after the words of its settings: MIG's layout (`mig=9:0,9:4`, which the boot script's
# mig_layout makes after the GPU's other settings). A function here returns [] for a GPU it has nothing for.
LineWords = Callable[[GpuFacts, "HostFacts", GpuSettings], list[str]]
LINE_WORDS: tuple[LineWords, ...] = (mig_boot.boot_words,)


def gpu_line(gpu: GpuFacts, want: Wanted) -> str:
    """The line for one GPU from its resolved settings. A value the GPU refuses is left out: the tasks
    report it as an input error, and the run stops before this file is written."""
    return " ".join([f"gpu={gpu.uuid}", f"index={gpu.index}", *settings_words(gpu, want, _power)])


Resolver = Callable[[GpuFacts, object], list[str]]
ClockWords = Callable[[str, GpuFacts, object], list[str]]  # (setting, gpu, wanted): in place of tuning's checks


def settings_words(gpu: GpuFacts, want: GpuSettings, power: Resolver, clocks: ClockWords | None = None) -> list[str]:
    """The words of one line: each setting want sets, resolved against gpu (a value it refuses left out)."""
    resolvers: dict[str, Resolver] = {"power_limit": power, "clocks": _clocks, "locked_clocks": _locks}
    if clocks is not None:
        resolvers.update({key: partial(clocks, key) for key in ("clocks", "locked_clocks")})
    words = []
    if want.persistence is not None:
        words.append(f"persistence={'on' if want.persistence else 'off'}")
    if want.compute_mode is not None:  # after persistence: without it the driver unloads and forgets it
        try:
            words.append(f"compute_mode={tuning.compute_mode_target(gpu, want.compute_mode)}")
        except tuning.Refused:
            pass
    for key, resolve in resolvers.items():
        value = getattr(want, key)
        if value is not None:
            try:
                words += resolve(gpu, value)
            except tuning.Refused:
                pass
    return words


def _power(gpu: GpuFacts, want: Wanted) -> list[str]:
    return [f"power_limit={tuning.power_target(gpu, want):g}"]


def _clamped_power(gpu: GpuFacts, want: Wanted) -> list[str]:
    """A missing card's limit: the inventory's, into the range recorded for it (see the module's docstring);
    unchecked where no range is known, so that it is still tried at boot."""
    watts = clamped_watts(gpu, want)
    return [] if watts is None else [f"power_limit={watts:g}"]


def clamped_watts(gpu: GpuFacts, want: Wanted) -> float | None:
    """What a card not here is capped at for want (watts or "default"); None: nothing to set (its default
    unknown)."""
    if want == tuning.DEFAULT:
        return gpu.power_default
    watts = float(want)
    if gpu.power_min is not None and gpu.power_max is not None:
        watts = min(max(watts, gpu.power_min), gpu.power_max)
    return watts


def _clocks(gpu: GpuFacts, want: Wanted) -> list[str]:
    pair, _ = tuning.app_clocks_target(gpu, want)
    if pair is None:
        return []  # nothing to reset on a GPU without application clocks
    return [f"clocks={tuning.DEFAULT if want == tuning.DEFAULT else pair}"]


def _locks(gpu: GpuFacts, want: Wanted) -> list[str]:
    return [f"{LOCK_WORDS[lock.key]}={lock.value}" for lock in tuning.locked_targets(gpu, want)]


# --- what the file remembers of a card, behind the "#" ----------------------------------------------------

KEPT = "not seen at the last run"  # a missing GPU's comment begins so, then its last index as was_index
MODEL = re.compile(r'\bmodel="([^"]*)"')
POWER = re.compile(r"\bpower=(\d+(?:\.\d+)?)\.\.(\d+(?:\.\d+)?)")
DEFAULT_POWER = re.compile(r"\bdefault=(\d+(?:\.\d+)?)")


def about(gpu: GpuFacts) -> str:
    """What resolves this card again when it is missing: its model, its power range and default."""
    words = [f'model="{gpu.name.replace(chr(34), "")}"']
    if gpu.power_min is not None and gpu.power_max is not None:
        words.append(f"power={gpu.power_min:g}..{gpu.power_max:g}")
    if gpu.power_default is not None:
        words.append(f"default={gpu.power_default:g}")
    return " ".join(words)


def parse(text: str) -> dict[str, dict[str, str]]:
    """uuid -> {key: value} (gpu and index included), from the file's text: the words before a "#", as the
    boot script reads them, and from the comment a kept line's was_index and what the file recorded of the
    card (model, power_range MIN..MAX, power_default), where it says them."""
    lines = {}
    for line in text.splitlines():
        settings, _, comment = line.partition("#")
        words = dict(w.split("=", 1) for w in settings.split() if "=" in w)
        was = [w.split("=", 1)[1] for w in comment.split() if w.startswith("was_index=")]
        if was and "index" not in words:
            words["was_index"] = was[0]
        for key, pattern in (("model", MODEL), ("power_range", POWER), ("power_default", DEFAULT_POWER)):
            found = pattern.search(comment)
            if found:
                words[key] = "..".join(found.groups())
        if words.get("gpu", "").startswith("GPU-"):
            lines[words["gpu"]] = words
    return lines


def parse_models(text: str) -> dict[str, dict[str, str]]:
    """model name (as nvidia-smi names it; ANY_MODEL for the line for any model) -> {key: value}, from the
    file's lines for a card it does not list."""
    lines = {}
    for line in text.splitlines():
        words = dict(w.split("=", 1) for w in line.partition("#")[0].split() if "=" in w)
        if "model" in words and "gpu" not in words:
            key = words.pop("model")
            lines[key if key == ANY_MODEL else key.replace("_", " ")] = words
    return lines


def model_key(name: str) -> str:
    """A model name as the file and the boot script write it: one word."""
    return name.replace(" ", "_") or "unknown"


# --- the cards not here -----------------------------------------------------------------------------------

@dataclass
class Missing:
    """A card the file or the last good run's record knows that nvidia-smi does not show now."""

    gpu: GpuFacts  # what is known of it: a card of its model present (with its UUID), else what was recorded
    last_index: int | None  # the index the inventory's `index:` overrides knew it by
    old: dict[str, str]  # its line in the old file ({} where it had none)
    checked: bool  # gpu is a present card of its model: its clocks can be resolved


def missing_cards(host: Host, facts: HostFacts, old: dict[str, dict[str, str]]) -> list[Missing]:
    """The cards of the old file, then those of the record, that nvidia-smi does not show now. Each is known by
    the index resolve_gpus gives it while the layout differs from the record: the record's; none for a card the
    record lacks, or once the change is accepted (the layout recorded then lacks it: back, it is a new card);
    the file's where the host has no record yet."""
    seen = {g.uuid.lower() for g in facts.nvidia.gpus}
    recorded = {r.uuid.lower(): r for r in facts.gpu_layout or []}
    uuids = [*old, *(r.uuid for r in facts.gpu_layout or [] if r.uuid not in old)]
    cards = []
    for uuid in uuids:
        if uuid.lower() in seen:
            continue
        words, record = old.get(uuid, {}), recorded.get(uuid.lower())
        index = None if layout.ACCEPT_GPU_CHANGES.set_for(host) else record.index if record else \
            _int(words.get("index") or words.get("was_index")) if facts.gpu_layout is None else None
        name = words.get("model") or (record.name if record else "")
        cards.append(_stand_in(uuid, index, name, words, facts.nvidia.gpus))
    return cards


def _stand_in(uuid: str, index: int | None, name: str, words: dict[str, str], present: list[GpuFacts]) -> Missing:
    sibling = next((g for g in present if name and g.name == name), None)
    if sibling is not None:
        return Missing(replace(sibling, uuid=uuid, index=-1 if index is None else index), index, words, True)
    low, _, high = words.get("power_range", "").partition("..")
    gpu = GpuFacts(index=-1 if index is None else index, uuid=uuid, name=name, bus_id="",
                   power_min=_float(low), power_max=_float(high), power_default=_float(words.get("power_default")))
    return Missing(gpu, index, words, False)


def _int(text: str | None) -> int | None:
    return int(text) if text and text.isdigit() else None


def _float(text: str | None) -> float | None:
    try:
        return float(text) if text else None
    except ValueError:
        return None


def kept_line(card: Missing, gpu_settings: GpuSettings) -> str:
    """A missing card's line: what the inventory gives that card now, by UUID only."""
    want = gpu_settings.for_gpu(card.last_index, card.gpu.uuid, card.gpu.name)
    clocks = None if card.checked else _old_clocks(card.old)
    words = [f"gpu={card.gpu.uuid}", *settings_words(card.gpu, want, _clamped_power, clocks)]
    known = [] if card.last_index is None else [f"was_index={card.last_index}"]
    known += [about(card.gpu)] if card.gpu.name else []
    return " ".join(words) + f"  # {KEPT}" + (f": {' '.join(known)}" if known else "")


def _old_clocks(old: dict[str, str]) -> ClockWords:
    """A card with no card of its model present: its clock words as last checked against it; "default"
    where the inventory now says so and it had them."""
    def resolve(setting: str, gpu: GpuFacts, want: Wanted) -> list[str]:
        keys = [k for k in (("clocks",) if setting == "clocks" else LOCK_WORDS.values()) if k in old]
        return [f"{k}={tuning.DEFAULT if want == tuning.DEFAULT else old[k]}" for k in keys]
    return resolve


# --- the cards the file does not list --------------------------------------------------------------------

def model_lines(gpu_settings: GpuSettings, present: list[GpuFacts], missing: list[Missing]) -> list[str]:
    """One line per model this host has shown, for a card of it the file does not list, and the line for any
    other model."""
    models: dict[str, tuple[GpuFacts, bool]] = {}
    for gpu in present:
        models.setdefault(gpu.name, (gpu, True))
    for card in missing:
        if card.gpu.name:
            models.setdefault(card.gpu.name, (card.gpu, card.checked))
    unseen = _unseen_uuids(gpu_settings, present, missing)
    lines = []
    for name, (gpu, checked) in sorted(models.items()):
        want = gpu_settings.for_gpu(None, "", name)
        asked = [want.power_limit, *(gpu_settings.for_gpu(None, uuid, name).power_limit for uuid in unseen)]
        caps = [clamped_watts(gpu, watts) for watts in asked if watts is not None]
        want = want.model_copy(update={"power_limit": min((c for c in caps if c is not None), default=None)})
        words = settings_words(gpu, want, _clamped_power, None if checked else _no_clocks)
        lines.append(" ".join([f"model={model_key(name)}", *words]))
    return [*lines, any_model_line(gpu_settings)]


def _unseen_uuids(gpu_settings: GpuSettings, present: list[GpuFacts], missing: list[Missing]) -> list[str]:
    """The UUIDs the inventory's overrides name that this host has never shown: such a card may come at boot,
    and its model's line must cap it too."""
    known = {g.uuid.lower() for g in present} | {c.gpu.uuid.lower() for c in missing}
    return [o.uuid for o in gpu_settings.overrides if o.uuid is not None and o.uuid.lower() not in known]


def _no_clocks(setting: str, gpu: GpuFacts, want: Wanted) -> list[str]:
    return []


def any_model_line(gpu_settings: GpuSettings) -> str:
    """For a card of a model this host never showed: nothing can be checked against it, so the lowest power
    limit the inventory gives any card here (the most conservative cap), and the block's persistence and compute
    mode (how jobs may share a card is no property of its model)."""
    asked: list[object] = [gpu_settings.power_limit, *(o.power_limit for o in gpu_settings.overrides)]
    watts = [float(w) for w in asked if isinstance(w, (int, float))]
    want = GpuSettings.model_construct(persistence=gpu_settings.persistence, power_limit=min(watts, default=None),
                                       clocks=None, locked_clocks=None, compute_mode=gpu_settings.compute_mode)
    return " ".join([f"model={ANY_MODEL}", *settings_words(GpuFacts(-1, "", "", ""), want, _clamped_power,
                                                           _no_clocks)])


def render(host: Host, facts: HostFacts, old_text: str = "") -> str:
    """The whole file: one line per GPU nvidia-smi shows, from its settings as resolve_gpus binds them (all
    the inventory intends for that card), in index order; then a line for each card the old file or the
    record knows that nvidia-smi does not show now (gone, fallen off the bus, being reseated), resolved again
    from the inventory for that card, by UUID only: its index moves behind the "#" as was_index (the boot
    script stops there, and indexes change at the next boot), so no two lines ever hold one index; then the
    lines for cards the file does not list. Rendering again from this text gives this text."""
    present = sorted(resolve_gpus(host, facts).per_gpu, key=lambda pair: pair[0].index)
    lines = [" ".join([gpu_line(gpu, settings), *(w for words in LINE_WORDS for w in words(gpu, facts, settings))])
             + f"  # {about(gpu)}" for gpu, settings in present]
    missing = missing_cards(host, facts, parse(old_text))
    gpu_settings = host.settings.gpu or GpuSettings()  # no block: nothing for any card
    lines += [kept_line(card, gpu_settings) for card in missing]
    lines += model_lines(gpu_settings, facts.nvidia.gpus, missing)
    return HEADER.format(host=host.name) + "".join(f"{line}\n" for line in lines)


class BootConf(GpuTask):
    """Writes CONF from the inventory's gpu settings, resolved per GPU (playbook: `task: gpu-boot-conf`)."""

    name = "gpu-boot-conf"
    tags = frozenset({"gpu", "boot"})
    plans_from = GPUS  # and its own file
    alters = frozenset()  # its file only

    @property
    def path(self) -> str:
        dest: str = self.params.get("dest", CONF)  # check_params: a string
        return dest

    def check_params(self, file: str) -> list[Problem]:
        problems = []
        dest = self.params.get("dest", CONF)
        if not isinstance(dest, str) or not dest.startswith("/"):
            problems.append(Problem(file, f"task {self.name}", "dest", f"must be an absolute path, got {dest!r}",
                                    f"default {CONF}"))
        for key in ("owner", "group"):
            if not isinstance(self.params.get(key, "root"), str):
                problems.append(Problem(file, f"task {self.name}", key, "must be a name (default root)"))
        for key in sorted(set(self.params) - {"dest", "owner", "group"}):
            problems.append(Problem(file, f"task {self.name}", key, "unknown parameter", "allowed: dest, owner, group"))
        return problems

    def file_paths(self, host: Host) -> list[str]:
        return [self.path] if host.settings.gpu is not None else []

    def plan_with(self, host: Host, facts: HostFacts, gpu_settings: GpuSettings) -> Plan:
        plan = Plan()
        if facts.nvidia.state != "ok":  # never rewrite the file from an empty GPU list
            cannot_use_gpus(plan, host, facts, f"cannot write {self.path}: ")
            return plan
        current = facts.files.get(self.path)
        old = (current.text if current else None) or ""
        want = FileWrite(self.path, render(host, facts, old),
                         owner=self.params.get("owner", "root"), group=self.params.get("group", "root"))
        change, item = plan_file(want, current)
        if change and current and current.exists and _only_missing_gpus_differ(old, want.content, facts):
            change.cause = "every_gpu_of_the_last_good_run_is_here"  # a missing card's line kept for its return
        plan.changes += [change] if change else []
        plan.unchanged += [item] if item else []
        return plan


def _only_missing_gpus_differ(old: str, new: str, facts: HostFacts) -> bool:
    """Whether the file changes only in the lines of GPUs nvidia-smi does not show now, and in the index of
    those it numbered again without them."""
    before, after = parse(old), parse(new)
    seen = {g.uuid.lower() for g in facts.nvidia.gpus}
    def others(text: str) -> list[str]:
        return [line for line in text.splitlines() if not line.startswith("gpu=")]

    def settings(words: dict[str, str] | None) -> dict[str, str]:
        return {k: v for k, v in (words or {}).items() if k != "index"}

    return others(old) == others(new) and all(
        uuid.lower() not in seen or settings(before.get(uuid)) == settings(after.get(uuid))
        for uuid in before.keys() | after.keys() if before.get(uuid) != after.get(uuid))
