"""The GPU simulator's behaviour: setters per model, persistence, the daemon, reboots, faults, concurrency.

The simulator runs as a subprocess, as nvidia-smi does, with its config, state, pid file
and kernel log under tmp_path. NVIDIA_SIM_UID=0 lets the setters run as "root" whoever
runs the tests; a test that wants a normal user says so. Output formats are checked
against the real captures in test_gpusim_golden.py; message shapes and della's `topo -m` against
public real outputs here (read from ../shared/real-outputs, skipped where it is absent).
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import pytest

from provision.capabilities.topology.topo import parse_topo
from provision_lab import gpusim  # standalone, but importable: its model table

from builders.simulator import FAST_GPUSIM, RAW_DMESG_LINE, Sim, lines, pycache, sim
from paths import GPUSIM

__all__ = ["pycache", "sim"]  # the fixtures, used by name

PERSISTENCE_WARNING = ("Warning: persistence mode is disabled on device {bus}. See the Known Issues section of the "
                       "nvidia-smi(1) man page for more information. Run with [--help | -h] switch to get more "
                       "information on how to enable persistence mode.")


CTIME_DMESG_LINE = re.compile(r"\[([A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4})\] (.*)")


# --- no driver, no GPUs ------------------------------------------------------------------------


def test_without_config_the_driver_is_not_loaded(sim):
    done = sim.smi("--query-gpu=index", "--format=csv")
    assert done.returncode == 9
    assert done.stdout == ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
                           "Make sure that the latest NVIDIA driver is installed and running.\n\n")


@pytest.mark.parametrize("args", [[], ["-L"], ["--query-gpu=index", "--format=csv"], ["-q"], ["-pm", "1"]])
def test_zero_gpus_means_no_devices(sim, args):
    sim.configure()
    done = sim.smi(*args)
    assert (done.stdout, done.returncode) == ("No devices were found\n", 6)


# --- listing and selecting -----------------------------------------------------------------------


def test_list_names_models_in_config_order_with_stable_distinct_uuids(sim):
    sim.configure(("v100-sxm2-16gb", 2), ("rtx-4090", 1))
    listed = lines(sim.ok("-L"))
    assert [re.sub(r"\(UUID: .*\)", "", line) for line in listed] == [
        "GPU 0: Tesla V100-SXM2-16GB ", "GPU 1: Tesla V100-SXM2-16GB ", "GPU 2: NVIDIA GeForce RTX 4090 "]
    uuids = sim.column("uuid")
    assert len(set(uuids)) == 3 and all(re.fullmatch(r"GPU-[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}", u)
                                        for u in uuids)
    assert sim.run("init").returncode == 0
    assert sim.column("uuid") == uuids  # derived from host and slot: the same after a fresh init


def test_select_by_index_uuid_bus_id_and_lists(sim):
    sim.configure(("h100-80gb-hbm3", 4))
    uuid2, bus3 = sim.query("uuid")[2][0], sim.bus(3)
    short_bus = bus3[4:]  # 0000:31:00.0
    for spec, want in [("1", ["1"]), (uuid2, ["2"]), (bus3, ["3"]), (short_bus, ["3"]), (bus3[9:], ["3"]),
                       (f"0,{uuid2},{bus3.lower()}", ["0", "2", "3"])]:
        assert [row[0] for row in sim.query("index", spec)] == want, spec


@pytest.mark.parametrize("spec", ["4", "GPU-00000000-0000-0000-0000-000000000000", "00000000:99:00.0", "0,9"])
def test_unknown_gpu_selection_finds_no_devices(sim, spec):
    sim.configure(("h100-80gb-hbm3", 4))
    done = sim.smi("-i", spec, "--query-gpu=index", "--format=csv")
    assert (done.stdout, done.returncode) == ("No devices were found\n", 6)


# --- queries ------------------------------------------------------------------------------------


@pytest.mark.parametrize("asked, header", [
    ("clocks.sm", "clocks.current.sm [MHz]"), ("clocks.gr", "clocks.current.graphics [MHz]"),
    ("gpu_bus_id", "pci.bus_id"), ("gpu_name", "name"), ("gpu_uuid", "uuid"),
    ("clocks_throttle_reasons.active", "clocks_event_reasons.active"),
    ("clocks_throttle_reasons.sw_power_cap", "clocks_event_reasons.sw_power_cap"),
    ("gpu.power.requested_limit", "power.limit [W]"), ("clocks.applications.gr", "clocks.applications.graphics [MHz]"),
    ("retired_pages.sbe", "retired_pages.single_bit_ecc.count"), ("fan.speed", "fan.speed [%]"),
])
def test_query_aliases_print_the_canonical_header(sim, asked, header):
    sim.configure(("v100-sxm2-16gb", 1))
    assert lines(sim.ok(f"--query-gpu={asked}", "--format=csv"))[0] == header


def test_query_fields_per_model(sim):
    sim.configure(("v100-sxm2-16gb", 1), ("rtx-3090", 1), ("rtx-4090", 1), ("h100-80gb-hbm3", 1))
    fields = ("name,power.default_limit,power.min_limit,power.max_limit,clocks.default_applications.memory,"
              "clocks.default_applications.graphics,clocks.max.sm,pcie.link.gen.max,pcie.link.width.max,memory.total,"
              "ecc.mode.current,persistence_mode")
    assert sim.query(fields) == [
        ["Tesla V100-SXM2-16GB", "300.00", "150.00", "300.00", "877", "1312", "1530", "3", "16", "16384", "Enabled",
         "Disabled"],
        ["NVIDIA GeForce RTX 3090", "350.00", "100.00", "375.00", "[N/A]", "[N/A]", "2100", "4", "16", "24576",
         "[N/A]", "Disabled"],
        ["NVIDIA GeForce RTX 4090", "450.00", "150.00", "450.00", "[N/A]", "[N/A]", "3105", "4", "16", "24564",
         "Disabled", "Disabled"],
        ["NVIDIA H100 80GB HBM3", "700.00", "200.00", "700.00", "2619", "1980", "1980", "5", "16", "81559", "Enabled",
         "Disabled"],
    ]


@pytest.mark.parametrize("model", list(gpusim.MODELS))
def test_every_view_renders_for_every_model(sim, model):
    sim.configure((model, 2))
    for args in ([], ["-q"], ["-q", "-d", "SUPPORTED_CLOCKS"], ["topo", "-m"], ["nvlink", "-s"], ["-L"]):
        assert sim.smi(*args).returncode == 0, args
    every_field = ",".join(f.names[0] for f in gpusim.GPU_FIELDS)
    rows = sim.query(every_field)
    assert [len(row) for row in rows] == [len(gpusim.GPU_FIELDS)] * 2


def test_unknown_field_and_missing_format(sim):
    sim.configure(("rtx-3090", 1))
    done = sim.smi("--query-gpu=index,power.bogus", "--format=csv")
    assert (done.stdout, done.returncode) == ('Field "power.bogus" is not a valid field to query.\n\n', 2)
    assert sim.smi("--query-gpu=index").returncode == 2


def test_supported_clocks_of_the_v100_include_the_pairs_the_basement_uses(sim):
    sim.configure(("v100-sxm2-16gb", 1))
    pairs = [tuple(map(int, line.split(", ")))
             for line in lines(sim.ok("--query-supported-clocks=memory,graphics", "--format=csv,noheader,nounits"))]
    assert (877, 1005) in pairs and (877, 1530) in pairs and (877, 1312) in pairs
    assert pairs[0] == (877, 1530) and pairs[-1] == (877, 135)


def test_volta_clock_grid_reproduces_a_real_v100_list(real_output):
    text = real_output("supported-clocks/v100-pcie-32gb-ttu-hpcc.txt")
    real = tuple(int(v) for v in re.findall(r"Graphics\s+: (\d+) MHz", text))
    assert gpusim.volta_grid(1380, 135) == real


def test_rtx3090_supported_clocks_are_the_real_ones(real_output):
    xml = real_output("supported-clocks/xml-rtx3090-geforce.txt")
    real = tuple((int(memory), tuple(int(g) for g in re.findall(r"<supported_graphics_clock>(\d+) MHz", body)))
                 for memory, body in re.findall(r"<value>(\d+) MHz</value>(.*?)</supported_mem_clock>", xml, re.S))
    assert gpusim.MODELS["rtx-3090"].supported_clocks == real


def test_supported_clocks_text_lists_every_memory_clock(sim):
    sim.configure(("rtx-4090", 1))
    out = sim.ok("-q", "-d", "SUPPORTED_CLOCKS")
    memories = re.findall(r"^        Memory +: (\d+) MHz$", out, re.M)
    assert memories == ["10501", "10251", "5001", "810", "405"]


@pytest.mark.parametrize("display, present, absent", [
    ("CLOCK", ["    Applications Clocks", "    Max Clocks", "    Deferred Clocks"], ["    Power Samples"]),
    ("PERFORMANCE", ["    Performance State", "    Clocks Event Reasons"], ["    Clocks\n"]),
    ("POWER", ["    GPU Power Readings", "    Power Samples", "        Min Power Limit"], ["    Temperature"]),
    ("MEMORY,ECC", ["    FB Memory Usage", "    ECC Mode"], ["    Product Name"]),
])
def test_q_display_types_pick_sections(sim, display, present, absent):
    sim.configure(("v100-sxm2-16gb", 1))
    out = sim.ok("-q", "-d", display)
    assert all(part in out for part in present) and not any(part in out for part in absent)


def test_topo_matrix_shows_nvlink_bonds(sim):
    sim.configure(("h100-80gb-hbm3", 2), ("rtx-4090", 1), cpus=32, numa_nodes=2)
    rows = [line.split("\t") for line in lines(sim.ok("topo", "-m"))[1:4]]
    assert rows == [["GPU0", " X ", "NV18", "SYS", "0-15", "0", "", "N/A"],
                    ["GPU1", "NV18", " X ", "SYS", "0-15", "0", "", "N/A"],
                    ["GPU2", "SYS", "SYS", " X ", "16-31", "1", "", "N/A"]]


def test_v100_topology_is_the_dgx1_cube_mesh(sim):
    sim.configure(("v100-sxm2-16gb", 4))
    rows = [line.split("\t")[1:5] for line in lines(sim.ok("topo", "-m"))[1:5]]
    assert rows == [[" X ", "NV1", "NV1", "NV2"], ["NV1", " X ", "NV2", "NV1"], ["NV1", "NV2", " X ", "NV2"],
                    ["NV2", "NV1", "NV2", " X "]]


# Della's 8x H100 node (../shared/real-outputs/topo, read through `real_output`, skipped when absent): which GPU
# each of its 6 mlx5 NICs shares a PCIe switch with.
DELLA_TOPO = "topo/h100-8gpu-nv18-mlx5-della.txt"
DELLA_NICS = [{"name": f"mlx5_{k}", "near_gpu": gpu} for k, gpu in enumerate((0, 0, 3, 4, 4, 6))]


def test_topo_prints_nics_as_a_real_h100_node_does(sim, real_output):
    """Byte for byte against della's output, but for what that host does not share with the simulator: its
    NICs and GPUs on both NUMA nodes read NODE to each other (the simulator: SYS across nodes), and its
    CPU Affinity cells (empty or "1"). The header's underline escapes were lost in the copy published."""
    sim.configure(("h100-80gb-hbm3", 8), cpus=32, numa_nodes=2, nics=DELLA_NICS)
    got = sim.ok("topo", "-m").replace("\x1b[4m", "").replace("\x1b[0m", "").replace("SYS\t", "NODE\t")
    want = real_output(DELLA_TOPO)

    def cpu_affinity_masked(text: str) -> list:
        rows = [line.split("\t") for line in text.splitlines()]
        return ["\t".join(cells[:15] + ["<cpus>"] + cells[16:] if cells[0].startswith("GPU") else cells)
                for cells in rows]

    assert cpu_affinity_masked(got) == cpu_affinity_masked(want) and got.endswith("\n") == want.endswith("\n")


def test_topo_nic_levels_follow_the_near_gpu_and_numa_nodes(sim):
    nics = [{"name": "mlx5_0", "near_gpu": 0}, {"name": "mlx5_1", "numa": 1}, {"name": "mlx5_2", "near_gpu": 3},
            {"name": "mlx5_bond_0", "near_gpu": 3}]
    sim.configure(("rtx-4090", 4), cpus=32, numa_nodes=2, nics=nics)
    topo = parse_topo(sim.ok("topo", "-m"))
    assert topo.nics == {"NIC0": "mlx5_0", "NIC1": "mlx5_1", "NIC2": "mlx5_2", "NIC3": "mlx5_bond_0"}
    assert [[topo.link(gpu, nic) for nic in topo.nics] for gpu in topo.gpus] == [
        ["PIX", "SYS", "SYS", "SYS"],  # NIC0's NUMA node is its near GPU's
        ["NODE", "SYS", "SYS", "SYS"],
        ["SYS", "NODE", "NODE", "NODE"],
        ["SYS", "NODE", "PIX", "PIX"],
    ]
    assert (topo.link("NIC2", "NIC3"), topo.link("NIC1", "NIC2"), topo.link("NIC0", "NIC1")) == ("PIX", "NODE", "SYS")
    assert [topo.nearest_nic(gpu) for gpu in topo.gpus] == [
        ("mlx5_0", "PIX"), ("mlx5_0", "NODE"), ("mlx5_1", "NODE"), ("mlx5_2", "PIX")]
    assert topo.gpus_without_nic_within("PXB") == ["GPU1", "GPU2"]
    assert topo.cross_socket_gpu_pairs() == [("GPU0", "GPU2"), ("GPU0", "GPU3"), ("GPU1", "GPU2"), ("GPU1", "GPU3")]
    assert topo.cpu_affinity == {"GPU0": "0-15", "GPU1": "0-15", "GPU2": "16-31", "GPU3": "16-31"}
    assert topo.numa_affinity == {"GPU0": "0", "GPU1": "0", "GPU2": "1", "GPU3": "1"}


def test_topo_on_one_numa_node_puts_nics_behind_the_host_bridge(sim):
    sim.configure(("h100-80gb-hbm3", 2), nics=[{"name": "mlx5_0", "near_gpu": 1}, {"name": "mlx5_1"}])
    topo = parse_topo(sim.ok("topo", "-m"))
    assert topo.link("GPU0", "GPU1") == "NV18" and topo.link("NIC0", "NIC1") == "PHB"
    assert [topo.nearest_nic(gpu) for gpu in topo.gpus] == [("mlx5_0", "PHB"), ("mlx5_0", "PIX")]


def test_topo_of_a_state_file_from_before_nics_is_the_gpu_matrix(sim):
    sim.configure(("h100-80gb-hbm3", 2))
    sim.gpusim("init")  # writes the state file
    before = sim.ok("topo", "-m")
    state = sim.state()
    del state["nics"]
    (sim.root / "state.json").write_text(json.dumps(state))
    assert sim.ok("topo", "-m") == before and "NIC" not in before
    assert parse_topo(before).nics == {}


@pytest.mark.parametrize("nics", [
    {"name": "mlx5_0"}, [{"numa": 0}], [{"name": ""}], [{"name": "mlx5_0", "numa": 2}],
    [{"name": "mlx5_0", "near_gpu": 2}], [{"name": "mlx5_0", "near_gpu": "0"}], ["mlx5_0"],
])
def test_a_nic_config_the_simulator_cannot_place_is_refused(sim, nics):
    sim.configure(("rtx-4090", 2), numa_nodes=2, nics=nics)
    done = sim.smi("topo", "-m")
    assert done.returncode == 255 and 'expected "nics": [{"name": "mlx5_0", "numa": 0..1' in done.stderr


# --- setters: success and refusal per model ---------------------------------------------------------


def persist(sim: Sim) -> None:
    sim.ok("-pm", "1")


def test_v100_accepts_the_basement_settings(sim):
    sim.configure(("v100-sxm2-16gb", 4))
    persist(sim)
    bus = sim.bus(0)
    assert lines(sim.ok("-i", "0", "-ac", "877,1005")) == [
        f'Applications clocks set to "(MEM 877, SM 1005)" for GPU {bus}', "All done."]
    assert lines(sim.ok("-i", "0", "-pl", "200")) == [
        f"Power limit for GPU {bus} was set to 200.00 W from 300.00 W.", "All done."]
    assert sim.query("clocks.applications.memory,clocks.applications.graphics,power.limit,enforced.power.limit",
                     "0") == [["877", "1005", "200.00", "200.00"]]
    assert sim.query("power.limit", "1") == [["300.00"]]


def test_setter_without_i_sets_every_gpu(sim):
    sim.configure(("v100-sxm2-16gb", 3))
    persist(sim)
    out = sim.ok("-pl", "250")
    assert [line.split(" was set")[0] for line in lines(out)] == [
        f"Power limit for GPU {sim.bus(k)}" for k in range(3)] + ["All done."]
    assert sim.column("power.limit") == ["250.00"] * 3


def test_unsupported_application_clock_pair_is_a_warning(sim):
    sim.configure(("v100-sxm2-16gb", 1))
    persist(sim)
    done = sim.smi("-ac", "877,1000")
    assert done.returncode == 0
    assert lines(done.stdout) == [
        f'Specified clock combination "(MEM 877, SM 1000)" is not supported for GPU {sim.bus(0)}. '
        "Run 'nvidia-smi -q -d SUPPORTED_CLOCKS' to see list of supported clock combinations",
        "Treating as warning and moving on.", "All done."]
    assert sim.query("clocks.applications.graphics") == [["1312"]]
    assert sim.smi("-eow", "-ac", "877,1000").returncode != 0  # --error-on-warning


@pytest.mark.parametrize("model", ["rtx-3090", "rtx-4090"])
@pytest.mark.parametrize("args", [["-ac", "9751,2100"], ["-rac"]])
def test_geforce_refuses_application_clocks(sim, model, args):
    sim.configure((model, 1))
    done = sim.smi(*args)
    assert done.returncode == 0
    assert lines(done.stdout) == [f"Setting applications clocks is not supported for GPU {sim.bus(0)}.",
                                  "Treating as warning and moving on.", "All done."]


@pytest.mark.parametrize("model, low, high", [("v100-sxm2-16gb", 150, 300), ("rtx-3090", 100, 375),
                                              ("rtx-4090", 150, 450), ("h100-80gb-hbm3", 200, 700)])
def test_power_limit_out_of_range(sim, model, low, high):
    sim.configure((model, 1))
    for watts in (low - 1, high + 1):
        done = sim.smi("-pl", str(watts))
        assert done.returncode == 2
        assert lines(done.stdout) == [
            f"Provided power limit {watts:.2f} W is not a valid power limit which should be between {low:.2f} W "
            f"and {high:.2f} W for GPU {sim.bus(0)}", "Terminating early due to previous errors."]
    assert sim.smi("-pl", str(low)).returncode == 0


@pytest.mark.parametrize("model", ["v100-sxm2-16gb", "rtx-3090", "rtx-4090", "h100-80gb-hbm3"])
def test_locked_gpu_clocks_work_on_every_model(sim, model):
    sim.configure((model, 1))
    persist(sim)
    bus = sim.bus(0)
    assert lines(sim.ok("-lgc", "1200,1200")) == [
        f'GPU clocks set to "(gpuClkMin 1200, gpuClkMax 1200)" for GPU {bus}', "All done."]
    assert sim.query("clocks.sm,clocks.gr") == [["1200", "1200"]]
    assert sim.ok("-rgc") == "All done.\n"
    assert sim.query("clocks.sm") == [[str(gpusim.MODELS[model].idle_clocks.sm)]]


@pytest.mark.parametrize("model, supported", [("v100-sxm2-16gb", False), ("rtx-3090", True), ("rtx-4090", True),
                                              ("h100-80gb-hbm3", False)])
def test_locked_memory_clocks_need_ampere_and_not_hopper(sim, model, supported):
    sim.configure((model, 1))
    persist(sim)
    memory = gpusim.MODELS[model].max_clocks.memory
    out = sim.ok("-lmc", str(memory))
    if supported:
        assert lines(out) == [
            f'Memory clocks set to "(memClkMin {memory}, memClkMax {memory})" for GPU {sim.bus(0)}', "All done."]
        assert sim.query("clocks.mem") == [[str(memory)]]
    else:
        assert lines(out) == [f"Setting locked memory clocks is not supported for GPU {sim.bus(0)}.",
                              "Treating as warning and moving on.", "All done."]


def test_hopper_defers_memory_clock_locks_to_the_next_boot(sim):
    sim.configure(("h100-80gb-hbm3", 1))
    assert sim.smi("-lmcd", "1593").returncode == 0
    assert sim.query("clocks.mem") == [["2619"]]  # not yet
    assert "        Memory                                         : 1593 MHz" in sim.ok("-q", "-d", "CLOCK")
    sim.run("reboot")
    assert sim.query("clocks.mem") == [["1593"]]
    sim.ok("-rmcd")
    sim.run("reboot")
    assert sim.query("clocks.mem") == [["2619"]]
    assert sim.ok("-lmcd", "1000").startswith("Specified memory clock 1000 MHz is not supported")


@pytest.mark.parametrize("value, want", [("1", "Enabled"), ("ENABLED", "Enabled"), ("0", "Disabled"),
                                         ("disabled", "Disabled")])
def test_persistence_mode_values(sim, value, want):
    sim.configure(("rtx-3090", 1))
    sim.ok("-pm", "1" if want == "Disabled" else "0")
    sim.ok("-pm", value)
    assert sim.column("persistence_mode") == [want]


@pytest.mark.parametrize("args", [["-pm", "2"], ["-pl", "lots"], ["-ac", "877"], ["-lgc", "1500,1200"]])
def test_nonsense_values_are_invalid_arguments(sim, args):
    sim.configure(("v100-sxm2-16gb", 1))
    done = sim.smi(*args)
    assert done.returncode == 2 and "Please run 'nvidia-smi -h' for help." in done.stdout


def test_two_setters_at_once_are_an_invalid_combination(sim):
    sim.configure(("v100-sxm2-16gb", 1))
    done = sim.smi("-pm", "1", "-pl", "200")
    assert (done.stdout, done.returncode) == (
        "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n", 2)


def test_unknown_and_unsimulated_options(sim):
    sim.configure(("v100-sxm2-16gb", 1))
    done = sim.smi("--frobnicate")
    assert (done.stdout, done.returncode) == (
        "ERROR: Option --frobnicate is not recognized. Please run 'nvidia-smi -h' for help.\n", 2)
    done = sim.smi("-p", "0")
    assert done.returncode == 255 and "not simulated" in done.stderr


# --- who may set -------------------------------------------------------------------------------------


@pytest.mark.parametrize("args, message", [
    (["-pl", "200"], "Failed to set power management limit for GPU {bus}: Insufficient Permissions"),
    (["-pm", "1"], "Unable to set persistence mode for GPU {bus}: Insufficient Permissions"),
    (["-ac", "877,1005"], "The current user does not have permission to change clocks for GPU {bus}."),
    (["-lgc", "1200"], "Failed to set locked GPU clocks for GPU {bus}: Insufficient Permissions"),
])
def test_a_normal_user_may_not_set(sim, args, message):
    sim.configure(("v100-sxm2-16gb", 2))
    done = sim.smi(*args, uid=1000)
    assert done.returncode == 4
    assert lines(done.stdout) == [message.format(bus=sim.bus(0)), "Terminating early due to previous errors."]
    assert sim.query("power.limit,persistence_mode,clocks.applications.graphics")[0] == ["300.00", "Disabled", "1312"]


def test_a_normal_user_may_query_and_ask_for_what_already_is(sim):
    sim.configure(("v100-sxm2-16gb", 1))
    done = sim.smi("-pm", "0", uid=1000)  # nothing to change: no permission needed
    assert (done.stdout, done.returncode) == (
        f"Persistence mode is already Disabled for GPU {sim.bus(0)}.\nAll done.\n", 0)
    assert sim.smi("--query-gpu=power.limit", "--format=csv", uid=1000).returncode == 0


# --- persistence: what survives the driver unloading ------------------------------------------------------


def test_without_persistence_settings_are_lost_when_nvidia_smi_exits(sim):
    sim.configure(("v100-sxm2-16gb", 1))
    bus = sim.bus(0)
    assert lines(sim.ok("-pl", "200")) == [f"Power limit for GPU {bus} was set to 200.00 W from 300.00 W.", "",
                                           PERSISTENCE_WARNING.format(bus=bus), "All done."]
    assert "PERSISTENCE" not in sim.ok("-ac", "877,1005")
    sim.ok("-lgc", "1200")
    assert sim.query("power.limit,clocks.applications.graphics,clocks.sm") == [["300.00", "1312", "135"]]


def test_legacy_persistence_keeps_settings_and_logs_the_deprecation(sim):
    sim.configure(("v100-sxm2-16gb", 1))
    bus = sim.bus(0)
    assert sim.ok("-pm", "1") == f"Enabled persistence mode for GPU {bus}.\nAll done.\n"
    assert sim.ok("-pm", "1") == f"Persistence mode is already Enabled for GPU {bus}.\nAll done.\n"
    assert "NVRM: Persistence mode is deprecated and will be removed in a future release. " \
           "Please use nvidia-persistenced instead." in sim.kmsg.read_text()
    sim.ok("-pl", "200")
    assert sim.query("power.limit,persistence_mode") == [["200.00", "Enabled"]]
    assert sim.ok("-pm", "0") == f"Disabled persistence mode for GPU {bus}.\nAll done.\n"
    assert sim.query("power.limit,persistence_mode") == [["300.00", "Disabled"]]  # the driver let go


# --- nvidia-persistenced -------------------------------------------------------------------------------


def test_the_daemon_keeps_gpus_persistent_until_stopped(sim):
    sim.configure(("v100-sxm2-16gb", 2))
    started = sim.run("nvidia-persistenced", "--verbose")
    assert started.returncode == 0 and started.stdout == ""
    pid = sim.daemon_pid()
    assert pid and Path(f"/proc/{pid}/comm").read_text().strip() == "nvidia-persiste"
    assert sim.column("persistence_mode") == ["Enabled", "Enabled"]
    assert sim.ok("-i", "0", "-pl", "200").count("Warning") == 0
    assert sim.column("power.limit") == ["200.00", "300.00"]
    second = sim.run("nvidia-persistenced")
    assert (second.stderr, second.returncode) == (
        "nvidia-persistenced failed to initialize. Check syslog for more details.\n", 1)
    sim.stop_daemon()
    assert not sim.pidfile.exists()
    assert sim.query("persistence_mode,power.limit") == [["Disabled", "300.00"], ["Disabled", "300.00"]]


def test_daemon_without_persistence_mode_and_pm_through_it(sim):
    sim.configure(("h100-80gb-hbm3", 2))
    assert sim.run("nvidia-persistenced", "--user", "root", "--no-persistence-mode").returncode == 0
    assert sim.column("persistence_mode") == ["Disabled", "Disabled"]
    assert sim.ok("-i", "1", "-pm", "1") == f"Enabled persistence mode via daemon for GPU {sim.bus(1)}.\nAll done.\n"
    assert sim.column("persistence_mode") == ["Disabled", "Enabled"]
    assert "deprecated" not in (sim.kmsg.read_text() if sim.kmsg.exists() else "")


def test_daemon_refuses_a_user_that_does_not_exist_and_normal_users(sim):
    sim.configure(("rtx-3090", 1))
    assert sim.run("nvidia-persistenced", "--user", "no-such-user-here").returncode == 1
    assert sim.run("nvidia-persistenced", uid=1000).returncode == 1
    assert sim.daemon_pid() is None


# --- reboot --------------------------------------------------------------------------------------------


def test_reboot_resets_volatile_state(sim):
    sim.configure(("v100-sxm2-16gb", 2))
    persist(sim)
    sim.ok("-pl", "200")
    sim.ok("-ac", "877,1005")
    sim.ok("-lgc", "1000")
    assert sim.run("reboot").returncode == 0
    assert sim.query("persistence_mode,power.limit,clocks.applications.graphics,clocks.sm") == [
        ["Disabled", "300.00", "1312", "135"]] * 2


# --- faults --------------------------------------------------------------------------------------------


def test_a_gpu_fallen_off_the_bus_is_an_error_line_and_exit_15_and_the_others_keep_their_indexes(sim):
    sim.configure(("v100-sxm2-16gb", 4))
    uuids, bus1 = sim.column("uuid"), sim.bus(1)
    assert sim.run("fault", "1", "off-bus").returncode == 0
    error = f"Unable to determine the device handle for GPU{bus1[4:]}: Unknown Error"
    query = sim.smi("--query-gpu=index,uuid", "--format=csv,noheader")
    assert query.returncode == 15
    assert query.stdout.splitlines() == [error] + [f"{i}, {uuids[i]}" for i in (0, 2, 3)]  # no renumbering
    table = sim.smi()
    assert (table.returncode, table.stdout) == (15, error + "\n")  # the table stops at the GPU it cannot open
    listing = sim.smi("-L")
    assert listing.returncode == 15 and listing.stdout.splitlines()[0] == error and len(listing.stdout.splitlines()) == 4
    assert "Attached GPUs                                          : 4" not in sim.smi("-q").stdout
    assert sim.smi("-i", uuids[1], "-pl", "200").returncode == 6  # its UUID cannot be read without a handle
    assert sim.smi("-i", "1", "-pl", "200").returncode == 15
    assert sim.smi("-i", uuids[2], "-pl", "200").returncode == 0  # the others still take settings
    short = bus1[4:].lower()
    assert f"NVRM: Xid (PCI:{short[:-2]}): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus." \
           in sim.kmsg.read_text()
    sim.run("reboot")
    assert sim.column("uuid") == uuids


def test_a_gone_gpu_is_not_enumerated_the_others_are_renumbered_and_it_stays_gone_across_reboots(sim):
    sim.configure(("rtx-4090", 7))
    uuids, bus3 = sim.column("uuid"), sim.bus(3)
    assert sim.run("fault", "3", "gone").returncode == 0
    assert sim.column("uuid") == uuids[:3] + uuids[4:]
    assert sim.column("index") == [str(i) for i in range(6)]  # enumeration closes the gap
    assert sim.ok("-L").count("GPU ") == 6 and bus3 not in sim.ok("-q")
    assert f"NVRM: The NVIDIA GPU {bus3[4:].lower()} (PCI ID: 10de:2684) installed in this system has fallen off " \
           "the bus and is not responding to commands." in sim.kmsg.read_text()
    sim.run("reboot")
    assert len(sim.column("uuid")) == 6
    sim.run("fault", "3", "clear")
    assert sim.column("uuid") == uuids


def test_xid_line_has_the_real_shape(sim, real_output):
    sim.configure(("rtx-3090", 1))
    sim.run("fault", "0", "off-bus")
    def shape(line):
        line = re.sub(r"^\w{3} [ \d]\d \d\d:\d\d:\d\d \S+ kernel: \[ *\d+\.\d+\] ", "", line)
        return re.sub(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}", "PCI", line)
    real = [shape(line) for line in lines(real_output("xid/xid79-fallen-off-bus-syslog-gtx1650ti-mobile.txt"))]
    assert [shape(line) for line in lines(sim.kmsg.read_text())] == real


def test_every_gpu_off_the_bus_is_error_lines_alone(sim):
    sim.configure(("h100-80gb-hbm3", 1))
    sim.run("fault", "GPU-" + sim.column("uuid")[0][4:], "off-bus")
    listing = sim.smi("-L")
    assert listing.returncode == 15 and listing.stdout.startswith("Unable to determine the device handle for GPU")
    sim.run("fault", "0", "clear")
    sim.run("fault", "0", "gone")
    assert sim.smi("-L").returncode == 6  # "No devices were found"
    sim.run("fault", "0", "clear")
    assert sim.smi("-L").returncode == 0


def test_degraded_link_survives_reboot_until_cleared(sim):
    sim.configure(("h100-80gb-hbm3", 2))
    sim.run("fault", "1", "pcie-degraded")
    sim.run("fault", sim.bus(0), "pcie-degraded", "--gen", "3")
    fields = "pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max"
    want = [["3", "5", "16", "16"], ["5", "5", "8", "16"]]
    assert sim.query(fields) == want
    sim.run("reboot")
    assert sim.query(fields) == want
    assert "                Current                                : 8x" in sim.ok("-q", "-i", "1")
    sim.run("fault", "1", "clear")
    assert sim.query(fields)[1] == ["5", "5", "16", "16"]


def test_bad_fault_requests(sim):
    sim.configure(("rtx-4090", 1))
    assert sim.run("fault", "3", "off-bus").returncode == 255
    assert sim.run("fault", "0", "melted").returncode == 255


# --- health faults: ECC, clock event reasons, PCIe AER --------------------------------------------

HEALTH = ("clocks_throttle_reasons.active,clocks_event_reasons.gpu_idle,clocks_event_reasons.hw_slowdown,"
          "clocks_event_reasons.hw_thermal_slowdown,clocks_event_reasons.hw_power_brake_slowdown,ecc.mode.current,"
          "ecc.errors.uncorrected.volatile.total,ecc.errors.uncorrected.aggregate.total,retired_pages.dbe,"
          "retired_pages.pending,remapped_rows.uncorrectable,remapped_rows.pending,remapped_rows.failure")
IDLE = ["0x0000000000000001", "Active", "Not Active", "Not Active", "Not Active"]
# What the consumer asks, verbatim.
CONSUMER = ("index,clocks_throttle_reasons.active,ecc.mode.current,ecc.errors.uncorrected.volatile.total,"
            "retired_pages.pending,remapped_rows.pending,remapped_rows.failure")

# Real lines (gpu_models.md, "Kernel log lines"): an H100's Xid 48 and 63 with driver 550.90.07 [H100-DBE],
# a page-retirement GPU's Xid 48 [DBE-1146], a 5.4 kernel's AER report [AER-5.4].
REAL_XID_48 = ("NVRM: Xid (PCI:0000:52:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable double bit error "
               "(DBE) has been detected on GPU in the framebuffer at physAddr 0x18f31d80 partition 16, subpartition 3.")
REAL_XID_63_ROW = ("NVRM: Xid (PCI:0000:52:00): 63, pid='<unknown>', name=<unknown>, Row Remapper: New row "
                   "(0x0000000018f31d80) marked for remapping, reset gpu to activate.")
REAL_XID_48_DPR = ("NVRM: Xid (PCI:0000:07:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable double bit error "
                   "(DBE) has been detected on GPU in the framebuffer at physAddr 0x7fffa8860 partition 7, "
                   "subpartition 1.")
REAL_AER = ["pcieport 0000:00:1d.6: AER: Corrected error received: 0000:05:00.0",
            "alx 0000:05:00.0: AER: PCIe Bus Error: severity=Corrected, type=Data Link Layer, (Receiver ID)",
            "alx 0000:05:00.0: AER:   device [1969:e0b1] error status/mask=00000080/00000000",
            "alx 0000:05:00.0: AER:    [ 7] BadDLLP               "]


def xid_shape(line: str) -> str:
    """An Xid line with its PCI address, hex values and numbers masked."""
    line = re.sub(r"PCI:[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}", "PCI:X", line)
    return re.sub(r"0x[0-9a-f]+|\d+", "N", line)


def q_values(text: str, *labels: str) -> list:
    """The values of -q lines with these labels, in order of appearance."""
    return [m.group(2) for m in re.finditer(r"^ *(.+?) +: (.*)$", text, re.M) if m.group(1) in labels]


def test_an_uncorrectable_ecc_error_on_an_h100_marks_a_row_for_remapping(sim):
    sim.configure(("h100-80gb-hbm3", 2))
    sim.gpusim("reboot")
    bus = sim.bus(1)
    pci = bus[4:-2].lower()
    assert sim.query(HEALTH, "1") == [IDLE + ["Enabled", "0", "0", "[N/A]", "[N/A]", "0", "No", "No"]]
    sim.gpusim("fault", "1", "ecc")
    assert sim.query(HEALTH, "1") == [IDLE + ["Enabled", "1", "1", "[N/A]", "[N/A]", "1", "Yes", "No"]]
    assert sim.query(HEALTH, "0")[0][6:8] == ["0", "0"]  # the other GPU is fine
    assert sim.query(CONSUMER) == [["0", "0x0000000000000001", "Enabled", "0", "[N/A]", "No", "No"],
                                   ["1", "0x0000000000000001", "Enabled", "1", "[N/A]", "Yes", "No"]]
    assert lines(sim.ok("--query-remapped-rows=gpu_bus_id,remapped_rows.uncorrectable,remapped_rows.pending,"
                        "remapped_rows.failure", "--format=csv,noheader"))[1] == f"{bus}, 1, Yes, No"
    ecc = sim.q("1", "ECC,ROW_REMAPPER")
    assert q_values(ecc, "DRAM Uncorrectable") == ["1", "1"]  # volatile, aggregate
    assert q_values(sim.q("1", "ROW_REMAPPER"), "Uncorrectable Error", "Pending", "Remapping Failure Occurred",
                    "Max", "High") == [
        "1", "Yes", "No", "2559 bank(s)", "1 bank(s)"]
    table = {line.split("|")[2].split()[0]: line for line in lines(sim.ok()) if " Off |" in line}
    assert table[bus].endswith("|                    1 |")  # the table's Volatile Uncorr. ECC
    assert table[sim.bus(0)].endswith("|                    0 |")
    # the kernel log: Xid 48, then Xid 63 in the row remapper's words, at the same address
    xid48, xid63 = sim.log()[-2:]
    assert xid48.startswith(f"NVRM: Xid (PCI:{pci}): 48, ") and xid63.startswith(f"NVRM: Xid (PCI:{pci}): 63, ")
    assert [xid_shape(xid48), xid_shape(xid63)] == [xid_shape(REAL_XID_48), xid_shape(REAL_XID_63_ROW)]
    address = re.search(r"physAddr (0x[0-9a-f]+) ", xid48).group(1)
    assert f"New row (0x{int(address, 16):016x}) marked" in xid63 and int(address, 16) < 81559 << 20
    assert sim.ring_messages()[-2:] == [xid48, xid63]

    sim.gpusim("reboot")  # the remap takes effect; the volatile count starts over, the lifetime one stays
    assert sim.query(HEALTH, "1") == [IDLE + ["Enabled", "0", "1", "[N/A]", "[N/A]", "1", "No", "No"]]
    assert q_values(sim.q("1", "ECC"), "DRAM Uncorrectable") == ["0", "1"]
    assert not any("Xid" in line for line in sim.ring_messages())  # a new boot's buffer
    assert xid63 in sim.log()  # syslog's file keeps it

    sim.gpusim("fault", bus, "clear")  # a repaired card: its InfoROM still counts the lifetime error
    assert sim.query(HEALTH, "1") == [IDLE + ["Enabled", "0", "1", "[N/A]", "[N/A]", "0", "No", "No"]]
    assert q_values(sim.q("1", "ROW_REMAPPER"), "Max", "High") == ["2560 bank(s)", "0 bank(s)"]


def test_an_uncorrectable_ecc_error_on_a_v100_retires_a_page(sim):
    sim.configure(("v100-sxm2-16gb", 1))
    sim.gpusim("fault", "0", "ecc")
    assert sim.query(HEALTH) == [IDLE + ["Enabled", "1", "1", "1", "Yes", "[N/A]", "[N/A]", "[N/A]"]]
    assert sim.query("retired_pages.sbe") == [["0"]]
    out = sim.q("0", "ECC,PAGE_RETIREMENT")
    # Volta's layout: the error is a Double Bit one in Device Memory, volatile and aggregate
    assert q_values(out, "Device Memory") == ["0", "1", "0", "1"]  # single, double; volatile, then aggregate
    assert q_values(out, "Total") == ["0", "1", "0", "1"]
    assert q_values(out, "Double Bit ECC", "Pending Page Blacklist") == ["1", "Yes"]
    assert "Remapped Rows                                      : N/A" in sim.ok("-q", "-d", "ROW_REMAPPER")
    xid48, xid63 = sim.log()
    assert xid_shape(xid48) == xid_shape(REAL_XID_48_DPR)
    page = int(re.search(r"physAddr (0x[0-9a-f]+) ", xid48).group(1), 16) >> 12
    assert xid63.endswith(f"): 63, pid='<unknown>', name=<unknown>, Dynamic Page Retirement: New page retired, "
                          f"reboot to activate (0x{page:016x}).")
    assert "Row Remapper" not in xid63
    sim.gpusim("reboot")
    assert sim.query(HEALTH) == [IDLE + ["Enabled", "0", "1", "1", "No", "[N/A]", "[N/A]", "[N/A]"]]
    sim.gpusim("fault", "0", "ecc")  # another page, another address
    assert sim.query(HEALTH)[0][5:10] == ["Enabled", "1", "2", "2", "Yes"]
    assert len(set(re.findall(r"physAddr (0x[0-9a-f]+)", sim.kmsg.read_text()))) == 2
    sim.gpusim("fault", "0", "clear")
    assert sim.query(HEALTH) == [IDLE + ["Enabled", "0", "2", "0", "No", "[N/A]", "[N/A]", "[N/A]"]]


@pytest.mark.parametrize("model, mode", [("rtx-4090", "disabled"), ("rtx-3090", "not supported")])
def test_ecc_errors_are_refused_where_ecc_is_not_enabled(sim, model, mode):
    sim.configure((model, 1))
    before = sim.query(HEALTH)
    done = sim.run("fault", "0", "ecc")
    assert done.returncode == 255
    assert done.stderr == f"gpusim: GPU 0 ({gpusim.MODELS[model].name}) has ECC {mode}: it cannot report an " \
                          "uncorrectable ECC error\n"
    assert sim.query(HEALTH) == before and sim.log() == []


def test_a_row_remapping_failure(sim):
    sim.configure(("h100-80gb-hbm3", 1), ("v100-sxm2-16gb", 1))
    sim.gpusim("fault", "0", "ecc", "--remap-failure")
    assert sim.query(HEALTH, "0") == [IDLE + ["Enabled", "1", "1", "[N/A]", "[N/A]", "0", "No", "Yes"]]
    assert q_values(sim.q("0", "ROW_REMAPPER"), "Remapping Failure Occurred") == ["Yes"]
    xid48, xid64 = sim.log()
    address = int(re.search(r"physAddr (0x[0-9a-f]+) ", xid48).group(1), 16)
    assert xid64.endswith(f"): 64, pid='<unknown>', name=<unknown>, Row Remapper Error: (0x{address:016x}) - All "
                          "reserved rows for bank are remapped")
    sim.gpusim("reboot")  # a failure is for good
    assert sim.query("remapped_rows.failure", "0") == [["Yes"]]
    sim.gpusim("fault", "0", "clear")
    assert sim.query("remapped_rows.failure", "0") == [["No"]]
    done = sim.run("fault", "1", "ecc", "--remap-failure")  # a V100 retires pages
    assert done.returncode == 255 and "no row remapper" in done.stderr
    assert sim.run("fault", "0", "thermal", "--remap-failure").returncode == 255


@pytest.mark.parametrize("kind, mask, hot", [
    ("power-brake", "0x0000000000000088", ("HW Power Brake Slowdown", "HW Power Braking")),
    ("thermal", "0x0000000000000048", ("HW Thermal Slowdown", "HW Thermal Slowdown")),
])
def test_a_power_brake_or_thermal_slowdown_holds_clock_event_reasons_until_cleared(sim, kind, mask, hot):
    sim.configure(("h100-80gb-hbm3", 2))
    reason, counter = hot
    fields = ("clocks_event_reasons.active,clocks_event_reasons.gpu_idle,clocks_event_reasons.hw_slowdown,"
              "clocks_event_reasons.hw_thermal_slowdown,clocks_event_reasons.hw_power_brake_slowdown,"
              "clocks_event_reasons.sw_thermal_slowdown,clocks_event_reasons.sw_power_cap")
    sim.gpusim("fault", "1", kind)
    brake = kind == "power-brake"
    want = [mask, "Not Active", "Active", active(not brake), active(brake), "Not Active", "Not Active"]
    assert sim.query(fields) == [IDLE[:1] + ["Active"] + ["Not Active"] * 5, want]
    assert sim.query(CONSUMER)[1][1] == mask

    def reasons() -> dict:
        out = sim.q("1", "PERFORMANCE")
        section = out[out.index("Clocks Event Reasons\n"):out.index("Clocks Event Reasons Counters")]
        return dict(re.findall(r"^ +(.+?) +: (.+)$", section, re.M))

    def counters() -> dict:
        out = sim.q("1", "PERFORMANCE")
        return {k: int(v) for k, v in re.findall(r"^ +(.+?) +: (\d+) us$", out[out.index("Counters"):], re.M)}

    assert reasons() == {"Idle": "Not Active", "Applications Clocks Setting": "Not Active",
                         "SW Power Cap": "Not Active", "HW Slowdown": "Active",
                         "HW Thermal Slowdown": active(not brake), "HW Power Brake Slowdown": active(brake),
                         "Sync Boost": "Not Active", "SW Thermal Slowdown": "Not Active",
                         "Display Clock Setting": "Not Active"}
    first = counters()
    time.sleep(0.05)
    second = counters()
    assert 0 < first[counter] < second[counter]  # time under the condition, in us, grows while it lasts
    assert all(second[name] == 0 for name in second if name != counter)
    assert sim.log() == []  # nothing for the kernel log: the driver does not log clock events

    sim.gpusim("reboot")  # the hardware still brakes / overheats
    assert sim.query(fields)[1] == want
    assert counters()[counter] > 0
    sim.gpusim("fault", "1", "clear")
    assert sim.query(fields)[1] == IDLE[:1] + ["Active"] + ["Not Active"] * 5
    assert reasons()["Idle"] == "Active" and counters()[counter] == 0


def active(flag: bool) -> str:
    return "Active" if flag else "Not Active"


def test_power_brake_and_thermal_together(sim):
    sim.configure(("v100-sxm2-16gb", 1))
    sim.gpusim("fault", "0", "power-brake")
    sim.gpusim("fault", "0", "thermal")
    assert sim.query("clocks_throttle_reasons.active,clocks_throttle_reasons.gpu_idle") == [
        ["0x00000000000000C8", "Not Active"]]


def test_pcie_errors_are_a_real_format_aer_report_of_the_gpus_link(sim):
    sim.configure(("h100-80gb-hbm3", 3))
    sim.gpusim("reboot")
    bus = sim.bus(2)[4:].lower()  # 0000:21:00.0
    sim.gpusim("fault", "2", "pcie-errors")
    report = sim.log()[-4:]
    assert report == [f"pcieport 0000:00:03.0: AER: Corrected error received: {bus}",
                      f"nvidia {bus}: AER: PCIe Bus Error: severity=Corrected, type=Physical Layer, (Receiver ID)",
                      f"nvidia {bus}: AER:   device [10de:2330] error status/mask=00000001/0000e000",
                      f"nvidia {bus}: AER:    [ 0] RxErr                 "]

    def shape(line: str) -> str:
        line = re.sub(r"^(pcieport|alx|nvidia) ", "DRIVER ", line)
        line = re.sub(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.\d", "BDF", line)
        line = re.sub(r"\[[0-9a-f]{4}:[0-9a-f]{4}\]|[0-9a-f]{8}/[0-9a-f]{8}", "HEX", line)
        return re.sub(r"type=[A-Za-z ]+,|\[ ?\d+\] \w+ *", "X", line)
    assert [shape(line) for line in report] == [shape(line) for line in REAL_AER]
    assert len(report[3]) - len(report[3].rstrip()) == 22 - len("RxErr")  # printk's "%-22s" pads it
    assert sim.ring_messages()[-4:] == report
    sim.gpusim("fault", "2", "pcie-errors")  # the same root port each time
    assert sim.log()[-4] == report[0]
    sim.gpusim("fault", "0", "pcie-errors")
    assert sim.log()[-4].startswith("pcieport 0000:00:01.0: AER: Corrected error received: 0000:01:00.0")
    assert sim.query(HEALTH, "2") == [IDLE + ["Enabled", "0", "0", "[N/A]", "[N/A]", "0", "No", "No"]]
    sim.gpusim("reboot")
    assert not any("AER" in line for line in sim.ring_messages()) and report[0] in sim.log()


def test_faults_on_several_gpus_and_an_old_state_file(sim):
    sim.configure(("h100-80gb-hbm3", 2))
    persist(sim)
    sim.ok("-i", "0", "-pl", "500")
    state = sim.state()  # as version 1 wrote it: no health keys
    state["version"] = 1
    for record in state["gpus"]:
        for key in gpusim.healthy():
            del record[key]
    (sim.root / "state.json").write_text(json.dumps(state))
    assert sim.query("power.limit,persistence_mode," + HEALTH, "0") == [
        ["500.00", "Enabled"] + IDLE + ["Enabled", "0", "0", "[N/A]", "[N/A]", "0", "No", "No"]]
    sim.gpusim("fault", "0", "ecc")
    assert sim.state()["version"] == gpusim.STATE_VERSION and sim.state()["gpus"][0]["ecc_aggregate"] == 1
    assert sim.query("power.limit", "0") == [["500.00"]]


# --- dmesg ---------------------------------------------------------------------------------------------


def test_dmesg_prints_this_boots_kernel_lines_as_raw_dmesg_does(sim):
    sim.configure(("h100-80gb-hbm3", 2))
    sim.gpusim("reboot")
    bus = sim.bus(1)
    sim.gpusim("fault", "1", "off-bus")
    done = sim.dmesg()
    assert done.returncode == 0 and done.stderr == ""
    out = lines(done.stdout)
    assert all(RAW_DMESG_LINE.fullmatch(line) for line in out)
    assert out[0].endswith("] NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  "
                           "(dvs-builder@U22-I3-AF03-29-4)  Wed Feb 18 05:37:09 UTC 2026")
    assert [line[15:] for line in out[1:]] == [
        f"NVRM: Xid (PCI:{bus[4:-2].lower()}): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
        f"NVRM: GPU {bus[4:].lower()}: GPU has fallen off the bus."]
    uptimes = [float(line[1:13]) for line in out]
    assert 4 <= uptimes[0] < 10 and uptimes == sorted(uptimes)  # the driver loads a few seconds into the boot
    assert [line[15:] for line in out] == sim.log()  # the same messages as kern.log's
    sim.gpusim("fault", "0", "gone")
    assert sim.ring_messages()[-2:] == [
        f"NVRM: The NVIDIA GPU {sim.state()['gpus'][0]['bus_id'][4:].lower()} (PCI ID: 10de:2330) installed in "
        "this system has fallen off the bus and is not responding to commands.",
        "NVRM: The NVIDIA probe routine failed for 1 device(s)."]


def test_dmesg_ctime_is_boot_time_plus_uptime(sim):
    sim.configure(("v100-sxm2-16gb", 1))
    sim.gpusim("init")
    sim.ok("-pm", "1")  # the deprecation line, now
    raw, ctime = lines(sim.dmesg().stdout), lines(sim.dmesg("-T").stdout)
    assert len(raw) == len(ctime) == 2 and all(CTIME_DMESG_LINE.fullmatch(line) for line in ctime)
    assert raw[0].endswith("] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  580.159.04  Wed Oct 29 23:15:11 UTC "
                           "2025")  # Volta: the proprietary modules
    boot = sim.state()["boot_time"]
    for plain, human in zip(raw, ctime):
        stamp, message = CTIME_DMESG_LINE.fullmatch(human).groups()
        assert message == plain[15:]
        when = time.mktime(time.strptime(stamp, "%a %b %d %H:%M:%S %Y"))
        assert abs(when - (boot + float(plain[1:13]))) <= 1
    assert abs(time.mktime(time.strptime(CTIME_DMESG_LINE.fullmatch(ctime[1]).group(1), "%a %b %d %H:%M:%S %Y"))
               - time.time()) <= 2  # the deprecation line: just now
    assert sim.dmesg("--ctime").stdout == sim.dmesg("-kT").stdout
    assert lines(sim.dmesg("-t").stdout) == [line[15:] for line in raw]
    assert sim.dmesg("--kernel").stdout == sim.dmesg("-P").stdout == "\n".join(raw) + "\n"


def test_a_reboot_empties_the_ring_buffer_while_kern_log_keeps_every_boot(sim):
    sim.configure(("rtx-4090", 1))
    sim.gpusim("reboot")
    sim.gpusim("fault", "0", "off-bus")
    assert len(sim.ring_messages()) == 3
    sim.gpusim("reboot")
    ring = sim.ring_messages()
    assert len(ring) == 1 and ring[0].startswith("NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  580.159.04")
    log = sim.log()
    assert [line.startswith("NVRM: loading") for line in log] == [True, False, False, True]
    sim.gpusim("init")
    assert len(sim.ring_messages()) == 1 and len(sim.log()) == 5


def test_dmesg_needs_root(sim):
    sim.configure(("h100-80gb-hbm3", 1))
    sim.gpusim("reboot")
    done = sim.dmesg(uid=1000)
    assert (done.stdout, done.stderr, done.returncode) == (
        "", "dmesg: read kernel buffer failed: Operation not permitted\n", 1)
    assert sim.dmesg("-T", uid=1000).returncode == 1
    assert sim.dmesg("-V", uid=1000).stdout.startswith("dmesg from util-linux ")


@pytest.mark.parametrize("args, message", [
    (["--frobnicate"], "dmesg: unrecognized option '--frobnicate'"),
    (["-z"], "dmesg: invalid option -- 'z'"),
    (["-Tz"], "dmesg: invalid option -- 'z'"),
    (["--ctime=yes"], "dmesg: option '--ctime' doesn't allow an argument"),
    (["now"], "dmesg: bad usage"),
])
def test_dmesg_refuses_what_util_linux_refuses(sim, args, message):
    done = sim.dmesg(*args)
    assert (done.stdout, done.stderr, done.returncode) == (
        "", f"{message}\nTry 'dmesg --help' for more information.\n", 1)


def test_dmesg_options_not_simulated_say_so(sim):
    done = sim.dmesg("-w")
    assert done.returncode == 255 and done.stderr == "gpusim: dmesg -w is not simulated\n"


def test_dmesg_shows_only_the_kernels_lines_and_without_a_ring_nothing(sim):
    sim.configure(("rtx-3090", 1))
    assert sim.dmesg().stdout == ""  # never booted: an empty buffer
    assert sim.run("nvidia-persistenced").returncode == 0  # logs to syslog (kern.log here), not to the kernel
    sim.stop_daemon()
    assert "Started" in sim.kmsg.read_text() and sim.dmesg().stdout == ""


def test_the_ring_goes_beside_a_moved_kernel_log(sim):
    """Callers that move NVIDIA_SIM_KMSG but know nothing of NVIDIA_SIM_DMESG keep the ring out of /run."""
    sim.configure(("h100-80gb-hbm3", 1))
    env = {k: v for k, v in sim.env.items() if k != "NVIDIA_SIM_DMESG"}
    subprocess.run([*FAST_GPUSIM, "fault", "0", "pcie-errors"], env=env, check=True, timeout=30)
    assert not sim.ring.exists() and len(Path(f"{sim.kmsg}.ring").read_text().splitlines()) == 4
    done = subprocess.run([*FAST_GPUSIM, "dmesg"], env=env, capture_output=True, text=True, timeout=30)
    assert done.stdout == Path(f"{sim.kmsg}.ring").read_text()


# --- concurrency, installation, state ---------------------------------------------------------------


def test_parallel_setters_do_not_lose_updates(sim):
    sim.configure(("v100-sxm2-16gb", 8))
    persist(sim)
    env = dict(sim.env, NVIDIA_SIM_UID="0")
    procs = [subprocess.Popen([*FAST_GPUSIM, "nvidia-smi", "-i", str(k), "-pl", str(160 + 10 * k)],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for k in range(8)]
    assert all(p.wait(timeout=30) == 0 for p in procs)
    assert sim.column("power.limit") == [f"{160 + 10 * k:.2f}" for k in range(8)]
    assert len(sim.state()["gpus"]) == 8  # still valid JSON, nothing half-written
    assert not list(sim.root.glob(".state-*"))


def test_install_links_the_programs(sim, tmp_path):
    sim.configure(("rtx-3090", 1))
    bin_dir = tmp_path / "bin"
    assert sim.run("install", str(bin_dir)).returncode == 0
    assert str(GPUSIM.parent) in (bin_dir / "nvidia-smi").read_text()
    done = subprocess.run([str(bin_dir / "nvidia-smi"), "-L"], env=sim.env, capture_output=True, text=True)
    assert done.stdout.startswith("GPU 0: NVIDIA GeForce RTX 3090 (UUID: GPU-")
    done = subprocess.run([str(bin_dir / "nvidia-persistenced"), "--help"], env=sim.env, capture_output=True, text=True)
    assert "The NVIDIA Persistence Daemon." in done.stdout
    sim.gpusim("fault", "0", "pcie-errors")
    done = subprocess.run([str(bin_dir / "dmesg")], env=sim.env, capture_output=True, text=True)
    assert done.returncode == 0 and "AER: Corrected error received" in done.stdout


def test_show_dumps_the_state_and_config_changes_start_afresh(sim):
    sim.configure(("rtx-3090", 1))
    persist(sim)
    shown = json.loads(sim.run("show").stdout)
    assert shown["gpus"][0]["legacy_pm"] is True and shown["driver_version"] == "580.159.04"
    sim.configure(("rtx-3090", 2))  # other hardware: a new state
    assert sim.column("persistence_mode") == ["Disabled", "Disabled"]


def test_init_installs_a_config_and_forgets_settings(sim, tmp_path):
    sim.configure(("rtx-3090", 1))
    persist(sim)
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"gpus": [{"model": "h100-80gb-hbm3", "count": 2}]}))
    assert sim.run("init", "--config", str(other)).returncode == 0
    assert sim.query("name,persistence_mode") == [["NVIDIA H100 80GB HBM3", "Disabled"]] * 2


def test_per_gpu_overrides_and_their_errors(sim):
    (sim.root / "config.json").write_text(json.dumps({"gpus": [
        {"model": "rtx-4090", "count": 2, "bus_id": ["00000000:01:00.0", "00000000:25:00.0"],
         "uuid": ["GPU-11111111-2222-3333-4444-555555555555", "GPU-66666666-7777-8888-9999-000000000000"]}]}))
    assert sim.query("pci.bus_id,uuid") == [["00000000:01:00.0", "GPU-11111111-2222-3333-4444-555555555555"],
                                           ["00000000:25:00.0", "GPU-66666666-7777-8888-9999-000000000000"]]
    (sim.root / "config.json").write_text(json.dumps({"gpus": [{"model": "rtx-4090", "count": 2, "vbios": "x"}]}))
    assert sim.smi("-L").returncode == 255
    (sim.root / "config.json").write_text(json.dumps({"gpus": [{"model": "a100"}]}))
    assert "unknown GPU" in sim.smi("-L").stderr


# --- message shapes against public real outputs ---------------------------------------------------------


def shapes(text: str) -> list:
    """Lines with bus ids and numbers masked, duplicates dropped (one line per GPU in multi-GPU outputs)."""
    masked = [re.sub(r"\d+(\.\d+)?", "N", re.sub(r"[0-9A-F]{4,8}:[0-9A-F]{2}:[0-9A-F]{2}\.\d", "BUS", line))
              for line in lines(text)]
    return list(dict.fromkeys(masked))


@pytest.mark.parametrize("real, model, args", [
    ("setter-errors/rtx3070-pl-out-of-range.txt", "rtx-3090", ["-pl", "10"]),
    ("setter-errors/gtx1070-6gpu-ac-not-supported.txt", "rtx-3090", ["-ac", "3505,1455"]),
    ("setter-errors/p100-4gpu-ac-invalid-combination.txt", "v100-sxm2-16gb", ["-ac", "715,111"]),
    ("setter-errors/p100-4gpu-ac-set-ok.txt", "v100-sxm2-16gb", ["-ac", "877,1005"]),
    ("setter-errors/p100-4gpu-pm-already-enabled.txt", "v100-sxm2-16gb", ["-pm", "1"]),
])
def test_setter_messages_have_the_real_shape(sim, real_output, real, model, args):
    sim.configure((model, 2))
    persist(sim)
    assert shapes(sim.smi(*args).stdout) == shapes(real_output(real))

