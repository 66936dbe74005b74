"""A host's facts (HostFacts) as a test needs them: a plain healthy host, read as root, with the parts a test
varies given by name: `facts(gpus=gpus(4, "V100"), systemd=True, files={path: file(path, text)})`.

The NVIDIA stack reads "ok" with the GPUs given (none by default), or the `state` given; `recorded` is the last good run's record
of GPUs, written and read back as the host holds it (capabilities/gpu/layout.py), None for a host without one.
Any other HostFacts field (nvlink, thermal, interfaces, ...) goes through `more`.
"""

from __future__ import annotations

from typing import Any, Iterable

from provision.capabilities.driver.facts import DriverFacts
from provision.capabilities.gpu import layout
from provision.capabilities.gpu.model import GpuFacts, LostGpu, NvidiaFacts
from provision.capabilities.host import HostFacts
from provision.core.facts import FileFacts, SystemFacts


def facts(*, gpus: Iterable[GpuFacts] = (), lost: Iterable[LostGpu] = (), recorded: Iterable[GpuFacts] | None = None,
          state: str = "ok", message: str = "", systemd: bool = False, persistenced: str | None = None, files: dict[str, FileFacts] | None = None,
          units: dict[str, str] | None = None, packages: dict[str, str | None] | None = None,
          driver: DriverFacts | None = None, system: SystemFacts | None = None, **more: Any) -> HostFacts:
    """HostFacts of a host whose nvidia-smi reads these GPUs (and names the `lost` ones it cannot read).
    state, message: nvidia-smi's state and words when it is not "ok" (NvidiaFacts: "missing", "mismatch", ...);
    persistenced: where nvidia-persistenced is installed (None: not installed)."""
    record = None if recorded is None else layout.parse_record(layout.record_text(list(recorded)))
    return HostFacts(system=system or SystemFacts(uid=0, systemd_running=systemd),
                     nvidia=NvidiaFacts(state=state, message=message, gpus=list(gpus), lost=list(lost),
                                        persistenced_path=persistenced),
                     files=files or {}, units=units or {}, packages=packages or {}, driver=driver or DriverFacts(),
                     gpu_layout=record, **more)


def file(path: str, text: str | None, mode: str = "644") -> FileFacts:
    """A file as the host holds it, root's; text None: the file does not exist."""
    if text is None:
        return FileFacts(path)
    return FileFacts(path, exists=True, content=text.encode(), mode=mode, owner="root", group="root")
