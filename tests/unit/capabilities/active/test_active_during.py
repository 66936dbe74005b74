"""What the kernel logged during an active run (capabilities/active/during.py): the lines of the log read after
the load that the one before did not hold, one finding per device, filed under the passive check that judges
the same lines since boot."""

from __future__ import annotations

from provision.capabilities.active import during
from provision.capabilities.health.facts import KernelLogFacts
from provision.core.checks import CRITICAL, WARNING

BEFORE = ["[   12.100000] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  570.195.03  Wed Oct 29 23:15:11 UTC 2025"]
RISER = ["[   80.{:06d}] pcieport 0000:00:02.0: AER: Corrected error received: 0000:11:00.0",
         "[   80.{:06d}] nvidia 0000:11:00.0: AER: PCIe Bus Error: severity=Corrected, type=Physical Layer, (Receiver ID)",
         "[   80.{:06d}] nvidia 0000:11:00.0: AER:   device [10de:1db1] error status/mask=00000001/0000e000",
         "[   80.{:06d}] nvidia 0000:11:00.0: AER:    [ 0] RxErr                 "]
XID = "[   81.500000] NVRM: Xid (PCI:0000:31:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."


def log(lines: list[str]) -> KernelLogFacts:
    return KernelLogFacts(source="dmesg", lines=lines)


def test_only_the_lines_the_load_added_count_one_finding_per_device():
    riser = [line.format(n) for n in (1, 2) for line in RISER]
    new = during.new_events(log(BEFORE), log(BEFORE + riser + [XID]))
    assert {e.kind for e in new} >= {"aer-corrected", "xid"} and all(e.line not in BEFORE for e in new)
    found = during.findings(new)
    assert [(f.about, f.severity) for f in found] == [(("0000:11:00",), WARNING), (("0000:31:00",), CRITICAL)]
    assert found[0].found.startswith("0000:11:00 during the load: aer corrected") and " x2" in found[0].found
    assert found[0].because == during.LEADS
    assert during.new_events(log(BEFORE + riser), log(BEFORE + riser)) == []
    assert during.new_events(None, KernelLogFacts(source=None, message="no dmesg")) == []


def test_gpu_error_counters_that_grew_during_the_load_are_one_finding_per_gpu():

    from builders.facts import facts
    from builders.gpus import gpu
    from provision.capabilities.gpu.nvlink import NvlinkFacts, NvlinkGpu
    from provision.capabilities.host import HostFacts

    def read(ecc: int, replay: int) -> HostFacts:
        """Two NVLinked V100s: GPU0's uncorrectable ECC errors, GPU1's link replays."""
        v100s = [gpu(i, "V100", uuid=f"GPU-{i}", ecc_uncorrected=ecc if i == 0 else 0) for i in range(2)]
        links = [NvlinkGpu(i, "Tesla V100-SXM2-16GB", f"GPU-{i}",
                           errors={0: {"Replay Errors": replay if i == 1 else 0, "CRC Errors": 0, "Data Tx": 12}})
                 for i in range(2)]
        return facts(gpus=v100s, nvlink=NvlinkFacts(gpus=links))

    assert during.grown(read(1, 3), read(1, 3)) == []  # counted before the load: not the load's
    ecc, nvlink = during.grown(read(0, 3), read(2, 8))
    assert (ecc.about, ecc.found, ecc.severity) == (("0000:01:00",), "0000:01:00 during the load: uncorrectable "
                                                    "ECC errors +2", CRITICAL)
    assert (nvlink.found, nvlink.severity) == ("0000:02:00 during the load: NVLink 0 Replay Errors +5", WARNING)
    assert nvlink.because == during.COUNTER_LEADS
