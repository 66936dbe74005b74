"""A finding's remedy: what a check says, else the default for its severity (what `provision recover` acts on)."""

from __future__ import annotations

import pytest

from provision.core.checks import (APPLY, CRITICAL, ERROR, REBOOT, REMEDIES, RESET, SERVICE, WARNING, CheckFailed,
                                   Finding, fail, fail_each, remedy_of)


def test_a_finding_without_remedy_takes_its_severitys_default() -> None:
    assert remedy_of(Finding("ECC mode Enabled", "Disabled", severity=ERROR)) == APPLY
    assert remedy_of(Finding("a GPU on the bus", "fallen off", severity=CRITICAL)) == REBOOT
    assert remedy_of(Finding("a x16 link", "x8", severity=WARNING)) == APPLY


def test_a_checks_own_remedy_wins_over_the_default() -> None:
    with pytest.raises(CheckFailed) as failed:
        fail("no reset required", "GPU Reset Required", "reset the GPU", remedy=RESET)
    assert [remedy_of(f) for f in failed.value.findings] == [RESET]


def test_each_finding_keeps_its_own_remedy() -> None:
    with pytest.raises(CheckFailed) as failed:
        fail_each([Finding("PSU ok", "Non-recoverable", severity=CRITICAL, remedy=SERVICE),
                   Finding("persistence on", "off", severity=ERROR)])
    assert [remedy_of(f) for f in failed.value.findings] == [SERVICE, APPLY]


def test_remedies_are_ordered_smallest_first() -> None:
    assert REMEDIES == (APPLY, RESET, REBOOT, SERVICE)
