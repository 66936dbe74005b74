"""PCI addresses, one way. nvidia-smi prints "00000000:3B:00.0", its error lines "0000:3b:00.0", /sys and
the kernel "0000:3b:00.0", Xorg "PCI:0000:3b:00", some tools "3b:00.0": one slot, five spellings."""

from __future__ import annotations

import re

_PCI = re.compile(r"(?:PCI:)?(?:([0-9a-f]{1,8}):)?([0-9a-f]{2}):([0-9a-f]{2})(?:\.([0-7]))?", re.I)


def address(bus_id: str | None) -> str:
    """As /sys names the function: "0000:3b:00.0" (the function 0 where none is given); "" for anything that
    is not a PCI address."""
    m = _PCI.fullmatch((bus_id or "").strip())
    if not m:
        return ""
    domain, bus, device = (int(part or "0", 16) for part in m.groups()[:3])
    return f"{domain:04x}:{bus:02x}:{device:02x}.{m.group(4) or '0'}"


def slot(bus_id: str | None) -> str:
    """The device, any function: "0000:3b:00"; "" for anything that is not a PCI address."""
    return address(bus_id).rpartition(".")[0]
