"""The health facts verify reads: the kernel's NVIDIA and PCIe lines of this boot, and the PCIe AER counters."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from provision.capabilities.health import thermal
from provision.core.facts import FactReader, FactSection, Section

if TYPE_CHECKING:  # types only
    from provision.capabilities.host import HostFacts


@dataclass
class KernelLogFacts:
    """The kernel's NVIDIA (NVRM, NVSwitch SXid) and PCIe AER lines of this boot, as printed (health/kernlog.py reads
    them)."""

    source: str | None = None  # "dmesg", "sudo dmesg", "journalctl -k -b"; None: not readable
    message: str = ""  # why not readable, in the reader's words
    lines: list[str] = field(default_factory=list)


@dataclass
class AerCounters:
    """One /sys/bus/pci/devices/DEVICE/aer_dev_KIND file, read for an NVIDIA GPU (the GPU or its port)."""

    gpu: str  # the GPU's PCI address as /sys names it: "0000:01:00.0"
    device: str  # the device that counted: the GPU itself or the port above it
    kind: str  # "correctable", "nonfatal" or "fatal"
    counts: dict[str, int] = field(default_factory=dict)  # "RxErr" -> 2 (names as the kernel prints them)
    total: int | None = None  # TOTAL_ERR_COR / _NONFATAL / _FATAL: may be below the sum (one message, many errors)


@dataclass
class PcieFacts:
    """Each NVIDIA GPU's place on the PCIe tree and the AER error counters /sys keeps for it and its port."""

    ports: dict[str, str] = field(default_factory=dict)  # GPU "0000:01:00.0" -> the port above it "0000:00:01.0"
    aer: list[AerCounters] = field(default_factory=list)  # none where the kernel exposes no AER counters


# Health, for verify only (apply does not need them): the kernel's NVIDIA and PCIe AER lines of this boot,
# and the AER error counters /sys keeps for each NVIDIA GPU and the port above it (the kernel counts an
# error where it was seen, often at the link partner: Documentation/ABI/testing/sysfs-bus-pci-devices-aer).
# dmesg needs root where kernel.dmesg_restrict=1 (the Debian and Ubuntu default): then sudo -n, then the
# journal of this boot (readable by the adm and systemd-journal groups). The first line says which.
KERNEL_LOG_LINES = 2000  # the newest; a storm of one error says no more in a longer tail
KERNEL_LOG_LINE_PATTERN = (r"NVRM|AER|PCIe Bus Error|error status|\[ *[0-9]+\] [A-Z]"  # with an AER report's bits
                           r"|nvidia.*probe|probe of"  # the kernel's words when the driver cannot take a GPU
                           r"|SXid")  # the NVSwitch driver's errors (no NVRM in them)
KERNEL_LOG_SNIPPET = (
    "if out=$(dmesg 2>&1); then src=dmesg; "
    "elif [ \"$(id -u)\" != 0 ] && o=$(sudo -n dmesg 2>/dev/null); then out=$o src='sudo dmesg'; "
    "elif o=$(journalctl -k -b -q --no-pager 2>/dev/null) && [ -n \"$o\" ]; then out=$o src='journalctl -k -b'; "
    "else printf '%s\\n' \"$out\"; exit 1; fi; "
    f"echo \"source: $src\"; printf '%s\\n' \"$out\" | grep -E {shlex.quote(KERNEL_LOG_LINE_PATTERN)} "
    f"| tail -n {KERNEL_LOG_LINES}; true"
)
PCIE_AER_SNIPPET = (
    "for d in /sys/bus/pci/devices/*; do "
    "[ \"$(cat \"$d/vendor\" 2>/dev/null)\" = 0x10de ] || continue; "
    "case $(cat \"$d/class\" 2>/dev/null) in 0x03*) ;; *) continue;; esac; "
    "p=$(dirname \"$(readlink -f \"$d\")\"); echo \"== ${d##*/} ${p##*/} port\"; "
    "for x in \"$d\" \"$p\"; do for f in aer_dev_correctable aer_dev_nonfatal aer_dev_fatal; do "
    "[ -r \"$x/$f\" ] && echo \"== ${d##*/} ${x##*/} $f\" && cat \"$x/$f\"; "
    "done; done; done; true"
)


def _kernel_log(section: Section) -> KernelLogFacts:
    first, _, rest = section.output.partition("\n")
    if section.rc != 0 or not first.startswith("source: "):
        return KernelLogFacts(message=section.output.strip() or f"exit {section.rc}")
    return KernelLogFacts(source=first.removeprefix("source: "), lines=rest.splitlines())


def parse_pcie_aer(text: str) -> PcieFacts:
    """PCIE_AER_SNIPPET's output: '== GPU PORT port' per GPU, then '== GPU DEVICE FILE' and the file's
    'Name count' lines for each AER file the GPU and its port have."""
    found = PcieFacts()
    current: AerCounters | None = None
    for line in text.splitlines():
        words = line.split()
        if len(words) == 4 and words[0] == "==" and words[3] == "port":
            found.ports[words[1]] = words[2]
        elif len(words) == 4 and words[0] == "==":
            current = AerCounters(gpu=words[1], device=words[2], kind=words[3].removeprefix("aer_dev_"))
            found.aer.append(current)
        elif current and len(words) >= 2 and words[-1].isdigit():
            name = " ".join(words[:-1])
            if name.startswith("TOTAL_ERR_"):
                current.total = int(words[-1])
            else:
                current.counts[name] = int(words[-1])
    return found


# Each GPU's temperature and its thresholds (the query fields have no thresholds): one nvidia-smi, where there is one.
TEMPERATURE_SNIPPET = "command -v nvidia-smi >/dev/null || exit 0; nvidia-smi -q -d TEMPERATURE"


def parse(sections: dict[str, Section], facts: HostFacts) -> None:
    if "kernel-log" in sections:
        facts.kernel_log = _kernel_log(sections["kernel-log"])
    if "pcie-aer" in sections:
        facts.pcie = parse_pcie_aer(sections["pcie-aer"].output)
    if "gpu-temperature" in sections:
        facts.thermal = thermal.parse(sections["gpu-temperature"].output)


VERIFY = frozenset({"verify"})  # apply has no use for them
READER = FactReader((FactSection("kernel-log", KERNEL_LOG_SNIPPET, read_by=VERIFY),
                     FactSection("pcie-aer", PCIE_AER_SNIPPET, read_by=VERIFY),
                     FactSection("gpu-temperature", TEMPERATURE_SNIPPET, read_by=VERIFY,
                                 refresh_on=frozenset({"thermal"}))), parse)
