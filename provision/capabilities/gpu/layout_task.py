"""The gpu-layout task: are this host's GPUs the ones of its last good run? (capabilities/gpu/layout.py)

First in the gpu playbooks. A GPU that is missing (lost: nvidia-smi names it
but cannot read it; gone: not listed at all) fails the host on every run
until it is back, or until the user accepts the new layout; so does a new or
renumbered GPU, until accepted. A host without a record, or with an accepted
change, gets the record written: the GPUs seen now, when none is lost.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import os

from provision.capabilities.driver import packages as driver
from provision.core import remote
from provision.capabilities.gpu import layout
from provision.capabilities.gpu.model import LostGpu, RecordedGpu
from provision.capabilities.gpu.settings import GpuSettings
from provision.core.plan import FAILED, Change, Item, OK, Plan
from provision.capabilities.gpu.tasks import GPUS, GpuTask, cannot_use_gpus

if TYPE_CHECKING:  # types only
    from provision.capabilities.host import HostFacts
    from provision.inventory.model import Host

# The verify checks that report these states (a refusal here follows from their finding: as_intended files it there).
LOST, CHANGED_LAYOUT = "no_gpu_is_lost", "every_gpu_of_the_last_good_run_is_here"
ACCEPT_HINT = "if the new layout is intended (a card replaced, removed or added), run apply --accept-gpu-changes"


class GpuLayout(GpuTask):
    name = "gpu-layout"
    tags = frozenset({"gpu", "layout"})
    plans_from = GPUS | {"gpu_layout"}
    alters = frozenset({"gpu_layout"})  # its record

    def plan_with(self, host: Host, facts: HostFacts, gpu_settings: GpuSettings) -> Plan:
        plan = Plan()
        if driver.what_the_gpus_wait_for(host.settings.driver, facts):  # nvidia-smi lists no GPU until then:
            cannot_use_gpus(plan, host, facts, "cannot read the GPUs: ")  # that says nothing of the cards
            return plan
        nvidia = facts.nvidia
        change = layout.compare(facts.gpu_layout, nvidia) or layout.LayoutChange()
        recorded_lost = [m.lost for m in change.missing if m.lost is not None]
        for lost in nvidia.lost:  # always a problem, accepted or not: the card is there and broken
            if not any(lost is known for known in recorded_lost):
                plan.refused.append(Item(_label(lost), FAILED, "lost", message=lost.message, cause=LOST))
        for missing in change.missing:
            if missing.lost is not None:
                plan.refused.append(Item(layout.words(missing.gpu), FAILED, "lost", message=missing.detail,
                                         cause=LOST))
        others = change.lines(lost=False)  # what accepting the new layout settles
        if others and not layout.ACCEPT_GPU_CHANGES.set_for(host):
            plan.refused += [Item("host", FAILED, "GPU layout", message=line, cause=CHANGED_LAYOUT) for line in others]
            plan.failed = (f"{len(others)} GPU(s) differ from the last good run on this host; repair and run "
                           f"again, or {ACCEPT_HINT}")
            plan.failed_check = CHANGED_LAYOUT
            return plan
        plan.unchanged += [Item("host", OK, "GPU layout", message=f"accepted: {line}") for line in others]
        if nvidia.state != "ok":
            cannot_use_gpus(plan, host, facts, "cannot read the GPUs: ")
            return plan
        if nvidia.lost:
            return plan  # not a good run: the record stays as it was
        text = layout.record_text(nvidia.gpus)
        summary = f"{len(nvidia.gpus)} GPU(s): " + ", ".join(f"GPU{g.index} {g.bus_id}" for g in nvidia.gpus)
        if facts.gpu_layout is not None and not change:
            plan.unchanged.append(Item("host", OK, "GPU layout", after=f"as recorded, {summary}"))
            return plan
        path = layout.record_path()
        plan.changes.append(Change(
            target="host", what="GPU layout record", before="none" if facts.gpu_layout is None else "differs",
            after=summary,
            commands=[remote.write_record_argv(os.path.dirname(path), os.path.basename(path), text)],
            verify=lambda f, want=layout.parse_record(text): _check_record(f, want),
        ))
        return plan


def _label(lost: LostGpu) -> str:
    return f"GPU{lost.index}" if lost.index is not None else (lost.bus_id or "GPU")


def _check_record(facts: HostFacts, want: list[RecordedGpu]) -> str | None:
    if facts.gpu_layout != want:
        return f"{layout.record_path()} does not read back as written"
    return None
