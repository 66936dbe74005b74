"""The MIG share of the facts batch, for MIG-capable GPUs only: -lgip first (one nvidia-smi call on a host whose
GPUs have no MIG: it lists no profile, and nothing more is asked); where it lists profiles, their placements and
the GPU instances; where GPU instances exist, their compute instances and the processes on the GPUs (a layout is
never destroyed under them). apply reads them only for the MIG tasks (on_request)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from provision.capabilities.gpu import mig_listings as listings
from provision.capabilities.gpu import mig_minors
from provision.capabilities.gpu.mig_model import MigFacts, MigGpu
from provision.capabilities.gpu.smi import split_csv_row
from provision.core.facts import FactSection, Section

if TYPE_CHECKING:  # types only
    from provision.capabilities.host import HostFacts

MIG = frozenset({"mig"})  # the HostFacts field these sections fill (refresh_on)
PROFILES, PLACEMENTS, INSTANCES, COMPUTE, PROCESSES, MINORS = (
    "mig-profiles", "mig-placements", "mig-instances", "mig-compute", "mig-processes", "mig-minors")
SECTION_NAMES = (PROFILES, PLACEMENTS, INSTANCES, COMPUTE, PROCESSES, MINORS)
_LISTED = 'case "$migp" in *"GPU instance profiles"*) {};; esac'  # asked only where -lgip listed profiles
_INSTANCES_EXIST = 'case "$migi" in *"GPU instances:"*) {};; esac'
PROCESSES_ARGV = "nvidia-smi --query-compute-apps=gpu_uuid,pid,process_name --format=csv,noheader"

SECTIONS = (
    FactSection(PROFILES, "command -v nvidia-smi >/dev/null || exit 0; nvidia-smi mig -lgip", refresh_on=MIG,
                keep="migp", on_request=True),
    FactSection(PLACEMENTS, _LISTED.format("nvidia-smi mig -lgipp"), refresh_on=MIG, on_request=True),
    FactSection(INSTANCES, _LISTED.format("nvidia-smi mig -lgi"), refresh_on=MIG, keep="migi", on_request=True),
    FactSection(COMPUTE, _INSTANCES_EXIST.format("nvidia-smi mig -lci"), refresh_on=MIG, on_request=True),
    FactSection(PROCESSES, _INSTANCES_EXIST.format(PROCESSES_ARGV), refresh_on=MIG, on_request=True),
    # the device files of each instance (Slurm's gres.conf names them): cat, one process, where instances exist
    FactSection(MINORS, _INSTANCES_EXIST.format(f"cat {mig_minors.MINORS_PATH}"), refresh_on=MIG, on_request=True),
)


def parse(sections: dict[str, Section], facts: HostFacts) -> None:
    """Sets facts.mig where the profiles were read; a host whose GPUs list none gets MigFacts with no GPU."""
    profiles_section = sections.get(PROFILES)
    if profiles_section is None:
        return
    mig = MigFacts()
    profiles = listings.parse_profiles(profiles_section.output)
    mig.gpus = {index: MigGpu(profiles=rows) for index, rows in profiles.rows.items()}
    _note(mig, PROFILES, profiles_section, profiles.messages)
    placements_section = sections.get(PLACEMENTS, Section(0, ""))
    placements = listings.parse_placements(placements_section.output)
    for index, rows in placements.rows.items():
        if index in mig.gpus:
            mig.gpus[index].placements = dict(rows)
    _note(mig, PLACEMENTS, placements_section, placements.messages)
    instances_section = sections.get(INSTANCES, Section(0, ""))
    instances = listings.parse_gpu_instances(instances_section.output)
    mig.instances_read = instances.answered
    for index, gi_rows in instances.rows.items():
        mig.gpus.setdefault(index, MigGpu()).gpu_instances = gi_rows
    _note(mig, INSTANCES, instances_section, instances.messages)
    compute_section = sections.get(COMPUTE, Section(0, ""))
    compute = listings.parse_compute_instances(compute_section.output)
    for index, ci_rows in compute.rows.items():
        mig.gpus.setdefault(index, MigGpu()).compute_instances = ci_rows
    _note(mig, COMPUTE, compute_section, compute.messages)
    index_of = {gpu.uuid: gpu.index for gpu in facts.nvidia.gpus}
    for line in sections.get(PROCESSES, Section(0, "")).output.splitlines():
        cells = split_csv_row(line)
        if len(cells) == 3 and index_of.get(cells[0]) in mig.gpus:
            mig.gpus[index_of[cells[0]]].processes.append(f"{cells[1]} {cells[2]}")
    mig.minors = mig_minors.parse_minors(sections.get(MINORS, Section(0, "")).output)
    facts.mig = mig


def _note(mig: MigFacts, name: str, section: Section, messages: list[str]) -> None:
    """What a listing said besides its rows. "No MIG-enabled/supported devices found.", "No GPU instances found"
    are states (the exit 6 of the first too), not worth a note."""
    said = [m for m in messages if not listings.is_state(m)]
    if said or (section.rc != 0 and len(said) == len(messages)):
        mig.notes.append(f"{name}: " + ("; ".join(said[:2]) or f"exit {section.rc}"))  # its first words say what
