"""What the driver's recovery action asks (health/recovery.py), from nvidia-smi's values and Xid 154's lines.

nvidia-smi's values are NVIDIA's documented ones (`None`, `Reset`, `Reboot`, `Drain P2P`, `Drain and Reset`,
../shared/reference/node-lifecycle-reference.md §7.2) and the real H200's `None`
(tests/fixtures/real/h200-recovery/recovery-field.txt). Xid 154 lines: the real forum captures in
tests/fixtures/kernlog, and the names a 610 driver printed for the same codes ("PF FLR", "OS Reboot", quoted in
public user logs), which is why a line is read by its code."""

from __future__ import annotations

import pytest

from paths import FIXTURES
from provision.capabilities.health import kernlog, recovery
from provision.core.checks import REBOOT, RESET, SERVICE


def test_the_real_h200_says_none_and_none_asks_nothing():
    field = (FIXTURES / "real" / "h200-recovery" / "recovery-field.txt").read_text().splitlines()
    assert field[:2] == ["gpu_recovery_action", "None"]
    assert recovery.action(field[1]) is None
    assert recovery.action(None) is None and recovery.action("[N/A]") is None


@pytest.mark.parametrize("value, remedy", [
    ("Reset", RESET), ("Drain and Reset", RESET), ("Drain P2P", RESET), ("Reboot", REBOOT), ("reset", RESET),
])
def test_each_documented_value_leads_to_its_step(value, remedy):
    asked = recovery.action(value)
    assert asked is not None and asked.remedy == remedy and asked.says and asked.fix


def test_an_action_not_known_yet_is_worth_a_reboot_and_is_named():
    asked = recovery.action("Recover IMEX Domain")
    assert asked is not None and asked.remedy == REBOOT and "'Recover IMEX Domain'" in asked.says


@pytest.mark.parametrize("detail, action", [
    ("GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)", "reset"),
    ("GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)", "reboot"),
    ("GPU recovery action changed from 0x0 (None) to 0x1 (PF FLR)", "reset"),  # 610's names
    ("GPU recovery action changed from 0x0 (None) to 0x2 (OS Reboot)", "reboot"),
    ("GPU recovery action changed from 0x0 (None) to 0x4 (Drain and Reset)", "drain and reset"),
    ("GPU recovery action changed from 0x1 (GPU Reset Required) to 0x0 (None)", "none"),
    ("GPU recovery action changed from 0x0 (None) to 0x9 (Something New)", "Something New"),
    ("a line cut short before its action", None),
])
def test_xid_154_is_read_by_its_code(detail, action):
    assert recovery.of_xid_154(detail) == action


def test_the_real_xid_154_lines_ask_for_a_reset():
    text = (FIXTURES / "kernlog" / "nvidia-forum-371272-no-timestamp-xid62-154.txt").read_text()
    [changed] = [e for e in kernlog.parse(text) if e.xid == 154]
    assert recovery.of_xid_154(changed.detail) == "reset" and kernlog.event_needs_attention(changed)


@pytest.mark.parametrize("code, remedy", [
    (48, RESET), (94, RESET), (119, RESET), (74, RESET), (79, REBOOT), (32, REBOOT), (54, SERVICE), (165, SERVICE),
    (143, RESET), (999, REBOOT),
])
def test_each_xid_that_needs_attention_has_the_smallest_step_that_clears_it(code, remedy):
    assert kernlog.remedy(kernlog.xid_info(code)) == remedy


def test_an_xid_caused_by_another_is_cleared_as_its_cause():  # NVIDIA/open-gpu-kernel-modules#1150
    [line] = kernlog.parse("NVRM: Xid (PCI:0000:dc:00): 45, pid=1818990, name=python3, Ch 00000001 caused by "
                           "previous Xid 149")
    assert kernlog.remedy(kernlog.event_info(line)) == RESET
