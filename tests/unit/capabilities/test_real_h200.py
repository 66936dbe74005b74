"""provision's parsers against the verbatim captures of a real NVIDIA H200 (tests/fixtures/real/h200; its
README section says what each file is): driver 580.159.04 with the open kernel module, one GPU in a
Firecracker VM. Every value asserted is the one the capture shows.
"""

from __future__ import annotations

import re

from realdata import REAL_H200, REAL_H200_MODES, capture, recovery_column

from provision.capabilities.active import sampler
from provision.capabilities.driver.facts import parse_driver
from provision.capabilities.gpu import clock_events
from provision.capabilities.gpu import smi as parsers
from provision.capabilities.gpu.model import ClockPair, GpuFacts
from provision.capabilities.gpu.nvlink import read as read_nvlink
from provision.capabilities.health import kernlog, thermal
from provision.capabilities.registry import FACTS
from provision.capabilities.slurm import conf as slurm
from provision.capabilities.topology.topo import Topology, cross_socket_warnings, parse_topo
from provision.core import facts as gather

UUID = "GPU-f6279c9f-c73c-8063-c8fa-426e0a9cb4c7"
BUS = "00000000:00:06.0"
DRIVER = "580.159.04"
GRAPHICS = list(range(1980, 344, -15))  # 1980, 1965, ..., 360, 345: every supported graphics clock, per memory clock
THE_H200 = GpuFacts(
    index=0, uuid=UUID, name="NVIDIA H200", bus_id=BUS, compute_cap="9.0", persistence=True,
    power_limit=700.0, power_default=700.0, power_min=200.0, power_max=700.0, power_enforced=700.0,
    app_clock_sm=1980, app_clock_mem=3201, default_app_clock_sm=1980, default_app_clock_mem=3201,
    clock_sm=345, clock_mem=3201, max_clock_sm=1980, max_clock_mem=3201,
    pcie_gen_current=5, pcie_gen_max=5, pcie_width_current=16, pcie_width_max=16,
    clock_events_active=0x1, ecc_enabled=True, ecc_uncorrected=0,
    retired_pages_pending=None, remap_pending=False, remap_failure=False, fabric_state=None, fabric_status=None,
    ecc_pending=True, compute_mode="default", mig_mode=False, mig_pending=False, recovery_action="none",
)


def h200(name: str) -> tuple[str, int]:
    return capture(name, REAL_H200)


def h200_query() -> tuple[str, int]:
    """qgpu.txt with the columns of the same GPU's modes (h200-modes/q-modes.txt) and recovery action
    (h200-recovery/recovery-field.txt), captured apart, as the query that asks for all of them prints them."""
    (query, rc), (modes, _) = h200("qgpu.txt"), capture("q-modes.txt", REAL_H200_MODES)
    lines = [line for line in query.splitlines() if line]
    extra = [line.split(", ", 1)[1] for line in modes.splitlines() if line]  # without their index column
    assert len(lines) == len(extra) == 2
    recovery = recovery_column()
    return "".join(f"{line}, {more}, {last}\n" for line, more, last in zip(lines, extra, recovery)), rc


def asked_fields(name: str) -> list[str]:
    """The fields a captured --query-* command asked for, in its order."""
    command = (REAL_H200 / name).read_text().splitlines()[0]
    return command.split("=", 1)[1].split(" ", 1)[0].split(",")


# --- the facts batch, as gather reads its sections ----------------------------------------------


def test_the_facts_batch_reads_the_h200_from_its_real_sections():
    query, rc = h200_query()
    clocks, clocks_rc = h200("qsc.txt")
    smi_q, _ = h200("smi-q.txt")
    nvlink, nvlink_rc = h200("nvlink.txt")
    dmesg, _ = h200("dmesg.txt")
    proc, _ = h200("proc.txt")
    assert (rc, clocks_rc, nvlink_rc) == (0, 0, 0)
    facts = FACTS.parse({
        "nvidia-smi": gather.Section(0, "/usr/bin/nvidia-smi"),
        "query-gpu": gather.Section(rc, query),
        "supported-clocks": gather.Section(0, "source=nvidia-smi\n" + clocks),  # the cache missed: nvidia-smi asked
        "driver": gather.Section(0, f"loaded {proc.splitlines()[0]}\n"),  # DRIVER_SNIPPET: /proc's first line
        "gpu-temperature": gather.Section(0, smi_q),  # the full -q holds the Temperature section -d prints
        "nvlink-status": gather.Section(nvlink_rc, nvlink),
        "kernel-log": gather.Section(0, "source: dmesg\n" + dmesg),
    })
    nvidia = facts.nvidia
    assert (nvidia.state, nvidia.message, nvidia.notes, nvidia.lost) == ("ok", "", [], [])
    assert (nvidia.driver_version, nvidia.exit_code, nvidia.supported_clocks_source) == (DRIVER, 0, "nvidia-smi")
    [gpu] = nvidia.gpus
    assert gpu.supported_clocks == [ClockPair(mem, sm) for mem in (3201, 2201) for sm in GRAPHICS]
    gpu.supported_clocks = []
    assert gpu == THE_H200
    assert (facts.driver.loaded, facts.driver.loaded_open) == (DRIVER, True)
    assert facts.thermal == {BUS: thermal.Thermal(BUS, 41, 48, 54)}
    assert (facts.nvlink.gpus, facts.nvlink.message) == ([], "")
    assert facts.kernel_log.source == "dmesg" and len(facts.kernel_log.lines) == 5


# --- --query-gpu ----------------------------------------------------------------------------------


def test_the_real_header_names_every_field_we_ask_for_some_by_their_new_names():
    table = parsers.read_query_csv(h200_query()[0])
    assert table.other_lines == [] and len(table.rows) == 1
    assert [f.name for f in parsers.QUERY_FIELDS if not f.header_in(table.columns)] == []
    renamed = {f.name: f.header_in(table.columns) for f in parsers.QUERY_FIELDS
               if f.header_in(table.columns) != f.name}
    assert renamed == {"clocks.sm": "clocks.current.sm", "clocks.mem": "clocks.current.memory",
                       "clocks_throttle_reasons.active": "clocks_event_reasons.active"}


def test_the_h200_row_reads_every_field():
    read = parsers.read_query_gpu(h200_query()[0])
    assert (read.gpus, read.driver_version, read.lost, read.notes) == ([THE_H200], DRIVER, [], [])


def test_the_missing_cells_of_the_real_row_are_none_not_values():
    [row] = parsers.read_query_csv(h200("qgpu.txt")[0]).rows
    assert (row["retired_pages.pending"], row["fabric.state"], row["fabric.status"]) == ("[N/A]", "N/A", "N/A")
    [gpu] = parsers.read_query_gpu(h200("qgpu.txt")[0]).gpus
    assert (gpu.retired_pages_pending, gpu.fabric_state, gpu.fabric_status) == (None, None, None)


def test_the_h200_reads_healthy_and_agrees_with_its_remapped_rows_and_q_report():
    [gpu] = parsers.read_query_gpu(h200("qgpu.txt")[0]).gpus
    assert [event.label for event in clock_events.active(gpu.clock_events_active)] == ["Idle"]
    assert clock_events.troubles(gpu.clock_events_active) == []
    smi_q = h200("smi-q.txt")[0]
    reasons = smi_q.split("    Clocks Event Reasons\n", 1)[1].split("    Clocks Event Reasons Counters\n", 1)[0]
    assert re.findall(r"^ +(\S.*?) +: Active$", reasons, re.M) == ["Idle"]
    [remapped] = parsers.read_query_csv(h200("remapped.txt")[0]).rows
    assert remapped == {"gpu_uuid": UUID, "remapped_rows.correctable": "0", "remapped_rows.uncorrectable": "0",
                        "remapped_rows.pending": "No", "remapped_rows.failure": "No"}
    assert (gpu.ecc_enabled, gpu.ecc_uncorrected, gpu.remap_pending, gpu.remap_failure) == (True, 0, False, False)


# --- supported clocks -----------------------------------------------------------------------------


def test_supported_clocks_csv_of_the_real_h200():
    text, rc = h200("qsc.txt")
    assert asked_fields("qsc.txt") == parsers.SUPPORTED_CLOCKS_ARGV[1].split("=", 1)[1].split(",")
    pairs = parsers.parse_supported_clocks_csv(text)
    assert rc == 0 and list(pairs) == [UUID]
    h200_pairs = pairs[UUID]
    assert len(h200_pairs) == 220
    assert list(dict.fromkeys(p.mem for p in h200_pairs)) == [3201, 2201]  # HBM3e: two memory clocks
    for mem in (3201, 2201):
        graphics = [p.sm for p in h200_pairs if p.mem == mem]
        assert (graphics[0], graphics[-1], len(graphics)) == (1980, 345, 110)
        assert graphics == GRAPHICS
    assert ClockPair(3201, 1980) in h200_pairs  # the default application clocks are a supported pair


def test_supported_clocks_q_of_the_real_h200_lists_the_same_pairs():
    pairs = parsers.parse_supported_clocks_q(h200("supported-clocks.txt")[0])
    assert pairs == {BUS: parsers.parse_supported_clocks_csv(h200("qsc.txt")[0])[UUID]}


def test_full_q_of_the_real_h200_has_no_supported_clocks():
    assert parsers.parse_supported_clocks_q(h200("smi-q.txt")[0]) == {}


# --- the load sampler -----------------------------------------------------------------------------


def test_the_sampler_reads_the_real_idle_row_under_the_new_header_names():
    text, rc = h200("qsample.txt")
    assert rc == 0 and asked_fields("qsample.txt") == list(sampler.SAMPLE_FIELDS)
    columns = parsers.read_query_csv(text).columns
    assert {"clocks.current.sm", "clocks.current.memory", "clocks_event_reasons.active"} <= set(columns)
    assert not {"clocks.sm", "clocks.mem", "clocks_throttle_reasons.active"} & set(columns)
    [sample] = sampler.parse(text)
    assert sample == sampler.Sample(t=0.0, uuid=UUID, bus_id=BUS, power=80.79, power_instant=80.99, cap=700.0,
                                    sm=345, mem=3201, temp=41, reasons=0x1, pcie_gen=5, pcie_width=16, util=0)
    assert sample.peak_power == 80.99
    assert sampler.by_gpu([sample]) == {UUID: [sample]}


# --- topology, driver, temperatures, NVLink, kernel log, names ------------------------------------


def test_one_gpu_topology_with_an_underlined_header():
    text, rc = h200("topo.txt")
    assert rc == 0 and "\x1b[4m" in text and "\x1b[0m" in text
    topo = parse_topo(text)
    assert topo == Topology(gpus=["GPU0"], cpu_affinity={"GPU0": "0-15"}, numa_affinity={"GPU0": "0"})
    assert topo.link("GPU0", "GPU0") == "X" and topo.nearest_nic("GPU0") is None
    assert cross_socket_warnings(topo) == [] and topo.gpus_without_nic_within("SYS") == ["GPU0"]


def test_the_open_kernel_modules_version_line():
    line = h200("proc.txt")[0].splitlines()[0]
    driver = parse_driver(f"loaded {line}\n")
    assert (driver.loaded, driver.loaded_open) == (DRIVER, True)
    assert driver.loaded_line == "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  (nixbld@)"
    assert re.search(r"^DRIVER version\s+: (\S+)$", h200("version.txt")[0], re.M)[1] == DRIVER  # nvidia-smi agrees


def test_the_temperature_headroom_on_the_t_limit_scale():
    text = h200("smi-q.txt")[0]
    assert re.search(r"GPU T.Limit Temp +: 46 C", text) and re.search(r"GPU Slowdown T.Limit Temp +: -2 C", text)
    assert thermal.parse(text) == {BUS: thermal.Thermal(BUS, 41, 48, 54)}  # 46 - (-2), 46 - (-8)
    assert thermal.parse(h200("supported-clocks.txt")[0]) == {BUS: thermal.Thermal(BUS)}  # no Temperature section


def test_no_nvlink_in_the_vm_is_no_gpu_and_no_link():
    output, rc = h200("nvlink.txt")
    assert (output, rc) == ("\n", 0)  # nothing printed, exit 0
    facts = read_nvlink(output, "", rc)
    assert (facts.gpus, facts.message) == ([], "")


def test_the_boot_logs_nvidia_lines_are_no_trouble():
    text, rc = h200("dmesg.txt")
    assert rc == 0 and "FBHUB Interrupt detected" in text and "Open Kernel Module" in text
    assert kernlog.parse(text) == []  # no Xid, no GPU off the bus, no AER report


def test_the_gpu_list_and_its_slurm_type():
    assert parsers.parse_gpu_list(h200("list.txt")[0]) == [(0, "NVIDIA H200", UUID)]
    assert slurm.gpu_type("NVIDIA H200") == slurm.autodetect_type("NVIDIA H200") == "h200"
    assert slurm.detected_name("NVIDIA H200") == "nvidia_h200"
