"""`dkms status` lines in every format dkms has printed, read by the next-boot section (driver/nextboot.py).

Which dkms prints which (dkms-project/dkms, the `dkms` script's status functions at each tag):
- up to v2.8.5: "m, v: added" and "m, v, k, a: installed";
- v2.8.6 (commit f83b758, "Print 'module/version' and not 'module, version' when doing dkms status"): "m/v, k, a:
  installed", while its "added" line keeps "m, v: added";
- v2.8.7 and 3.x: "m/v: added" and "m/v, k, a: installed";
- every version: "m, v, k, a: installed-weak from KERNEL", and a note after the state: " (original_module exists)",
  " (WARNING! Diff between built and installed module!)".

The lines below are verbatim from public reports, each cited.
"""

from __future__ import annotations

import pytest

from provision.capabilities.driver.nextboot import DkmsModule, parse_dkms_line


@pytest.mark.parametrize(("line", "parsed"), [
    # dkms 2.8.4, then 3.0.3, on the same host (void-linux/void-packages#35026)
    ("v4l2loopback, 0.12.5, 5.15.16_1, x86_64: installed",
     DkmsModule("v4l2loopback", "0.12.5", "5.15.16_1", "installed")),
    ("v4l2loopback/0.12.5, 5.15.16_1, x86_64: installed",
     DkmsModule("v4l2loopback", "0.12.5", "5.15.16_1", "installed")),
    # dkms 2.8 with a module only added (dkms-project/dkms#127)
    ("acpi_call, 1.1.0: added", DkmsModule("acpi_call", "1.1.0", None, "added")),
    # the NVIDIA module only added, old form (awslabs/amazon-eks-ami#2279)
    ("nvidia, 550.163.01: added", DkmsModule("nvidia", "550.163.01", None, "added")),
    # NVIDIA's on three kernels (dkms-project/dkms#357)
    ("nvidia/525.125.06, 5.15.0-87-generic, x86_64: installed",
     DkmsModule("nvidia", "525.125.06", "5.15.0-87-generic", "installed")),
])
def test_each_format_gives_module_version_kernel_and_state(line: str, parsed: DkmsModule):
    assert parse_dkms_line(line) == parsed


def test_a_line_with_dkms_s_error_glued_to_it_still_names_its_kernel():
    """dkms-project/dkms#357: a broken module's error printed on the same line as the state before it."""
    glued = parse_dkms_line("nvidia/525.125.06, 5.15.136-custom, x86_64: installedError! Could not locate dkms.conf "
                            "file.")
    assert glued is not None and (glued.module, glued.kernel) == ("nvidia", "5.15.136-custom")
    assert parse_dkms_line("File: /var/lib/dkms/zfs/2.1.12/source/dkms.conf does not exist.") is None


def test_the_broken_state_and_its_note_line():
    """dkms 3.1's broken state (dkms-project/dkms#357): the module line, then a note that is no module's."""
    assert parse_dkms_line("zfs/2.1.13: broken") == DkmsModule("zfs", "2.1.13", None, "broken")
    assert parse_dkms_line(" - Missing module source directory, or the symbolic link pointing to it") is None
