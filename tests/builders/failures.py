"""Failures as verify files them (provision.verify Failure), for the tests of how findings are grouped and shown."""

from __future__ import annotations

from provision.core.checks import ERROR
from provision.verify import Failure

SLOT = "0000:31:00"  # the lost GPU's PCI slot


def lost_gpu_failures() -> list[Failure]:
    """What a GPU off the bus fails on a 4090 node, in the checks' order, as the checks say it."""
    return [
        Failure("nvidia_smi_reads_the_gpus", "nvidia-smi to read every GPU and exit 0", "exit 15", "see dmesg",
                because=["no_gpu_is_lost"]),
        Failure("every_gpu_of_the_last_good_run_is_here", "the 7 GPU(s) of the last good run", "GPU3 is lost",
                "reseat", because=["no_gpu_is_lost"], about=[SLOT]),
        Failure("no_gpu_is_lost", "every GPU readable", "GPU3 0000:31:00.0: Unknown Error", "reboot node1",
                about=[SLOT]),
        Failure("no_xid_errors_since_boot", "no Xid error", "GPU3 0000:31:00 Xid 79 x2", "drain",
                because=[f"no_gpu_is_lost:{SLOT}"]),
        Failure("no_xid_errors_since_boot", "no Xid error", "GPU1 0000:11:00 Xid 48", "drain",
                because=["gpu_memory_has_no_uncorrectable_errors:0000:11:00"]),
        Failure("as_intended[gpu-boot-conf]", "content as rendered", "content differs", "provision apply",
                because=["every_gpu_of_the_last_good_run_is_here"], severity=ERROR),
        Failure("as_intended[gpu-power-limit]", "GPU2 power limit 200 W", "GPU2 power limit 250 W",
                "provision apply", severity=ERROR),
    ]
