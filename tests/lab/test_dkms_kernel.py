"""A DKMS-built driver and an unattended kernel upgrade, end to end on one V100 node (tests/lab/dkms.yaml).

The node's driver is a DKMS module (nvidia-dkms-<branch> beside the driver package; the node's dkms:
provision_lab/dkmsim.py). It moves to the other lab driver and waits for its reboot; then a newer kernel comes in
without the module (`kernel-without-module`), and its headers after it. Before any reboot verify has one finding,
whose next step is the command provision prints: first `apt-get install linux-headers-K && dkms autoinstall -k K`
(dkms alone fails there, in its own words), then, with the headers in, `dkms autoinstall -k K`. `apply --reboot`
refuses the node's reboot with that command; run as printed it builds the module for K, and the next
`apply --reboot` reboots the node, which comes back on the new driver with its GPUs."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from builders.stacklab import driver_moved, findings, on, verdicts

from provision.core.results import EXIT_REBOOT_PENDING

pytestmark = pytest.mark.lab

SPEC = Path(__file__).parent / "dkms.yaml"
NODE = "lab-dkms-1"
KERNEL = "6.1.0-40-amd64"  # provision_lab/stack_kernels.py NEXT_KERNEL
LOADED, OTHER = "580.159.04", "570.195.03"
NEXT_BOOT = "the_next_boot_kernel_has_the_nvidia_module"


@pytest.fixture(scope="module")
def dkms_lab(lab_alone):
    with lab_alone("dkms", lambda cluster: cluster.lab("up", "--like", str(SPEC))) as cluster:
        code, result = cluster.apply()
        assert code == 0, failed(result)
        yield cluster


def failed(result: dict[str, Any]) -> list[Any]:
    """What failed in an apply's JSON: (task, its message, its items' messages)."""
    return [(t["name"], t["message"], [i["message"] for i in t["items"] if i["status"] == "failed"])
            for h in result.get("hosts", []) for t in h["tasks"] if t["status"] == "failed"] or [result]


def next_step(lab, inventory: Path) -> str:
    """The next step of the node's one next-boot finding."""
    (finding,) = findings(verdicts(lab, inventory)[1][NODE], NEXT_BOOT)
    assert KERNEL in finding["expected"], finding
    return finding["next_step"]


def printed(text: str) -> str:
    """The command provision prints in backquotes (the first)."""
    found = re.search(r"`([^`]+)`", text)
    assert found, text
    return found[1]


def test_the_driver_registers_with_dkms_and_the_dkms_command_provision_prints_readies_the_next_kernel(dkms_lab, tmp_path):
    lab = dkms_lab
    assert on(lab, NODE, "dkms status") == f"nvidia/{LOADED}: added\n"  # its postinst; no kernel has headers yet
    upgrade = driver_moved(lab, OTHER, tmp_path / "inventory.yaml")
    code, result = lab.apply(inventory=upgrade)  # the packages move; the driver waits for its reboot
    assert code == EXIT_REBOOT_PENDING, failed(result)
    assert on(lab, NODE, "dkms status") == f"nvidia/{OTHER}: added\n"  # 580's prerm removed it from the tree
    lab.lab("fault", NODE, "kernel-without-module")
    try:
        without_headers = printed(next_step(lab, upgrade))
        assert without_headers == f"apt-get install linux-headers-{KERNEL} && dkms autoinstall -k {KERNEL}"
        no_headers = lab.ssh(NODE, f"dkms autoinstall -k {KERNEL}")
        assert no_headers.returncode == 11 and f"Error! Your kernel headers for kernel {KERNEL} cannot be found at " \
            f"/lib/modules/{KERNEL}/build or /lib/modules/{KERNEL}/source." in no_headers.stderr, no_headers
        on(lab, NODE, f"DEBIAN_FRONTEND=noninteractive apt-get install -y linux-headers-{KERNEL}")  # the upgrade's rest

        fix = printed(next_step(lab, upgrade))
        assert fix == f"dkms autoinstall -k {KERNEL}"
        _, result = lab.apply("--reboot", inventory=upgrade)
        (refused,) = result["reboots"]
        assert refused["status"] == "refused" and f"`{fix}`" in refused["message"], refused
        assert f"  {LOADED}  " in on(lab, NODE, "cat /proc/driver/nvidia/version")  # not rebooted

        on(lab, NODE, fix)  # as printed
        assert on(lab, NODE, "dkms status") == f"nvidia/{OTHER}, {KERNEL}, x86_64: installed\n"
        assert {"nvidia.ko", "nvidia-peermem.ko"} <= set(on(lab, NODE, f"ls /lib/modules/{KERNEL}/updates/dkms").split())
        assert findings(verdicts(lab, upgrade)[1][NODE], NEXT_BOOT) == []

        code, result = lab.apply("--reboot", inventory=upgrade)
        assert code == 0 and [r["status"] for r in result["reboots"]] == ["rebooted"], failed(result)
        assert f"  {OTHER}  " in on(lab, NODE, "cat /proc/driver/nvidia/version")
        assert len(on(lab, NODE, "nvidia-smi -L").splitlines()) == 2  # back with its GPUs
        code, judged = verdicts(lab, upgrade)
        assert code == 0 and judged[NODE]["findings"] == [], judged[NODE]["findings"]
    finally:
        lab.lab("fault", NODE, "clear")
