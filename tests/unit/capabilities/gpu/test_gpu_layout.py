"""GPU identity: the last good run's record, how the GPUs seen differ from it, and what the tasks then refuse.

The 4090 riser box: `overrides: [{index: 3, power_limit: 300}]` caps its hot card. When card 3 is gone,
nvidia-smi renumbers the rest, and index 3 is a healthy card; when it fell off the bus, nvidia-smi names it in
an error line. Either way no override may move onto another card, and the host is not "ok"; every card present
still gets all the inventory intends for it (its group's 400 W), and the boot file keeps the missing card's line
by UUID only.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import replace

from builders.facts import facts
from builders.gpus import gpu
from builders.hosts import host
from provision.capabilities.gpu import layout
from provision.core import pci
from provision.capabilities.gpu.model import GpuFacts, LostGpu, NvidiaFacts
from provision.capabilities.host import HostFacts
from provision.inventory.model import Host
from provision.capabilities.gpu import boot
from provision.core.plan import FAILED, OK
from provision.capabilities.gpu.tasks import PowerLimit, resolve_gpus
from provision.capabilities.gpu.layout_task import GpuLayout
from paths import TEMPLATES

BOOT_SCRIPT = TEMPLATES / "provision-gpu-tuning.sh"
INVENTORY_4090 = {"persistence": True, "power_limit": 400, "overrides": [{"index": 3, "power_limit": 300}]}


def rtx4090(slot: int, index: int | None = None, power: float = 400.0) -> GpuFacts:
    """The card in riser slot `slot`: named by its slot (UUID, bus), numbered by nvidia-smi (`index`)."""
    return gpu(slot if index is None else index, "RTX 4090", uuid=f"GPU-4090-{slot}",
               bus_id=f"00000000:{0x01 + 0x10 * slot:02X}:00.0", power_limit=power)


def rig(block: dict, accept: bool = False) -> Host:
    """The riser box with this provision_gpu block; accept: the run's --accept-gpu-changes."""
    return host("rig", provision_gpu=block, flags={"accept_gpu_changes"} if accept else ())


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
    assert pci.address("0000:41:00.0") == pci.address("00000000:41:00.0") != pci.address("0000:42:00.0")


def test_compare_names_gone_lost_new_and_renumbered_gpus():
    assert layout.compare(None, NvidiaFacts(gpus=healthy())) is None
    assert not layout.compare(layout.parse_record(layout.record_text(healthy())), NvidiaFacts(gpus=healthy()))
    change = layout.compare(facts(gpus=[], recorded=healthy()).gpu_layout, NvidiaFacts(gpus=card3_gone()))
    assert [m.gpu.uuid for m in change.missing] == ["GPU-4090-3"] and change.new == []
    assert [(was.index, now.index) for was, now in change.renumbered] == [(4, 3), (5, 4), (6, 5)]
    assert str(change.missing[0]).startswith("GPU3 GPU-4090-3 at 00000000:31:00.0 (NVIDIA GeForce RTX 4090) is gone")
    lost = LostGpu(bus_id="0000:31:00.0", message="Unable to determine the device handle for GPU0000:31:00.0: "
                                                  "Unknown Error")
    others = [g for g in healthy() if g.index != 3]
    change = layout.compare(facts(gpus=[], recorded=healthy()).gpu_layout, NvidiaFacts(gpus=others, lost=[lost]))
    assert change.missing[0].lost is lost and change.renumbered == [] and change.lines(lost=False) == []
    replaced = healthy()[:3] + [replace(healthy()[3], uuid="GPU-4090-new")] + healthy()[4:]
    change = layout.compare(facts(gpus=[], recorded=healthy()).gpu_layout, NvidiaFacts(gpus=replaced))
    assert [g.uuid for g in change.new] == ["GPU-4090-new"] and len(change.missing) == 1


# --- index overrides stay with their GPU; every present GPU keeps what the inventory intends for it -------

def test_without_a_record_or_with_the_layout_as_recorded_index_overrides_select_by_index():
    for recorded in (None, healthy()):
        resolution = resolve_gpus(rig(INVENTORY_4090), facts(gpus=healthy(), recorded=recorded))
        assert [s.power_limit for _, s in resolution.per_gpu] == [400, 400, 400, 300, 400, 400, 400]
        assert resolution.held == []


def test_a_gone_gpu_moves_no_override_onto_the_card_that_now_has_its_index():
    plan = PowerLimit().plan(rig(INVENTORY_4090), facts(gpus=card3_gone(), recorded=healthy()))
    assert plan.changes == [] and plan.problems == []
    [refused] = plan.refused
    assert (refused.target, refused.status, refused.what) == ("GPU3", FAILED, "power limit")
    assert "{index: 3, power_limit: 300} meant GPU3 of the last good run, GPU-4090-3 at 00000000:31:00.0" \
           in refused.message
    assert "not moved onto GPU-4090-4 at 00000000:41:00.0, GPU3 now" in refused.message
    assert "--accept-gpu-changes" in refused.message
    # The card now numbered 3 is not the override's card: it has its group's 400 W, as intended.
    assert [(item.target, item.after) for item in plan.unchanged] == [(f"GPU{i}", "400.00 W") for i in range(6)]


def test_the_card_now_at_a_gone_cards_index_gets_its_groups_power_limit():
    """Issue 22: after a reboot without card 3, the card now GPU3 (formerly GPU4) runs at its 450 W default."""
    rebooted = [replace(g, power_limit=450.0) if g.index == 3 else g for g in card3_gone()]
    resolution = resolve_gpus(rig(INVENTORY_4090), facts(gpus=rebooted, recorded=healthy()))
    assert [(g.uuid, s.power_limit) for g, s in resolution.per_gpu] == [
        (g.uuid, 400) for g in rebooted]
    assert [(h.override.index, h.meant.uuid, h.now.uuid) for h in resolution.held] == [(3, "GPU-4090-3", "GPU-4090-4")]
    plan = PowerLimit().plan(rig(INVENTORY_4090), facts(gpus=rebooted, recorded=healthy()))
    [change] = plan.changes
    assert (change.target, change.before, change.after) == ("GPU3", "450.00 W", "400.00 W")
    assert change.commands == [["nvidia-smi", "-i", "GPU-4090-4", "-pl", "400"]]
    assert [i.target for i in plan.refused] == ["GPU3"] and "not moved onto GPU-4090-4" in plan.refused[0].message


def test_renumbered_gpus_keep_the_settings_of_the_index_they_had_in_the_record():
    inventory = {"power_limit": 400, "overrides": [{"index": 5, "power_limit": 350}]}
    resolution = resolve_gpus(rig(inventory), facts(gpus=card3_gone(), recorded=healthy()))
    by_uuid = {g.uuid: s.power_limit for g, s in resolution.per_gpu}
    assert by_uuid["GPU-4090-5"] == 350  # nvidia-smi says GPU4 now; it was GPU5, the override's card
    assert by_uuid["GPU-4090-6"] == 400  # GPU5 now: not the override's card
    assert resolution.held == []


def test_a_held_override_leaves_the_other_settings_and_overrides_of_the_card_now_at_its_index():
    inventory = {"persistence": True, "power_limit": 400,
                 "overrides": [{"index": 3, "power_limit": 300, "persistence": False},
                               {"uuid": "GPU-4090-4", "locked_clocks": {"sm": [210, 2520]}},
                               {"model": "4090", "clocks": "default"}]}
    resolution = resolve_gpus(rig(inventory), facts(gpus=card3_gone(), recorded=healthy()))
    now3 = next(s for g, s in resolution.per_gpu if g.index == 3)
    assert (now3.persistence, now3.power_limit, now3.clocks) == (True, 400, "default")
    assert now3.locked_clocks is not None and now3.locked_clocks.sm == (210, 2520)
    assert [h.override.index for h in resolution.held] == [3]


def test_a_new_card_at_an_overridden_index_gets_the_block_and_the_override_waits_until_accepted():
    replaced = healthy()[:3] + [replace(healthy()[3], uuid="GPU-4090-new", power_limit=450.0)] + healthy()[4:]
    plan = PowerLimit().plan(rig(INVENTORY_4090), facts(gpus=replaced, recorded=healthy()))
    assert [(c.target, c.after) for c in plan.changes] == [("GPU3", "400.00 W")]
    assert plan.changes[0].commands == [["nvidia-smi", "-i", "GPU-4090-new", "-pl", "400"]]
    [refused] = plan.refused
    assert refused.target == "GPU3" and "meant GPU3 of the last good run, GPU-4090-3" in refused.message
    assert "not moved onto GPU-4090-new" in refused.message
    text = boot.render(rig(INVENTORY_4090), facts(gpus=replaced, recorded=healthy()),
                       boot.render(rig(INVENTORY_4090), facts(gpus=healthy(), recorded=healthy())))
    lines = boot.parse(text)
    assert (lines["GPU-4090-new"]["index"], lines["GPU-4090-new"]["power_limit"]) == ("3", "400")
    assert "index" not in lines["GPU-4090-3"] and lines["GPU-4090-3"]["power_limit"] == "300"
    accepted = PowerLimit().plan(rig(INVENTORY_4090, accept=True), facts(gpus=replaced, recorded=healthy()))
    assert [(c.target, c.after) for c in accepted.changes] == [("GPU3", "300.00 W")] and accepted.refused == []


# --- the boot file --------------------------------------------------------------------------------------

KEPT_3 = '  # not seen at the last run: was_index=3 model="NVIDIA GeForce RTX 4090" power=150..450 default=450'
ABOUT = '  # model="NVIDIA GeForce RTX 4090" power=150..450 default=450'
MODEL_LINES = ["model=NVIDIA_GeForce_RTX_4090 persistence=on power_limit=400",  # a card the file does not list
               "model=* persistence=on power_limit=300"]  # a model never seen here: the lowest limit given


def boot_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if not line.startswith("#")]


def test_the_boot_file_holds_every_present_card_whole_and_a_gone_one_by_uuid_only():
    old = boot.render(rig(INVENTORY_4090), facts(gpus=healthy(), recorded=healthy()))
    text = boot.render(rig(INVENTORY_4090), facts(gpus=card3_gone(), recorded=healthy()), old)
    lines = boot.parse(text)
    indexes = [words["index"] for words in lines.values() if "index" in words]
    assert indexes == ["0", "1", "2", "3", "4", "5"]  # never two lines for one index
    intended = {g.uuid: 300 if g.uuid == "GPU-4090-3" else 400 for g in healthy()}  # by card, from the inventory
    for card in card3_gone():
        words = lines[card.uuid]
        assert words["index"] == str(card.index) and words["persistence"] == "on"
        assert float(words["power_limit"]) <= intended[card.uuid]  # no card leaves a reboot less capped
    assert lines["GPU-4090-4"]["power_limit"] == "400"  # GPU3 now: its group's limit, not its 450 W default
    assert boot_lines(text) == [
        *(f"gpu=GPU-4090-{slot} index={index} persistence=on power_limit=400{ABOUT}"
          for index, slot in enumerate((0, 1, 2, 4, 5, 6))),
        f"gpu=GPU-4090-3 persistence=on power_limit=300{KEPT_3}", *MODEL_LINES]
    assert (lines["GPU-4090-3"].get("index"), lines["GPU-4090-3"]["was_index"]) == (None, "3")
    assert boot.render(rig(INVENTORY_4090), facts(gpus=card3_gone(), recorded=healthy()), text) == text


def test_the_boot_script_tunes_each_card_by_uuid_and_stops_reading_at_the_comment(tmp_path):
    old = boot.render(rig(INVENTORY_4090), facts(gpus=healthy(), recorded=healthy()))
    conf = tmp_path / "gpu-tuning.conf"
    conf.write_text(boot.render(rig(INVENTORY_4090), facts(gpus=card3_gone(), recorded=healthy()), old))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text('#!/bin/sh\necho "$*" >> "$CALLS"\n')
    (bin_dir / "nvidia-smi").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "CALLS": str(tmp_path / "calls"),
           "PROVISION_CLOCK_RECORDS": str(tmp_path / "records")}
    done = subprocess.run(["sh", str(BOOT_SCRIPT), str(conf)], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    calls = (tmp_path / "calls").read_text().splitlines()
    assert [c for c in calls if "-pl" in c] == [f"-i GPU-4090-{slot} -pl {300 if slot == 3 else 400}"
                                                for slot in (0, 1, 2, 4, 5, 6, 3)]


def test_a_gpu_off_the_bus_keeps_its_boot_line_by_uuid_only():
    lost = LostGpu(bus_id="0000:31:00.0", message="Unable to determine the device handle for GPU0000:31:00.0: "
                                                  "Unknown Error")
    old = boot.render(rig(INVENTORY_4090), facts(gpus=healthy(), recorded=healthy()))
    others = [g for g in healthy() if g.index != 3]  # a GPU off the bus keeps its index until the next boot
    text = boot.render(rig(INVENTORY_4090), facts(gpus=others, recorded=healthy(), lost=[lost]), old)
    assert boot_lines(text) == [*(line for line in boot_lines(old) if "GPU-4090-3" not in line
                                  and not line.startswith("model=")),
                                f"gpu=GPU-4090-3 persistence=on power_limit=300{KEPT_3}", *MODEL_LINES]
    assert boot.render(rig(INVENTORY_4090), facts(gpus=others, recorded=healthy(), lost=[lost]), text) == text
    back = facts(gpus=healthy(), recorded=healthy())
    assert boot.render(rig(INVENTORY_4090), back, text) == old  # back: its line is whole


def test_a_kept_line_from_an_older_file_is_resolved_again_and_nothing_after_the_hash_is_a_setting():
    """A file of an older provision: no model nor range recorded. The record names card 3's model; card 9 is in
    neither, so only the block and its own overrides apply to it, unchecked."""
    old = ("gpu=GPU-4090-3 index=3 persistence=on power_limit=300\n"
           "gpu=GPU-4090-9 power_limit=250  # was power_limit=100 by hand\n")
    text = boot.render(rig(INVENTORY_4090), facts(gpus=card3_gone(), recorded=healthy()), old)
    assert boot_lines(text)[-4:] == [f"gpu=GPU-4090-3 persistence=on power_limit=300{KEPT_3}",
                                     "gpu=GPU-4090-9 persistence=on power_limit=400  # not seen at the last run",
                                     *MODEL_LINES]
    assert boot.parse(old)["GPU-4090-9"] == {"gpu": "GPU-4090-9", "power_limit": "250"}


# --- the gpu-layout task ----------------------------------------------------------------------------------

def test_the_first_run_records_the_layout_and_the_next_says_it_is_as_recorded():
    first = GpuLayout().plan(rig(INVENTORY_4090), facts(gpus=healthy(), recorded=None))
    [change] = first.changes
    assert (change.target, change.before) == ("host", "none") and change.after.startswith("7 GPU(s): GPU0 ")
    argv = change.commands[0]
    assert argv[:2] == ["sh", "-c"] and argv[-1] == layout.record_text(healthy())
    again = GpuLayout().plan(rig(INVENTORY_4090), facts(gpus=healthy(), recorded=healthy()))
    assert again.changes == [] and [i.status for i in again.unchanged] == [OK] and not again.failed


def test_a_gone_gpu_fails_the_host_until_it_is_back_or_accepted():
    plan = GpuLayout().plan(rig(INVENTORY_4090), facts(gpus=card3_gone(), recorded=healthy()))
    assert plan.failed.startswith("4 GPU(s) differ from the last good run") and "--accept-gpu-changes" in plan.failed
    assert plan.changes == [] and all(i.status == FAILED for i in plan.refused)
    assert "GPU3 GPU-4090-3 at 00000000:31:00.0 (NVIDIA GeForce RTX 4090) is gone" in plan.refused[0].message
    accepted = GpuLayout().plan(rig(INVENTORY_4090, accept=True), facts(gpus=card3_gone(), recorded=healthy()))
    assert not accepted.failed and accepted.refused == []
    [change] = accepted.changes
    assert change.before == "differs" and change.after.startswith("6 GPU(s)")
    assert all(i.message.startswith("accepted: ") for i in accepted.unchanged)


def test_a_lost_gpu_fails_the_host_even_when_accepted_and_is_not_recorded():
    lost = LostGpu(bus_id="0000:31:00.0", message="Unable to determine the device handle for GPU0000:31:00.0: "
                                                  "Unknown Error")
    others = [g for g in healthy() if g.index != 3]
    for recorded, accept in ((healthy(), False), (healthy(), True), (None, False)):
        plan = GpuLayout().plan(rig(INVENTORY_4090, accept), facts(gpus=others, recorded=recorded, lost=[lost]))
        assert plan.changes == []
        assert [(i.status, i.what, i.cause) for i in plan.refused] == [(FAILED, "lost", "no_gpu_is_lost")]
        assert "Unable to determine the device handle" in plan.refused[0].message


def test_hosts_without_a_gpu_block_are_skipped():
    plan = GpuLayout().plan(host("x"), facts(gpus=healthy(), recorded=None))
    assert plan.skipped and plan.changes == []


def test_every_recorded_gpu_gone_is_a_failure_not_an_empty_record():
    gone = HostFacts(nvidia=NvidiaFacts(state="no-devices", message="No devices were found"),
                     gpu_layout=layout.parse_record(layout.record_text(healthy())))
    for accept in (False, True):
        plan = GpuLayout().plan(rig(INVENTORY_4090, accept), gone)
        assert plan.failed and plan.changes == []
