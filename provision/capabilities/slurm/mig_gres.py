"""gres.conf for GPUs in MIG mode: one gres per MIG device (a compute instance in its GPU instance), so that
`--gres=gpu:3g.40gb:1` gets one slice. Pure: from the facts (nvidia-smi mig -lgi/-lci and the driver's
mig-minors table), no I/O.

Two ways, as Slurm's gres.conf(5) and its MIG documentation (gres.html, "MIG Support") give them:
- AutoDetect=nvml: slurmd finds the MIG devices itself through NVML, names each "<model>_<slices>g.<memory>gb"
  (src/plugins/gpu/nvml/gpu_nvml.c, _handle_mig) and grants its device files; gres.conf gives each type's count,
  the type being that "3g.40gb", which the detected name contains.
- AutoDetect=off (Slurm without NVML, as Debian's): each MIG device is a line of its own with MultipleFiles=
  /dev/nvidiaG,/dev/nvidia-caps/nvidia-capGI,/dev/nvidia-caps/nvidia-capCI, the minors read from
  /proc/driver/nvidia-caps/mig-minors (gpu/mig_minors.py), exactly the files gpu_nvml.c grants. MultipleFiles
  came with Slurm 21.08 (Debian's 22.05 has it); File= and MultipleFiles= exclude each other.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from provision.capabilities.gpu import mig_facts, mig_minors
from provision.capabilities.gpu.mig_model import default_compute_profile

if TYPE_CHECKING:  # types only
    from provision.capabilities.host import HostFacts
    from provision.capabilities.gpu.mig_model import ComputeInstance, GpuInstance, MigFacts
    from provision.inventory.model import Host

SECTIONS = list(mig_facts.SECTION_NAMES)  # a Slurm node's MIG listings, read wherever MIG may be on


def slice_type(gi: GpuInstance, ci: ComputeInstance, autodetect: bool) -> str:
    """The gres Type of one MIG device: its compute instance's profile ("3g.40gb" for a GPU instance's default
    one, "1c.3g.40gb" for a share), without the media-engine suffix a Slurm word has no room for. AutoDetect
    names every compute instance by its GPU instance's slices and memory, so there the GPU instance's name."""
    return default_compute_profile(gi.profile) if autodetect else ci.profile


def mig_slices(host: Host, gpu: dict[str, Any], mig: MigFacts | None,
               autodetect: bool) -> tuple[list[dict[str, Any]], list[str]]:
    """The gres entries of one GPU in MIG mode (conf._gpus's dict: index, type, minor, cores), one per MIG
    device, each with its Type and (without AutoDetect) its files; or why gres.conf cannot offer them."""
    label = f"{host.name}: GPU{gpu['index']} is in MIG mode"
    listed = mig.gpus.get(gpu["index"]) if mig is not None else None
    if mig is None or listed is None or not mig.instances_read:
        return [], [f"{label} and its MIG instances could not be read ({'; '.join(mig.notes) if mig else 'not read'}): "
                    "gres.conf needs them"]
    by_gi = {gi.id: gi for gi in listed.gpu_instances}
    devices = [(by_gi[ci.gpu_instance], ci) for ci in listed.compute_instances if ci.gpu_instance in by_gi]
    if not devices:
        return [], [f"{label} with no MIG device (no GPU instance with a compute instance): a job could use "
                    "nothing of it; make the layout first (provision_gpu.mig, then provision apply)"]
    entries, problems = [], []
    for gi, ci in devices:
        entry = {**gpu, "type": slice_type(gi, ci, autodetect), "files": None}
        if not autodetect:
            files = _files(gpu["minor"], gi.id, ci.id, mig.minors)
            if files is None:
                problems.append(f"{label}: its GPU instance {gi.id} / compute instance {ci.id} is not in "
                                f"{mig_minors.MINORS_PATH}: gres.conf cannot name its device files")
                continue
            entry["files"] = files
        entries.append(entry)
    return entries, problems


def _files(gpu_minor: int, gi: int, ci: int, minors: dict[str, int]) -> str | None:
    gi_minor = minors.get(mig_minors.gpu_instance_cap(gpu_minor, gi))
    ci_minor = minors.get(mig_minors.compute_instance_cap(gpu_minor, gi, ci))
    if gi_minor is None or ci_minor is None:
        return None
    return ",".join([f"/dev/nvidia{gpu_minor}", mig_minors.cap_device(gi_minor), mig_minors.cap_device(ci_minor)])


def layout_counts(facts: HostFacts, autodetect: bool) -> dict[str, int]:
    """The gres types and counts the node's MIG devices make (its GPUs in MIG mode only)."""
    in_mig = {g.index for g in facts.nvidia.gpus if g.mig_mode}
    counts: dict[str, int] = {}
    for index, listed in (facts.mig.gpus.items() if facts.mig is not None else []):
        by_gi = {gi.id: gi for gi in listed.gpu_instances}
        for ci in listed.compute_instances if index in in_mig else []:
            if ci.gpu_instance in by_gi:
                kind = slice_type(by_gi[ci.gpu_instance], ci, autodetect)
                counts[kind] = counts.get(kind, 0) + 1
    return counts


def offered_counts(gres: str) -> dict[str, int]:
    """The GPU gres of `scontrol show node`'s Gres= by type: "gpu:3g.40gb:2(S:0),gpu:v100:1" -> {"3g.40gb": 2,
    "v100": 1}; an untyped "gpu:8" under the type ""."""
    counts: dict[str, int] = {}
    for item in gres.split(","):
        words = item.split("(", 1)[0].split(":")
        if words[0] == "gpu" and len(words) in (2, 3) and words[-1].isdigit():
            kind = words[1] if len(words) == 3 else ""
            counts[kind] = counts.get(kind, 0) + int(words[-1])
    return counts
