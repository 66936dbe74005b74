"""The nvidia-smi parsers against what real nvidia-smi prints when things are not fine.

Missing values of every spelling, a GPU fallen off the bus beside GPUs that still answer, an old
driver that refuses a field, -q output without a "Supported Clocks" section, and query CSV read by
column name. Data: the verbatim H100 captures in tests/fixtures/real, the public real outputs in
../shared/real-outputs (skipped where absent), and the GPU simulator run as nvidia-smi.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from realdata import REAL_H200_MODES, capture, h100_query_output, recovery_column

from builders.hosts import host
from provision.capabilities.registry import FACTS
from provision.core import facts as gather
from provision.capabilities.gpu import smi as parsers
from provision.capabilities.gpu.model import ClockPair
from provision.capabilities.host import HostFacts
from provision.capabilities.gpu import boot
from paths import GPUSIM

H100_UUID = "GPU-5afa2088-c32d-f982-1ae7-09bebe697bea"
# Real wording of a GPU nvidia-smi cannot reach, as published in NVIDIA/nvidia-container-toolkit#69
# (and, with other bus ids, NVIDIA/open-gpu-kernel-modules#387, meta-llama/llama-models#200).
DEVICE_HANDLE_ERROR = "Unable to determine the device handle for GPU0000:65:00.0: Unknown Error"
BAD_FIELD_OUTPUT, BAD_FIELD_RC = capture("bad-field.txt")  # 'Field "not.a.field" is not a valid field to query.'


def nvidia_facts(query_output: str, rc: int = 0):
    """NvidiaFacts as gather makes them from a query-gpu section."""
    return FACTS.parse({
        "nvidia-smi": gather.Section(0, "/usr/bin/nvidia-smi"),
        "query-gpu": gather.Section(rc, query_output),
    }).nvidia


def h100_with(cells: dict[str, str]) -> str:
    """The real H100 query output with some of its cells (field name -> cell) replaced."""
    header, row = h100_query_output().splitlines()
    names = [f.name for f in parsers.QUERY_FIELDS]
    values = parsers.split_csv_row(row)
    for name, cell in cells.items():
        values[names.index(name)] = cell
    return f"{header}\n{', '.join(values)}\n"


# --- missing values: None per field, never a host-wide failure ------------------------------


@pytest.mark.parametrize("missing", [
    "[N/A]", "N/A", "[Not Supported]", "Not Supported", "[Unknown Error]", "[Insufficient Permissions]",
    "[Requested functionality has been deprecated]", "",
])
def test_a_missing_power_limit_of_any_spelling_is_none_and_the_gpu_is_still_read(missing):
    facts = nvidia_facts(h100_with({"power.limit": missing, "power.max_limit": missing}))
    assert facts.state == "ok" and facts.notes == [] and facts.lost == []
    [h100] = facts.gpus
    assert (h100.power_limit, h100.power_max) == (None, None)
    assert (h100.power_min, h100.power_default, h100.app_clock_mem) == (200.0, 700.0, 2619)


def test_a_value_that_is_no_number_is_none_and_noted():
    facts = nvidia_facts(h100_with({"power.limit": "seven hundred", "persistence_mode": "Maybe"}))
    assert facts.state == "ok"
    [h100] = facts.gpus
    assert (h100.power_limit, h100.persistence, h100.power_default) == (None, None, 700.0)
    assert facts.notes == ["GPU0: cannot read persistence_mode 'Maybe', power.limit 'seven hundred'"]


def test_values_with_units_are_read_as_numbers():
    facts = nvidia_facts(h100_with({"power.limit": "350.00 W", "clocks.sm": "1755 MHz"}))
    assert (facts.gpus[0].power_limit, facts.gpus[0].clock_sm) == (350.0, 1755)


# --- a GPU that fell off the bus does not hide the others ------------------------------------


@pytest.mark.parametrize("where", ["before the header", "after the rows"])
def test_a_gpu_without_a_device_handle_is_lost_and_the_others_are_read(where):
    text = h100_query_output()
    text = f"{DEVICE_HANDLE_ERROR}\n{text}" if where == "before the header" else f"{text}{DEVICE_HANDLE_ERROR}\n"
    facts = nvidia_facts(text, rc=15)  # 15: "GPU fallen off the bus or inaccessible" (man page)
    assert facts.state == "ok"
    assert [(g.uuid, g.power_limit) for g in facts.gpus] == [(H100_UUID, 700.0)]
    [lost] = facts.lost
    assert (lost.bus_id, lost.message) == ("0000:65:00.0", DEVICE_HANDLE_ERROR)
    assert facts.notes == ["nvidia-smi --query-gpu exited 15"]


def test_a_row_of_gpu_is_lost_cells_is_a_lost_gpu_not_a_tunable_one():
    header, row = h100_query_output().splitlines()
    lost_row = ", ".join(["1"] + ["[GPU is lost]"] * 2 + ["00000000:41:00.0"]
                         + ["[GPU is lost]"] * (len(parsers.QUERY_FIELDS) - 4))
    facts = nvidia_facts(f"{header}\n{row}\n{lost_row}\n", rc=15)
    assert facts.state == "ok" and [g.index for g in facts.gpus] == [0]
    [lost] = facts.lost
    assert (lost.index, lost.bus_id, lost.uuid, lost.message) == (1, "00000000:41:00.0", None, "GPU is lost")
    assert str(lost) == "GPU1 00000000:41:00.0: GPU is lost"


def test_every_gpu_lost_is_an_error_in_nvidia_smis_words():
    facts = nvidia_facts(f"{DEVICE_HANDLE_ERROR}\n", rc=15)
    assert facts.state == "error" and facts.gpus == []
    assert facts.message == f"0000:65:00.0: {DEVICE_HANDLE_ERROR}"
    assert [lost.bus_id for lost in facts.lost] == ["0000:65:00.0"]


def test_the_boot_file_keeps_the_line_of_a_lost_gpu():
    facts = HostFacts(nvidia=nvidia_facts(f"{h100_query_output()}{DEVICE_HANDLE_ERROR}\n", rc=15))
    old = f"gpu={H100_UUID} index=0 power_limit=700\ngpu=GPU-0b5e7c1a-lost index=1 power_limit=300\n"
    text = boot.render(host(provision_gpu={"power_limit": 300}), facts, old)
    assert f"gpu={H100_UUID} index=0 power_limit=300  # model=" in text
    assert "gpu=GPU-0b5e7c1a-lost power_limit=300  # not seen at the last run: was_index=1\n" in text  # by UUID only


# --- --query-gpu read by column name -----------------------------------------------------------


def test_columns_are_read_by_name_whatever_their_order():
    header, row = (parsers.split_csv_row(line) for line in h100_query_output().splitlines())
    shuffled = f"{', '.join(reversed(header))}\n{', '.join(reversed(row))}\n"
    assert parsers.parse_query_gpu(shuffled) == parsers.parse_query_gpu(h100_query_output())
    [h100], _ = parsers.parse_query_gpu(shuffled)
    assert (h100.clock_sm, h100.clock_mem, h100.app_clock_sm) == (345, 2619, 1980)  # clocks.current.* headers


def test_the_real_header_names_every_field_we_ask_for():
    """qgpu.txt asked for clocks.sm and clocks.mem; nvidia-smi's header calls them clocks.current.*. qgpu2 asked
    for clocks_throttle_reasons.active; the header says clocks_event_reasons.active. remapped.txt and the H200's
    modes (the same driver) have the rest."""
    columns = [column for name in ("qgpu.txt", "qgpu2.txt", "remapped.txt")
               for column in parsers.read_query_csv(capture(name)[0]).columns]
    columns += parsers.read_query_csv(capture("q-modes.txt", REAL_H200_MODES)[0]).columns
    columns.append(recovery_column()[0])
    uncaptured = [f.name for f in parsers.QUERY_FIELDS if not f.header_in(columns)]
    assert uncaptured == ["compute_cap", "fabric.state", "fabric.status"]
    assert all(f'"{name}"' in capture("help-query-gpu.txt")[0] for name in uncaptured)  # this driver has them
    assert next(f for f in parsers.QUERY_FIELDS if f.attr == "clock_events_active").header_in(columns) == \
        "clocks_event_reasons.active"
    assert "clocks.sm" not in columns and "clocks.current.sm" in columns


def test_the_real_h100_reads_healthy():
    [h100] = nvidia_facts(h100_query_output()).gpus
    assert h100.clock_events_active == 0x1  # GPU idle, nothing else
    assert (h100.ecc_enabled, h100.ecc_uncorrected) == (True, 0)
    assert (h100.retired_pages_pending, h100.remap_pending, h100.remap_failure) == (None, False, False)


def test_a_header_renames_the_fields_it_was_asked_by_alias():
    [row] = parsers.read_query_csv(capture("qgpu2.txt")[0]).rows
    assert row["pci.bus_id"] == "00000000:00:06.0"  # asked as gpu_bus_id
    assert row["clocks_event_reasons.active"] == "0x0000000000000001"  # asked as clocks_throttle_reasons.active
    assert row["display_mode"] == "[Requested functionality has been deprecated]"
    assert row["fan.speed"] == "[N/A]"  # header "fan.speed [%]"


def test_real_query_csv_with_units_is_read_by_column_name(real_output):
    table = parsers.read_query_csv(real_output("query-csv/v100s-pcie-32gb-timeseries-header.txt"))
    assert table.columns == ["timestamp", "index", "name", "utilization.gpu", "utilization.memory",
                             "memory.total", "memory.used", "temperature.gpu"]
    assert len(table.rows) == 107 and table.other_lines == []
    first, busy = table.rows[0], table.rows[13]
    assert (first["index"], first["name"], first["memory.total"]) == ("0", "Tesla V100S-PCIE-32GB", "32768 MiB")
    assert (busy["timestamp"], busy["utilization.gpu"], busy["memory.used"]) == (
        "2025/06/13 00:28:05.202", "9 %", "364 MiB")


def test_real_query_csv_without_our_identity_columns_is_refused_not_shifted(real_output):
    text = real_output("query-csv/a10-lms-timestamp-pstate-memory.txt")
    assert parsers.read_query_csv(text).rows[0]["memory.free"] == "22494 MiB"
    with pytest.raises(parsers.ParseError, match="printed no index, uuid, name, pci.bus_id column$"):
        parsers.parse_query_gpu(text)


def test_a_refused_field_with_no_rows_is_an_error_in_nvidia_smis_words():
    assert BAD_FIELD_RC == 2
    facts = nvidia_facts(BAD_FIELD_OUTPUT, BAD_FIELD_RC)
    assert facts.state == "error" and facts.message == 'Field "not.a.field" is not a valid field to query.'


def test_an_old_driver_without_compute_cap_gives_none_for_it_and_says_so():
    fields = [f.name for f in parsers.QUERY_FIELDS if f.name != "compute_cap"]
    read = parsers.read_query_gpu(h100_query_output(fields))
    [h100] = read.gpus
    assert h100.compute_cap is None and h100.power_limit == 700.0 and read.driver_version == "580.159.04"
    assert read.notes == ["not reported by this driver: compute_cap"]


def test_the_query_asks_with_a_header_and_keeps_uuid_and_driver_version():
    assert parsers.QUERY_GPU_ARGV[-1] == "--format=csv,nounits"
    asked = parsers.QUERY_GPU_ARGV[1].removeprefix("--query-gpu=").split(",")
    assert asked == [f.name for f in parsers.QUERY_FIELDS] and {"uuid", "driver_version"} <= set(asked)


# --- -q -d SUPPORTED_CLOCKS ------------------------------------------------------------------


def test_full_q_of_a_real_h100_has_no_supported_clocks():
    assert parsers.parse_supported_clocks_q(capture("smi-q.txt")[0]) == {}


@pytest.mark.parametrize("name", ["rtx3090ti-rtx3090-4gpu-q-d-POWER.txt", "rtx4090-geforce-windows-wddm.txt",
                                  "v100-sxm2-32gb-traverse-gpu0.txt"])
def test_other_real_q_outputs_have_no_supported_clocks(real_output, name):
    text = real_output(f"smi-q-full/{name}")
    assert "GPU 0000" in text  # a GPU header was there to be misread
    assert parsers.parse_supported_clocks_q(text) == {}


def test_supported_clocks_q_of_a_real_h100():
    pairs = parsers.parse_supported_clocks_q(capture("supported-clocks.txt")[0])
    assert list(pairs) == ["00000000:00:06.0"]
    assert ClockPair(2619, 1980) in pairs["00000000:00:06.0"] and ClockPair(1593, 345) in pairs["00000000:00:06.0"]


def test_supported_clocks_q_of_a_real_a100(real_output):
    pairs = parsers.parse_supported_clocks_q(real_output("supported-clocks/a100-pcie-40gb-ttu-hpcc.txt"))
    assert list(pairs) == ["00000000:21:00.0"]
    a100 = pairs["00000000:21:00.0"]
    assert (a100[0], a100[-1], len(a100)) == (ClockPair(1215, 1410), ClockPair(1215, 210), 81)


def test_supported_clocks_na_on_six_real_geforce_cards(real_output):
    parsed = parsers.parse_supported_clocks_q(real_output("supported-clocks/gtx1070-6gpu-na.txt"))
    assert parsed == {bus: [] for bus in ["0000:01:00.0", "0000:02:00.0", "0000:04:00.0", "0000:05:00.0",
                                          "0000:07:00.0", "0000:08:00.0"]}


# --- the simulator as nvidia-smi, through the batch's snippet --------------------------------


@pytest.fixture
def sim(tmp_path):
    """Four simulated V100s; `sim.smi_path` holds their nvidia-smi, `sim.fault(...)` breaks one."""
    (tmp_path / "config.json").write_text(json.dumps({"driver_version": "580.159.04",
                                                      "gpus": [{"model": "v100-sxm2-16gb", "count": 4}]}))
    env = dict(os.environ, NVIDIA_SIM_CONFIG=str(tmp_path / "config.json"), NVIDIA_SIM_STATE=str(tmp_path / "state"),
               NVIDIA_SIM_RUNDIR=str(tmp_path / "run"), NVIDIA_SIM_KMSG=str(tmp_path / "kmsg"),
               PYTHONPYCACHEPREFIX=str(tmp_path / "pycache"))

    class Sim:
        smi_path = tmp_path / "bin"

        @staticmethod
        def gpusim(*args: str) -> None:
            subprocess.run([sys.executable, str(GPUSIM), *args], env=env, check=True, timeout=60)

        @staticmethod
        def query(path: str) -> gather.Section:
            """QUERY_GPU_SNIPPET run by sh as the batch runs it (stderr with stdout), nvidia-smi from `path`."""
            done = subprocess.run(["sh", "-c", f"exec 2>&1; {parsers.QUERY_GPU_SNIPPET}"], env=dict(env, PATH=path),
                                  capture_output=True, text=True, timeout=60)
            return gather.Section(done.returncode, done.stdout)

    Sim.gpusim("install", str(Sim.smi_path))
    return Sim


def test_simulated_gpus_are_read_through_the_snippet(sim):
    section = sim.query(f"{sim.smi_path}:/usr/bin:/bin")
    assert section.rc == 0 and section.output.startswith("index, uuid, name, pci.bus_id, compute_cap, ")
    facts = nvidia_facts(section.output, section.rc)
    assert facts.state == "ok" and facts.notes == [] and facts.driver_version == "580.159.04"
    assert [(g.index, g.name, g.compute_cap, g.power_max, g.default_app_clock_mem) for g in facts.gpus] == [
        (i, "Tesla V100-SXM2-16GB", "7.0", 300.0, 877) for i in range(4)]


def test_a_simulated_gpu_off_the_bus_leaves_the_others_readable(sim):
    before = nvidia_facts(sim.query(f"{sim.smi_path}:/usr/bin:/bin").output).gpus
    sim.gpusim("fault", "1", "off-bus")
    section = sim.query(f"{sim.smi_path}:/usr/bin:/bin")
    facts = nvidia_facts(section.output, section.rc)
    assert facts.state == "ok"
    assert [(g.uuid, g.bus_id) for g in facts.gpus] == [(g.uuid, g.bus_id) for g in before if g.index != 1]


def test_an_old_driver_refusing_compute_cap_is_asked_again_without_it(sim, tmp_path):
    section = sim.query(old_driver(tmp_path, sim, ["compute_cap"]))
    assert section.rc == 0 and "not a valid field" not in section.output
    facts = nvidia_facts(section.output, section.rc)
    assert facts.state == "ok" and facts.notes == ["not reported by this driver: compute_cap"]
    assert [(g.compute_cap, g.power_limit) for g in facts.gpus] == [(None, 300.0)] * 4


def old_driver(tmp_path, sim, refuses: list[str]) -> str:
    """A PATH whose nvidia-smi refuses `refuses` as the real driver refuses a field it does not know
    (bad-field.txt: the first unknown field named, no rows, exit 2), and is the simulator otherwise."""
    bin_dir = tmp_path / "old-driver"
    bin_dir.mkdir()
    cases = "".join(f"case \"$*\" in *{name},*|*{name}\\ *) printf 'Field \"{name}\" is not a valid field to query.\\n\\n';"
                    f" exit 2;; esac\n" for name in refuses)
    (bin_dir / "nvidia-smi").write_text(f"#!/bin/sh\n{cases}exec {sim.smi_path}/nvidia-smi \"$@\"\n")
    (bin_dir / "nvidia-smi").chmod(0o755)
    return f"{bin_dir}:/usr/bin:/bin"


def test_a_driver_refusing_several_fields_is_asked_again_without_each(sim, tmp_path):
    refused = ["compute_cap", "remapped_rows.pending", "remapped_rows.failure"]
    section = sim.query(old_driver(tmp_path, sim, refused))
    assert section.rc == 0 and "not a valid field" not in section.output
    facts = nvidia_facts(section.output, section.rc)
    assert facts.state == "ok" and facts.notes == [f"not reported by this driver: {', '.join(refused)}"]
    assert [(g.compute_cap, g.remap_pending, g.ecc_uncorrected) for g in facts.gpus] == [(None, None, 0)] * 4


def test_a_driver_before_mig_is_asked_again_without_the_mig_modes_and_the_other_modes_still_read(sim, tmp_path):
    """mig.mode.* came with MIG (drivers 450 on); ECC and compute mode are older: a driver without the first still
    reports the others, and the GPUs stay tunable."""
    refused = ["mig.mode.current", "mig.mode.pending"]
    section = sim.query(old_driver(tmp_path, sim, refused))
    assert section.rc == 0 and "not a valid field" not in section.output
    facts = nvidia_facts(section.output, section.rc)
    assert facts.state == "ok" and facts.notes == [f"not reported by this driver: {', '.join(refused)}"]
    assert [(g.mig_mode, g.ecc_enabled, g.ecc_pending, g.compute_mode) for g in facts.gpus] == [
        (None, True, True, "default")] * 4


def test_a_refusal_of_a_field_never_asked_ends_the_retries_with_nvidia_smis_words(sim, tmp_path):
    (tmp_path / "odd").mkdir()
    (tmp_path / "odd" / "nvidia-smi").write_text(
        "#!/bin/sh\nprintf 'Field \"made.up\" is not a valid field to query.\\n\\n'; exit 2\n")
    (tmp_path / "odd" / "nvidia-smi").chmod(0o755)
    section = sim.query(f"{tmp_path / 'odd'}:/usr/bin:/bin")
    assert section.rc == 2
    facts = nvidia_facts(section.output, section.rc)
    assert facts.state == "error" and facts.message == 'Field "made.up" is not a valid field to query.'


def test_a_driver_before_the_recovery_action_is_asked_again_without_it(sim):
    """gpu_recovery_action came with the 565 branch: the simulator's 550 refuses it as any unknown field."""
    sim.gpusim("set-driver", "550.90.07")
    section = sim.query(f"{sim.smi_path}:/usr/bin:/bin")
    assert section.rc == 0 and "not a valid field" not in section.output
    facts = nvidia_facts(section.output, section.rc)
    assert facts.state == "ok" and facts.notes == ["not reported by this driver: gpu_recovery_action"]
    assert [g.recovery_action for g in facts.gpus] == [None] * 4


def test_the_recovery_action_the_simulated_driver_asks_is_read_as_its_word(sim):
    sim.gpusim("fault", "2", "reset-required")
    facts = nvidia_facts(sim.query(f"{sim.smi_path}:/usr/bin:/bin").output)
    assert [g.recovery_action for g in facts.gpus] == ["none", "none", "reset", "none"]
