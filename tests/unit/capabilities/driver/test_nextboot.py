"""The kernel that boots next and its NVIDIA module (capabilities/driver/nextboot.py): GRUB's choice, `dkms status`
in both formats, the refusal `apply --reboot` gives and verify's finding."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from builders.facts import facts
from builders.hosts import host
from paths import REPO
from provision.capabilities import registry
from provision.capabilities.driver import checks, nextboot
from provision.capabilities.driver.facts import DriverFacts
from provision.capabilities.driver.nextboot import DkmsModule, NextBoot, next_kernel, parse_dkms_line
from provision.core.checks import CheckFailed

REFERENCE = REPO.parent / "shared" / "reference" / "node-lifecycle-reference.md"
DRIVER = {"version": "580.159.04"}
NEW, OLD = "6.8.0-100-generic", "6.8.0-45-generic"


def boot(**fields) -> NextBoot:
    """Two kernels installed, GRUB configured, the module built for the running (older) one only."""
    return NextBoot(**{"kernels": [OLD, NEW], "grub": True,
                       "modules": {OLD: [f"/lib/modules/{OLD}/updates/dkms/nvidia.ko.zst"]}, **fields})


def test_dkms_status_since_2_8_6_module_slash_version():
    # dkms 3.0.10 on Ubuntu, as printed (morrownr/rtl8852bu issue #7)
    assert parse_dkms_line("nvidia/535.86.05, 6.5.0-060500rc5-generic, x86_64: installed") == \
        DkmsModule("nvidia", "535.86.05", "6.5.0-060500rc5-generic", "installed")
    assert parse_dkms_line("nvidia/580.95.05: added") == DkmsModule("nvidia", "580.95.05", None, "added")


def test_dkms_status_before_2_8_6_module_comma_version():
    if not REFERENCE.exists():
        pytest.skip(f"{REFERENCE} not available")
    verbatim = re.search(r"Before 2\.8\.6, \*verbatim\*.*?```\n\s*(.+?)\n", REFERENCE.read_text(), re.S)
    assert verbatim, "the reference's verbatim old-format line moved"
    assert parse_dkms_line(verbatim[1]) == DkmsModule("nvidia", "396.45", "4.17.11-200.fc28.x86_64", "installed")
    # with dkms's note after the state (negativo17/nvidia-driver issue #56)
    noted = parse_dkms_line("nvidia, 396.45, 4.17.14-202.fc28.x86_64, x86_64: installed (original_module exists)")
    assert noted is not None and noted.state == "installed (original_module exists)"


def test_dkms_lines_that_are_no_module_are_left_out():
    assert parse_dkms_line("Error! Could not locate dkms.conf file.") is None
    assert parse_dkms_line("") is None


def test_grub_default_zero_boots_the_newest_kernel_by_number_not_by_text():
    kernel, basis = next_kernel(boot(grub_default="0"))
    assert kernel == NEW and basis == "GRUB_DEFAULT=0: the top entry, the newest /boot/vmlinuz-*"
    assert next_kernel(boot())[0] == NEW  # no GRUB_DEFAULT line: GRUB's own default, 0


def test_the_newest_kernel_is_the_highest_debian_version():
    """As dpkg has it, a part that goes on ("+deb13") sorts after one that ends, whatever its character: Debian's
    6.12.38+deb13-amd64 after 6.12.38-amd64 (a text comparison of the runs put "-amd" after "+deb")."""
    assert nextboot.newest(["6.12.38+deb13-amd64", "6.12.38-amd64"]) == "6.12.38+deb13-amd64"
    assert nextboot.newest([OLD, NEW, "6.8.0-9-generic"]) == NEW


def test_grub_saved_entry_names_its_kernel_by_title_or_by_id():
    title = f"Advanced options for Ubuntu>Ubuntu, with Linux {OLD}"
    assert next_kernel(boot(grub_default="saved", grubenv={"saved_entry": title})) == \
        (OLD, "GRUB_DEFAULT=saved, saved_entry in /boot/grub/grubenv")
    by_id = f"gnulinux-advanced-0b3c>gnulinux-{OLD}-advanced-0b3c2f9e-11aa-4c1b-9d0e-5d2b7d1e8f00"
    assert next_kernel(boot(grub_default="saved", grubenv={"saved_entry": by_id}))[0] == OLD
    assert next_kernel(boot(grub_default="saved"))[0] == NEW  # nothing saved yet: the top entry


def test_grub_reboot_next_entry_comes_before_grub_default():
    env = {"next_entry": f"Advanced options for Debian GNU/Linux>Debian GNU/Linux, with Linux {OLD} (recovery mode)",
           "saved_entry": "0"}
    kernel, basis = next_kernel(boot(grub_default="saved", grubenv=env))
    assert kernel == OLD and "next_entry" in basis and "grub-reboot" in basis


def test_what_cannot_be_known_is_said_never_guessed():
    kernel, why = next_kernel(boot(grub_default="1>2"))
    assert kernel is None and "by its place in the menu" in why and "grub.cfg" in why
    kernel, why = next_kernel(NextBoot())
    assert kernel is None and why.startswith("no /boot/vmlinuz-* on this host")


def test_an_entry_whose_kernel_is_gone_falls_back_to_the_top_entry():
    kernel, basis = next_kernel(boot(grub_default="Advanced options for Ubuntu>Ubuntu, with Linux 6.5.0-9-generic"))
    assert kernel == NEW and "not installed: GRUB falls back to the top entry" in basis


def test_the_snippet_reads_kernels_grub_and_module_files(tmp_path: Path):
    (tmp_path / "boot/grub").mkdir(parents=True)
    for kernel in (OLD, NEW):
        (tmp_path / f"boot/vmlinuz-{kernel}").write_text("")
        (tmp_path / f"lib/modules/{kernel}/kernel").mkdir(parents=True)
    (tmp_path / f"lib/modules/{OLD}/updates/dkms").mkdir(parents=True)
    (tmp_path / f"lib/modules/{OLD}/updates/dkms/nvidia.ko.zst").write_text("")
    (tmp_path / f"lib/modules/{OLD}/updates/dkms/nvidia-peermem.ko.zst").write_text("")
    (tmp_path / f"lib/modules/{NEW}/build").mkdir()
    (tmp_path / "boot/grub/grubenv").write_text("# GRUB Environment Block\nsaved_entry=Ubuntu, with Linux "
                                                f"{OLD}\nnext_entry=\n" + "#" * 900)
    (tmp_path / "etc/default/grub.d").mkdir(parents=True)
    (tmp_path / "etc/default/grub").write_text('GRUB_DEFAULT=0\nGRUB_TIMEOUT=5\n')
    (tmp_path / "etc/default/grub.d/50-site.cfg").write_text('GRUB_DEFAULT="saved"\n')
    snippet = (nextboot.NEXTBOOT_SNIPPET.replace("/boot", f"{tmp_path}/boot")
               .replace("/lib/modules", f"{tmp_path}/lib/modules").replace("/etc/default", f"{tmp_path}/etc/default"))
    out = subprocess.run(["sh", "-c", snippet], capture_output=True, text=True, timeout=30)
    found = nextboot.parse_nextboot(out.stdout.replace(str(tmp_path), ""))
    assert sorted(found.kernels) == [NEW, OLD] and found.grub and found.grub_default == "saved"
    assert found.grubenv == {"saved_entry": f"Ubuntu, with Linux {OLD}"}  # an empty next_entry is none
    assert found.modules[OLD] == [f"/lib/modules/{OLD}/updates/dkms/nvidia-peermem.ko.zst",
                                  f"/lib/modules/{OLD}/updates/dkms/nvidia.ko.zst"]
    assert NEW not in found.modules and found.headers == [NEW]
    assert found.kernel == OLD and nextboot.has_module(found, OLD, "nvidia")
    assert nextboot.has_module(found, OLD, "nvidia-peermem") and not nextboot.has_module(found, NEW, "nvidia")


def test_a_reboot_into_a_kernel_without_the_module_is_refused_with_the_dkms_command():
    dkms = [DkmsModule("nvidia", "580.159.04", OLD, "installed")]
    node = host("gpu-1", provision_driver=DRIVER)
    reasons = registry.reboot_refusals(node, facts(driver=DriverFacts(next_boot=boot(dkms=dkms, headers=[NEW]))))
    assert reasons == [f"the next boot's kernel {NEW} (GRUB_DEFAULT=0: the top entry, the newest /boot/vmlinuz-*) has no "
                    f"nvidia module: it would come back without GPUs; fix: `dkms autoinstall -k {NEW}` (the driver "
                    "is a DKMS module)"]


def test_the_fix_names_the_headers_dkms_needs_or_ubuntus_prebuilt_package():
    without_headers = nextboot.fix_for(boot(dkms=[DkmsModule("nvidia", "580.159.04", OLD, "installed")]), NEW)
    assert without_headers.startswith(f"`apt-get install linux-headers-{NEW} && dkms autoinstall -k {NEW}`")
    prebuilt = boot(module_packages={f"linux-modules-nvidia-580-server-{OLD}": "6.8.0-45.45",
                                     "linux-modules-nvidia-580-server-generic": "6.8.0-45.45"})
    assert nextboot.fix_for(prebuilt, NEW) == \
        f"`apt-get install linux-modules-nvidia-580-server-{NEW}` (the driver's prebuilt modules for that kernel)"
    neither = nextboot.fix_for(boot(headers=[NEW]), NEW, "580", "-open")
    assert neither == (f"`dkms autoinstall -k {NEW}` where the driver is built by DKMS, or `apt-get install "
                       f"linux-modules-nvidia-580-open-{NEW}` where it comes as prebuilt modules")


def test_no_refusal_where_the_module_is_there_the_kernel_unknown_or_no_driver_at_all():
    built = boot(modules={NEW: [f"/lib/modules/{NEW}/kernel/nvidia-580srv/nvidia.ko"]})
    node = host("gpu-1", provision_driver=DRIVER)
    assert registry.reboot_refusals(node, facts(driver=DriverFacts(next_boot=built))) == []
    assert registry.reboot_refusals(node, facts(driver=DriverFacts(next_boot=NextBoot()))) == []
    assert registry.reboot_refusals(host("head"), facts(driver=DriverFacts(next_boot=boot()))) == []


class Node:
    """What the driver's check reads of verify's node."""

    def __init__(self, host_facts, settings):
        self.facts, self.name, self.inventory_path = host_facts, "gpu-1", "inventory.yaml"
        self.inventory = type("Inventory", (), {"settings": settings})()


def test_verify_says_which_kernel_would_strand_the_node_with_one_finding():
    node = Node(facts(driver=DriverFacts(next_boot=boot(grub_default="0", headers=[NEW]))),
                host("gpu-1", provision_driver=DRIVER).settings)
    with pytest.raises(CheckFailed) as failed:
        checks.check_the_next_boot_kernel_has_the_nvidia_module(node)
    [finding] = failed.value.findings
    assert finding.expected == (f"the kernel that boots next ({NEW}: GRUB_DEFAULT=0: the top entry, the newest "
                                "/boot/vmlinuz-*) has the NVIDIA module")
    assert finding.found == f"no nvidia.ko under /lib/modules/{NEW}: the node would come back without GPUs"
    assert finding.fix.startswith(f"`dkms autoinstall -k {NEW}` where the driver is built by DKMS, or "
                                  f"`apt-get install linux-modules-nvidia-580-{NEW}`")


def test_verify_skips_with_the_reason_where_the_next_kernel_is_not_known():
    node = Node(facts(driver=DriverFacts(next_boot=NextBoot())), host("gpu-1", provision_driver=DRIVER).settings)
    with pytest.raises(pytest.skip.Exception, match="which kernel boots next is not known: no /boot/vmlinuz-"):
        checks.check_the_next_boot_kernel_has_the_nvidia_module(node)


def test_facts_shows_the_next_boot_where_it_is_known():
    from provision.capabilities.driver import shown

    stranded = facts(driver=DriverFacts(loaded="580.159.04", next_boot=boot(headers=[NEW])))
    assert [line.text for line in shown.lines(None, stranded)][1] == (
        f"next boot: {NEW}, no NVIDIA module built for it: `dkms autoinstall -k {NEW}` where the driver is built by "
        "DKMS")
    built = facts(driver=DriverFacts(loaded="580.159.04", next_boot=boot(grub_default="saved",
                                                                       grubenv={"saved_entry": f"with Linux {OLD}"})))
    assert [line.text for line in shown.lines(None, built)][1:] == [f"next boot: {OLD}, NVIDIA module built for it"]
    assert len(shown.lines(None, facts(driver=DriverFacts(loaded="580.159.04", next_boot=NextBoot())))) == 1
