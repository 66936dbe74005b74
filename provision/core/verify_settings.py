"""The verify block of the inventory: checks switched off for a group or a host (GCM's killswitch).

A check known to be wrong for some nodes (a sensor a vendor's BMC misreports, a rule a site does not follow)
is switched off where it is wrong, never silenced everywhere: `provision_verify: {skip: [fans_report_no_failure]}` in
that group's variables. verify reports it as skipped with the reason, on every host it is off for; the names
are checked against verify's checks when verify runs (verify/switch.py). Here only, so the settings stay in the
layer the inventory reads: the checks themselves are verify's.
"""

from __future__ import annotations

from provision.core.settings import Block, setting


class VerifySettings(Block):
    """Which checks verify leaves out for these hosts."""

    skip: list[str] = setting(
        [], 'a list of check names as verify reports them, e.g. ["fans_report_no_failure", "as_intended[gpu-clocks]"]',
        "each check named is reported as skipped (switched off here) instead of run; a more specific group or "
        "the host replaces the list", examples=[["fans_report_no_failure"]])

