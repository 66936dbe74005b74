"""torchrun on MIG slices: one process, one slice.

A CUDA process enumerates a single MIG device however many it is shown, and CUDA IPC and peer-to-peer do not
work between GPU instances (NVIDIA's MIG user guide, "CUDA Device Enumeration" and "Deployment
Considerations": https://docs.nvidia.com/datacenter/tesla/mig-user-guide/). So torchrun's local processes cannot
each take a slice of their own, nor can NCCL join slices the way it joins GPUs: a launcher that starts more than
one process per node on a host whose GPUs are in MIG mode is refused, with the fix. One process per node runs on
one slice, chosen by the wrapper at launch (templates/torchrun-wrapper.sh.j2): the CUDA_VISIBLE_DEVICES it is
given (Slurm's for a gres slice), else slice PROVISION_MIG_SLICE (0, 1, ... as `nvidia-smi -L` lists the MIG
devices; default 0), by its MIG UUID.

Where the inventory gives a GPU a layout, the refusal is an input error before any host is touched; where only
the facts show MIG mode on (set by hand, or pending), the wrapper is not written on that host, and verify's
check says the same (one finding)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from provision.capabilities.gpu.mig_settings import DISABLED, layout_of
from provision.capabilities.gpu.settings import GpuSettings

if TYPE_CHECKING:  # types only
    from provision.capabilities.host import HostFacts
    from provision.inventory.model import Host

CHECK = "torchrun_does_not_span_mig_slices"  # verify's check (launcher/checks.py), the plan's failed_check
FIX = ("set provision_launcher.nproc_per_node: 1 (one process on one slice: the wrapper gives it its slice's MIG "
       "UUID), or provision_gpu.mig: disabled on the GPUs that train together")


@dataclass(frozen=True)
class Slices:
    """The host's GPUs in MIG mode: as the inventory lays them out, and as the facts read them (on or pending)."""

    laid_out: tuple[str, ...]
    seen: tuple[str, ...]

    def any(self) -> bool:
        return bool(self.laid_out or self.seen)

    def words(self) -> str:
        labels = sorted(set(self.laid_out) | set(self.seen), key=lambda label: int(label.removeprefix("GPU")))
        one = len(labels) == 1
        said = (f"the inventory gives {'it' if one else 'them'} a MIG layout" if self.laid_out
                else f"{'its' if one else 'their'} MIG mode is on (nvidia-smi)")
        return f"{', '.join(labels)} {'is' if one else 'are'} in MIG mode ({said})"


def slices(host: Host, facts: HostFacts) -> Slices:
    """Which GPUs of the host are MIG slices now or after this run."""
    block = host.settings.gpu or GpuSettings()
    wanted = {gpu.label: block.for_gpu(gpu.index, gpu.uuid, gpu.name).mig for gpu in facts.nvidia.gpus}
    laid_out = tuple(label for label, mig in wanted.items() if layout_of(mig) is not None)
    # MIG on by hand (or pending on); not where the inventory turns it off (the gpu tasks do, before the launcher)
    seen = tuple(gpu.label for gpu in facts.nvidia.gpus
                 if (gpu.mig_mode or gpu.mig_pending) and wanted[gpu.label] != DISABLED)
    return Slices(laid_out, seen)


def spans_slices(nproc: str, found: Slices) -> str:
    """Why torchrun with --nproc-per-node nproc cannot run on these slices; "" where it can ("auto" is CUDA's
    device count, which is one under MIG)."""
    if not found.any() or not nproc.isdigit() or int(nproc) <= 1:
        return ""
    return (f"{found.words()}: torchrun would start {nproc} processes on this node, but a CUDA process sees one MIG "
            "slice and NCCL does not connect slices (no CUDA IPC or peer-to-peer between GPU instances)")
