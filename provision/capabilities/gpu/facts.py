"""The GPU's share of the facts batch: nvidia-smi (one --query-gpu call, its supported clocks from a cache),
nvidia-persistenced, the locked clocks provision recorded, the GPUs of the last good run, and (verify only) the
NVLink links and their error counters."""

from __future__ import annotations

import os
import shlex
from typing import TYPE_CHECKING

from provision.capabilities.gpu import clock_cache, layout, mig_facts, nvlink
from provision.capabilities.gpu import smi as gpu_parsers
from provision.capabilities.gpu.model import NvidiaFacts
from provision.core.facts import FactReader, FactSection, Section, text_of

if TYPE_CHECKING:  # types only
    from provision.capabilities.host import HostFacts

NVML_MISMATCH = "Driver/library version mismatch"  # nvidia-smi's words (exit 18) when library and module differ
PERSISTENCED_PIDFILE = "/var/run/nvidia-persistenced/nvidia-persistenced.pid"
# NVLink, for verify only: one nvidia-smi each, nothing where nvidia-smi is not installed, and the error counters
# only where -s listed a link (its output is kept in $nvl): most hosts have no NVLink and pay for one call.
NVLINK_STATUS_SNIPPET = "command -v nvidia-smi >/dev/null || exit 0; nvidia-smi nvlink -s"
NVLINK_ERRORS_SNIPPET = 'case "$nvl" in *"Link "[0-9]*) nvidia-smi nvlink -e;; esac'


def clock_records_dir() -> str:
    """Where provision records the locked clocks it set: one file per GPU (see capabilities/gpu/clocks.py). On
    tmpfs, so a reboot clears it as it clears the locks. PROVISION_CLOCK_RECORDS moves it (tests on this machine)."""
    return os.environ.get("PROVISION_CLOCK_RECORDS", "/run/provision/gpu-clocks")


RECORD_TEXT = text_of('"$f"')  # one clock record ($f), without a process per file


def parse(sections: dict[str, Section], facts: HostFacts) -> None:
    facts.nvidia = _nvidia(sections)
    mig_facts.parse(sections, facts)  # after the GPUs: it maps their UUIDs to nvidia-smi mig's indexes
    record = sections.get("gpu-layout")
    if record is not None and record.rc == 0:
        facts.gpu_layout = layout.parse_record(record.output)
    status = sections.get("nvlink-status")
    if status is not None:
        facts.nvlink = nvlink.read(status.output, sections.get("nvlink-errors", Section(0, "")).output, status.rc)


def _nvidia(sections: dict[str, Section]) -> NvidiaFacts:
    persistenced = sections.get("persistenced", Section(1, ""))
    facts = NvidiaFacts(
        persistenced_path=persistenced.output.strip() if persistenced.rc == 0 else None,
        persistenced_running=sections.get("persistenced-running", Section(1, "")).rc == 0,
    )
    if sections.get("nvidia-smi", Section(1, "")).rc != 0:
        facts.state, facts.message = "missing", "nvidia-smi is not installed (no NVIDIA driver)"
        return facts
    query = sections.get("query-gpu", Section(1, ""))
    facts.exit_code = query.rc
    if NVML_MISMATCH in query.output:  # an upgraded driver whose old module is still loaded: a reboot is pending
        facts.state, facts.message = "mismatch", " ".join(query.output.split())
        return facts
    if "No devices were found" in query.output:
        facts.state, facts.message = "no-devices", "No devices were found"
        return facts
    try:
        read = gpu_parsers.read_query_gpu(query.output)
    except gpu_parsers.ParseError as exc:
        facts.state, facts.message = "error", f"cannot parse nvidia-smi output: {exc}"
        return facts
    facts.gpus, facts.driver_version, facts.lost, facts.notes = read.gpus, read.driver_version, read.lost, read.notes
    if not facts.gpus:  # not one GPU readable: driver not loaded, NVML mismatch, every GPU lost
        said = [str(lost) for lost in facts.lost] + facts.notes
        facts.state, facts.message = "error", "; ".join(said) or f"nvidia-smi exited {query.rc}"
        return facts
    if query.rc != 0:  # some GPUs read (15: another fell off the bus): tune those, and say so
        facts.notes.append(f"nvidia-smi --query-gpu exited {query.rc}")
    supported_section = sections.get("supported-clocks", Section(1, ""))
    supported = gpu_parsers.parse_supported_clocks_csv(supported_section.output)
    facts.supported_clocks_source = clock_cache.source_of(supported_section.output)
    records = gpu_parsers.parse_clock_records(sections.get("clock-records", Section(0, "")).output)
    for gpu in facts.gpus:
        gpu.supported_clocks = supported.get(gpu.uuid, [])
        gpu.locked = records.get(gpu.uuid, {})
    facts.state = "ok"
    return facts


NVIDIA, NVLINK = frozenset({"nvidia"}), frozenset({"nvlink"})  # the fields nvidia-smi's sections set (refresh_on)
READER = FactReader((
    FactSection("nvidia-smi", "command -v nvidia-smi", refresh_on=NVIDIA),
    FactSection("query-gpu", gpu_parsers.QUERY_GPU_SNIPPET, refresh_on=NVIDIA, keep="q"),
    FactSection("supported-clocks", clock_cache.read_snippet, refresh_on=NVIDIA),  # reads "$q", the query-gpu output
    FactSection("persistenced", "command -v nvidia-persistenced", refresh_on=NVIDIA),
    FactSection("persistenced-running", (
        f"read -r pid 2>/dev/null <{PERSISTENCED_PIDFILE} && [ -n \"$pid\" ] && [ -d \"/proc/$pid\" ]"
        " || { [ -d /run/systemd/system ] && systemctl is-active --quiet nvidia-persistenced 2>/dev/null; }"),
        refresh_on=NVIDIA),
    FactSection("clock-records", lambda: f"for f in {shlex.quote(clock_records_dir())}/GPU-*; do {RECORD_TEXT}; done; true",
                refresh_on=NVIDIA),
    FactSection("gpu-layout", lambda: text_of(shlex.quote(layout.record_path()))),  # exit non-zero: no record yet
    FactSection("nvlink-status", NVLINK_STATUS_SNIPPET, read_by=frozenset({"verify"}), refresh_on=NVLINK, keep="nvl"),
    FactSection("nvlink-errors", NVLINK_ERRORS_SNIPPET, read_by=frozenset({"verify"}), refresh_on=NVLINK),
    *mig_facts.SECTIONS,
), parse)
