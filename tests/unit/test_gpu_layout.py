"""GPU identity: the last good run's record, how the GPUs seen differ from it, and what the tasks then refuse.

The 4090 riser box: `overrides: [{index: 3, power_limit: 300}]` caps its hot card. When card 3 is gone,
nvidia-smi renumbers the rest, and index 3 is a healthy card; when it fell off the bus, nvidia-smi names it in
an error line. Either way no override may move onto another card, and the host is not "ok".
"""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

from provision.facts import layout
from provision.facts.model import GpuFacts, HostFacts, LostGpu, NvidiaFacts, SystemFacts
from provision.settings import GpuSettings, HostSettings
from provision.tasks import boot
from provision.tasks.base import FAILED, OK
from provision.tasks.gpu import PowerLimit, resolve_gpus
from provision.tasks.layout import GpuLayout

INVENTORY_4090 = {"persistence": True, "power_limit": 400, "overrides": [{"index": 3, "power_limit": 300}]}


def rtx4090(slot: int, index: int | None = None, power: float = 400.0) -> GpuFacts:
    return GpuFacts(index=slot if index is None else index, uuid=f"GPU-4090-{slot}", name="NVIDIA GeForce RTX 4090",
                    bus_id=f"00000000:{0x01 + 0x10 * slot:02X}:00.0", persistence=True, power_limit=power,
                    power_default=450.0, power_min=150.0, power_max=450.0)


def host(gpu: dict, accept: bool = False):
    return SimpleNamespace(name="rig", settings=HostSettings(gpu=GpuSettings.model_validate(gpu)),
                           accept_gpu_changes=accept)


def facts(gpus: list[GpuFacts], recorded: list[GpuFacts] | None, lost: list[LostGpu] = ()) -> HostFacts:
    record = None if recorded is None else layout.parse_record(layout.record_text(recorded))
    return HostFacts(system=SystemFacts(uid=0), nvidia=NvidiaFacts(state="ok", gpus=gpus, lost=list(lost)),
                     gpu_layout=record)


def healthy() -> list[GpuFacts]:
    return [rtx4090(slot, power=300.0 if slot == 3 else 400.0) for slot in range(7)]


def card3_gone() -> list[GpuFacts]:
    """After a boot without card 3: the cards behind it are numbered one lower."""
    return [rtx4090(slot, index=slot if slot < 3 else slot - 1, power=400.0) for slot in range(7) if slot != 3]


# --- the record -----------------------------------------------------------------------------------------

def test_the_record_reads_back_what_was_written_and_skips_what_is_not_a_gpu_line():
    text = layout.record_text(healthy())
    assert text.splitlines()[1] == "0 GPU-4090-0 00000000:01:00.0 NVIDIA GeForce RTX 4090"
    parsed = layout.parse_record(text + "\n3 GPU-x; rm -rf / 00:00.0 bad\nnonsense\n")
    assert [(g.index, g.uuid, g.bus_id) for g in parsed] == [(g.index, g.uuid, g.bus_id) for g in healthy()]


def test_a_bus_id_from_an_error_line_names_the_same_slot_as_the_querys():
    assert layout.bus_key("0000:41:00.0") == layout.bus_key("00000000:41:00.0") != layout.bus_key("0000:42:00.0")


def test_compare_names_gone_lost_new_and_renumbered_gpus():
    assert layout.compare(None, NvidiaFacts(gpus=healthy())) is None
    assert not layout.compare(layout.parse_record(layout.record_text(healthy())), NvidiaFacts(gpus=healthy()))
    change = layout.compare(facts([], healthy()).gpu_layout, NvidiaFacts(gpus=card3_gone()))
    assert [m.gpu.uuid for m in change.missing] == ["GPU-4090-3"] and change.new == []
    assert [(was.index, now.index) for was, now in change.renumbered] == [(4, 3), (5, 4), (6, 5)]
    assert str(change.missing[0]).startswith("GPU3 GPU-4090-3 at 00000000:31:00.0 (NVIDIA GeForce RTX 4090) is gone")
    lost = LostGpu(bus_id="0000:31:00.0", message="Unable to determine the device handle for GPU0000:31:00.0: "
                                                  "Unknown Error")
    others = [g for g in healthy() if g.index != 3]
    change = layout.compare(facts([], healthy()).gpu_layout, NvidiaFacts(gpus=others, lost=[lost]))
    assert change.missing[0].lost is lost and change.renumbered == [] and change.lines(lost=False) == []
    replaced = healthy()[:3] + [replace(healthy()[3], uuid="GPU-4090-new")] + healthy()[4:]
    change = layout.compare(facts([], healthy()).gpu_layout, NvidiaFacts(gpus=replaced))
    assert [g.uuid for g in change.new] == ["GPU-4090-new"] and len(change.missing) == 1


# --- index overrides stay with their GPU ----------------------------------------------------------------

def test_without_a_record_or_with_the_layout_as_recorded_index_overrides_select_by_index():
    for recorded in (None, healthy()):
        resolution = resolve_gpus(host(INVENTORY_4090), facts(healthy(), recorded))
        assert [s.power_limit for _, s in resolution.per_gpu] == [400, 400, 400, 300, 400, 400, 400]
        assert resolution.held == []


def test_a_gone_gpu_moves_no_override_onto_the_card_that_now_has_its_index():
    plan = PowerLimit().plan(host(INVENTORY_4090), facts(card3_gone(), healthy()))
    assert plan.changes == [] and plan.problems == []
    [refused] = plan.refused
    assert (refused.target, refused.status, refused.what) == ("GPU3", FAILED, "power limit")
    assert "{index: 3, power_limit: 300} meant GPU3 of the last good run, GPU-4090-3 at 00000000:31:00.0" \
           in refused.message
    assert "not moved onto GPU-4090-4 at 00000000:41:00.0, GPU3 now" in refused.message
    assert "--accept-gpu-changes" in refused.message
    # The card now numbered 3 keeps what it has: neither the override nor the block's value is applied to it.
    assert [item.target for item in plan.unchanged] == ["GPU0", "GPU1", "GPU2", "GPU4", "GPU5"]


def test_renumbered_gpus_keep_the_settings_of_the_index_they_had_in_the_record():
    inventory = {"power_limit": 400, "overrides": [{"index": 5, "power_limit": 350}]}
    resolution = resolve_gpus(host(inventory), facts(card3_gone(), healthy()))
    by_uuid = {g.uuid: s.power_limit for g, s in resolution.per_gpu}
    assert by_uuid["GPU-4090-5"] == 350  # nvidia-smi says GPU4 now; it was GPU5, the override's card
    assert by_uuid["GPU-4090-6"] == 400  # GPU5 now: not the override's card
    assert resolution.held == []


def test_a_new_card_at_an_overridden_index_gets_neither_the_override_nor_the_block_until_accepted():
    replaced = healthy()[:3] + [replace(healthy()[3], uuid="GPU-4090-new", power_limit=450.0)] + healthy()[4:]
    plan = PowerLimit().plan(host(INVENTORY_4090), facts(replaced, healthy()))
    assert plan.changes == [] and [i.target for i in plan.refused] == ["GPU3"]
    accepted = PowerLimit().plan(host(INVENTORY_4090, accept=True), facts(replaced, healthy()))
    assert [(c.target, c.after) for c in accepted.changes] == [("GPU3", "300.00 W")] and accepted.refused == []


def test_the_boot_file_never_holds_two_lines_for_one_index():
    old = boot.render(host(INVENTORY_4090), facts(healthy(), healthy()))
    text = boot.render(host(INVENTORY_4090), facts(card3_gone(), healthy()), old)
    indexes = [words["index"] for words in boot.parse(text).values() if "index" in words]
    assert sorted(indexes) == sorted(set(indexes)) == ["0", "1", "2", "3", "4", "5"]
    lines = {uuid: words for uuid, words in boot.parse(text).items()}
    assert lines["GPU-4090-3"].get("power_limit") == "300" and lines["GPU-4090-3"]["was_index"] == "3"
    assert "power_limit" not in lines["GPU-4090-4"]  # held: the boot script leaves its limit alone too
    again = boot.render(host(INVENTORY_4090), facts(card3_gone(), healthy()), text)
    assert again == text


# --- the gpu-layout task ----------------------------------------------------------------------------------

def test_the_first_run_records_the_layout_and_the_next_says_it_is_as_recorded():
    first = GpuLayout().plan(host(INVENTORY_4090), facts(healthy(), None))
    [change] = first.changes
    assert (change.target, change.before) == ("host", "none") and change.after.startswith("7 GPU(s): GPU0 ")
    argv = change.commands[0]
    assert argv[:2] == ["sh", "-c"] and argv[-1] == layout.record_text(healthy())
    again = GpuLayout().plan(host(INVENTORY_4090), facts(healthy(), healthy()))
    assert again.changes == [] and [i.status for i in again.unchanged] == [OK] and not again.failed


def test_a_gone_gpu_fails_the_host_until_it_is_back_or_accepted():
    plan = GpuLayout().plan(host(INVENTORY_4090), facts(card3_gone(), healthy()))
    assert plan.failed.startswith("4 GPU(s) differ from the last good run") and "--accept-gpu-changes" in plan.failed
    assert plan.changes == [] and all(i.status == FAILED for i in plan.refused)
    assert "GPU3 GPU-4090-3 at 00000000:31:00.0 (NVIDIA GeForce RTX 4090) is gone" in plan.refused[0].message
    accepted = GpuLayout().plan(host(INVENTORY_4090, accept=True), facts(card3_gone(), healthy()))
    assert not accepted.failed and accepted.refused == []
    [change] = accepted.changes
    assert change.before == "differs" and change.after.startswith("6 GPU(s)")
    assert all(i.message.startswith("accepted: ") for i in accepted.unchanged)


def test_a_lost_gpu_fails_the_host_even_when_accepted_and_is_not_recorded():
    lost = LostGpu(bus_id="0000:31:00.0", message="Unable to determine the device handle for GPU0000:31:00.0: "
                                                  "Unknown Error")
    others = [g for g in healthy() if g.index != 3]
    for recorded, accept in ((healthy(), False), (healthy(), True), (None, False)):
        plan = GpuLayout().plan(host(INVENTORY_4090, accept), facts(others, recorded, [lost]))
        assert plan.changes == []
        assert [(i.status, i.what) for i in plan.refused] == [(FAILED, "GPU")]
        assert "Unable to determine the device handle" in plan.refused[0].message


def test_hosts_without_a_gpu_block_are_skipped():
    plan = GpuLayout().plan(SimpleNamespace(name="x", settings=HostSettings(), accept_gpu_changes=False),
                            facts(healthy(), None))
    assert plan.skipped and plan.changes == []


def test_every_recorded_gpu_gone_is_a_failure_not_an_empty_record():
    gone = HostFacts(nvidia=NvidiaFacts(state="no-devices", message="No devices were found"),
                     gpu_layout=layout.parse_record(layout.record_text(healthy())))
    for accept in (False, True):
        plan = GpuLayout().plan(host(INVENTORY_4090, accept), gone)
        assert plan.failed and plan.changes == []


def test_a_gpu_off_the_bus_keeps_its_boot_line_as_it_was():
    lost = LostGpu(bus_id="0000:31:00.0", message="Unable to determine the device handle for GPU0000:31:00.0: "
                                                  "Unknown Error")
    old = boot.render(host(INVENTORY_4090), facts(healthy(), healthy()))
    others = [g for g in healthy() if g.index != 3]  # a GPU off the bus keeps its index until the next boot
    assert boot.render(host(INVENTORY_4090), facts(others, healthy(), [lost]), old) == old
