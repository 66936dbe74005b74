"""The boot file and its task: what every GPU of a host must be set to again after each boot.

/etc/provision/gpu-tuning.conf holds one line per GPU, addressed by UUID
(indexes may change across reboots), with values already resolved and
checked against that GPU (a nearest clock pair snapped, Hopper's deferred
memory lock chosen):

  gpu=GPU-1c2f... index=0 persistence=on power_limit=200 clocks=877,1005

Each GPU present has its whole line: every setting the inventory intends for
it, whatever happened to the other GPUs. A GPU missing now keeps its last
line, by UUID only, its index after the "#":

  gpu=GPU-9a0b... persistence=on power_limit=300  # not seen at the last run: was_index=3

The boot script (templates/provision-gpu-tuning.sh, run by the
provision-gpu-tuning.service oneshot) applies each key with nvidia-smi; it
addresses GPUs by UUID (index= is for people) and stops reading a line at "#".
Keys: persistence=on|off, power_limit=W, clocks=MEM,SM|default,
locked_sm=MIN,MAX|default, locked_mem=MIN,MAX|default, mem_deferred=MHz|default.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from provision.capabilities.gpu import tuning
from provision.core.errors import Problem
from provision.capabilities.gpu.model import GpuFacts
from provision.core.plan import FileWrite, Plan, Task
from provision.capabilities.system.files import plan_file
from provision.capabilities.gpu.tasks import GPUS, cannot_use_gpus, resolve_gpus

if TYPE_CHECKING:  # types only
    from provision.capabilities.host import HostFacts

CONF = "/etc/provision/gpu-tuning.conf"
LOCK_WORDS = {"sm": "locked_sm", "mem": "locked_mem", "mem_deferred": "mem_deferred"}
HEADER = """\
# Managed by provision for {host}: do not edit here, change the inventory
# (or use `provision clocks|power|persistence`, which update this file too).
# provision-gpu-tuning.service applies these at every boot, one line per GPU.
"""


def gpu_line(gpu: GpuFacts, want) -> str:
    """The line for one GPU from its resolved settings. A value the GPU refuses is left out: the tasks
    report it as an input error, and the run stops before this file is written."""
    words = [f"gpu={gpu.uuid}", f"index={gpu.index}"]
    if want.persistence is not None:
        words.append(f"persistence={'on' if want.persistence else 'off'}")
    for key, resolve in (("power_limit", _power), ("clocks", _clocks), ("locked_clocks", _locks)):
        value = getattr(want, key)
        if value is not None:
            try:
                words += resolve(gpu, value)
            except tuning.Refused:
                pass
    return " ".join(words)


def _power(gpu: GpuFacts, want) -> list[str]:
    return [f"power_limit={tuning.power_target(gpu, want):g}"]


def _clocks(gpu: GpuFacts, want) -> list[str]:
    pair, _ = tuning.app_clocks_target(gpu, want)
    if pair is None:
        return []  # nothing to reset on a GPU without application clocks
    return [f"clocks={tuning.DEFAULT if want == tuning.DEFAULT else pair}"]


def _locks(gpu: GpuFacts, want) -> list[str]:
    return [f"{LOCK_WORDS[lock.key]}={lock.value}" for lock in tuning.locked_targets(gpu, want)]


KEPT = "  # not seen at the last run: was_index={index}"  # after a missing GPU's line


def parse(text: str) -> dict[str, dict[str, str]]:
    """uuid -> {key: value} (gpu and index included), from the file's text: the words before a "#", as the
    boot script reads them, and a kept line's was_index from its comment."""
    lines = {}
    for line in text.splitlines():
        settings, _, comment = line.partition("#")
        words = dict(w.split("=", 1) for w in settings.split() if "=" in w)
        was = [w.split("=", 1)[1] for w in comment.split() if w.startswith("was_index=")]
        if was and "index" not in words:
            words["was_index"] = was[0]
        if words.get("gpu", "").startswith("GPU-"):
            lines[words["gpu"]] = words
    return lines


def render(host, facts: HostFacts, old_text: str = "") -> str:
    """The whole file: one line per GPU nvidia-smi shows, from its settings as resolve_gpus binds them (all
    the inventory intends for that card), in index order. A GPU the old file lists but nvidia-smi does not
    show now (gone, fallen off the bus, being reseated) keeps its old line after those, by UUID only: its
    index moves behind the "#" as was_index (the boot script stops there, and indexes change at the next
    boot), so no two lines ever hold one index. After the repair and a reboot it is tuned again.
    Rendering again from this text gives this text."""
    seen = {g.uuid.lower() for g in facts.nvidia.gpus}
    present = sorted(resolve_gpus(host, facts).per_gpu, key=lambda pair: pair[0].index)
    lines = [gpu_line(gpu, settings) for gpu, settings in present]
    for uuid, words in parse(old_text).items():
        if uuid.lower() not in seen:
            index = words.pop("index", None) or words.pop("was_index", None)
            kept = " ".join(f"{k}={v}" for k, v in words.items())
            lines.append(kept + (KEPT.format(index=index) if index else ""))
    return HEADER.format(host=host.name) + "".join(f"{line}\n" for line in lines)


class BootConf(Task):
    """Writes CONF from the inventory's gpu settings, resolved per GPU (playbook: `task: gpu-boot-conf`)."""

    name = "gpu-boot-conf"
    tags = frozenset({"gpu", "boot"})
    settings_blocks = frozenset({"gpu"})
    plans_from = GPUS  # and its own file
    alters = frozenset()  # its file only

    @property
    def path(self) -> str:
        return self.params.get("dest", CONF)

    def check_params(self, file):
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

    def file_paths(self, host):
        return [self.path] if host.settings.gpu is not None else []

    def plan(self, host, facts):
        plan = Plan()
        if host.settings.gpu is None:
            plan.skipped = "gpu not set"
            return plan
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
    others = lambda text: [line for line in text.splitlines() if not line.startswith("gpu=")]  # noqa: E731
    settings = lambda words: {k: v for k, v in (words or {}).items() if k != "index"}  # noqa: E731
    return others(old) == others(new) and all(
        uuid.lower() not in seen or settings(before.get(uuid)) == settings(after.get(uuid))
        for uuid in before.keys() | after.keys() if before.get(uuid) != after.get(uuid))
