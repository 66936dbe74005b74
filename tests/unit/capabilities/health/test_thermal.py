"""Thermal headroom from `nvidia-smi -q -d TEMPERATURE`, in both layouts drivers print, and the check on it."""

from __future__ import annotations

import pytest

from provision.capabilities.health import checks as health
from provision.capabilities.health import thermal
from provision.core.checks import CRITICAL, REBOOT, RESET, SERVICE, WARNING

from realdata import capture

from builders.checks import checked_node, verdict
from builders.facts import facts
from builders.gpus import gpu

# The two layouts, as the real captures print them (the files are read below where they are at hand).
ABSOLUTE = """\
GPU 00000000:01:00.0
    Temperature
        GPU Current Temp            : 38 C
        GPU Shutdown Temp           : 90 C
        GPU Slowdown Temp           : 87 C
        GPU Max Operating Temp      : 83 C
        Memory Current Temp         : 34 C
        Memory Max Operating Temp   : 85 C
    Clocks
        Graphics                    : 135 MHz
"""
T_LIMIT = """\
GPU 00000000:02:00.0
    Temperature
        GPU Current Temp                               : 36 C
        GPU T.Limit Temp                               : 51 C
        GPU Shutdown T.Limit Temp                      : -8 C
        GPU Slowdown T.Limit Temp                      : -2 C
        GPU Max Operating T.Limit Temp                 : 0 C
        GPU Target Temperature                         : N/A
"""
WINDOWS = """\
GPU 00000000:03:00.0
    Temperature
        GPU Current Temp                               : 34 C
        GPU Current T.Limit Temp                       : 49 C
        GPU Shutdown T.Limit Temp Specification        : -7 C
        GPU Slowdown T.Limit Temp Specification        : -2 C
        GPU Max Operating T.Limit Temp Specification   : 0 C
"""
UNKNOWN = """\
GPU 00000000:04:00.0
    Temperature
        GPU Current Temp                               : N/A
        GPU T.Limit Temp                               : N/A
        GPU Shutdown Temp                              : N/A
"""


def test_both_layouts_give_the_headroom_in_degrees():
    read = thermal.parse(ABSOLUTE + T_LIMIT + WINDOWS + UNKNOWN)
    assert read["00000000:01:00.0"] == thermal.Thermal("00000000:01:00.0", 38, 49, 52)
    assert read["00000000:02:00.0"] == thermal.Thermal("00000000:02:00.0", 36, 53, 59)  # 51 - (-2), 51 - (-8)
    assert read["00000000:03:00.0"] == thermal.Thermal("00000000:03:00.0", 34, 51, 56)
    assert read["00000000:04:00.0"] == thermal.Thermal("00000000:04:00.0")  # N/A: unknown, never a number


def test_the_h100_capture_reads():
    assert thermal.parse(capture("smi-q.txt")[0]) == {
        "00000000:00:06.0": thermal.Thermal("00000000:00:06.0", 36, 53, 59)}


@pytest.mark.parametrize("name, bus, slowdown, shutdown", [
    ("smi-q-full/v100-sxm2-32gb-traverse-gpu0.txt", "00000004:04:00.0", 49, 52),
    ("smi-q-full/rtx4090-geforce-windows-wddm.txt", "00000000:01:00.0", 51, 56),
])
def test_real_reports_read(real_output, name, bus, slowdown, shutdown):
    read = thermal.parse(real_output(name))[bus]
    assert (read.to_slowdown, read.to_shutdown) == (slowdown, shutdown)


def hot_node(to_slowdown: float, margin: int | None = None):
    bare = checked_node(facts(gpus=[gpu(0), gpu(1)]), provision_gpu={"power_limit": 400} | (
        {"thermal_margin": margin} if margin is not None else {}))
    bare.facts.thermal = {"00000000:01:00.0": thermal.Thermal("00000000:01:00.0", 50, 40, 45),
                          "00000000:02:00.0": thermal.Thermal("00000000:02:00.0", 86, to_slowdown, to_slowdown + 5)}
    return bare


def test_a_gpu_at_its_slowdown_temperature_fails_and_one_with_room_passes():
    check = health.check_gpus_have_thermal_headroom
    failed = verdict(check, hot_node(-1))
    assert failed.found == "GPU1 00000000:02:00.0 at 86 C: 1 C past its slowdown temperature, 4 C below shutdown"
    assert failed.findings[0].about == ("0000:02:00",) and failed.findings[0].severity == CRITICAL  # 4 C to shutdown
    assert failed.findings[0].remedy == SERVICE  # fans, airflow, the room: neither a reset nor a reboot cools it
    assert verdict(check, hot_node(2)).findings[0].severity == WARNING  # 7 C from shutdown: slower, not down
    assert verdict(check, hot_node(10)) is None
    assert verdict(check, hot_node(10, margin=15)).found.startswith("GPU1 00000000:02:00.0 at 86 C: 10 C below")
    unread = hot_node(10)
    unread.facts.thermal = None
    with pytest.raises(pytest.skip.Exception, match="not read"):
        check(unread)


def test_a_thermal_slowdown_follows_from_the_missing_headroom_and_a_power_brake_does_not():
    hot = checked_node(facts(gpus=[gpu(0), gpu(1, clock_events_active=0x48)]), provision_gpu={"power_limit": 400})
    failed = verdict(health.check_clocks_are_not_held_down_by_heat_or_power, hot)
    # the headroom check first; under verify --active, the load's finding of the same GPU (it saw it under load)
    assert failed.findings[0].because == ("gpus_have_thermal_headroom:0000:02:00",
                                          "gpus_hold_up_under_load:0000:02:00")
    brake = checked_node(facts(gpus=[gpu(0, clock_events_active=0x80)]), provision_gpu={"power_limit": 400})
    assert verdict(health.check_clocks_are_not_held_down_by_heat_or_power, brake).findings[0].because == \
        ("gpus_hold_up_under_load:0000:01:00",)


@pytest.mark.parametrize("trouble, remedy", [
    ({"ecc_uncorrected": 2}, RESET), ({"remap_pending": True}, RESET), ({"retired_pages_pending": True}, REBOOT),
    ({"remap_failure": True}, SERVICE), ({"ecc_uncorrected": 2, "remap_failure": True}, SERVICE),
])
def test_memory_trouble_names_the_smallest_step_that_clears_all_of_it(trouble, remedy):
    failed = verdict(health.check_gpu_memory_has_no_uncorrectable_errors, checked_node(facts(gpus=[gpu(0, **trouble)])))
    assert failed.findings[0].remedy == remedy
