"""The nvidia-smi parsers against verbatim captures from a real H100 (and public real outputs)."""

from realdata import capture, h100_query_output

from provision.capabilities.gpu import smi as gpu
from provision.capabilities.gpu.model import ClockPair


def test_query_gpu_matches_the_fields_we_ask_for_on_a_real_h100():
    gpus, driver = gpu.parse_query_gpu(h100_query_output())
    assert driver == "580.159.04"
    [h100] = gpus
    assert (h100.index, h100.name, h100.bus_id) == (0, "NVIDIA H100 80GB HBM3", "00000000:00:06.0")
    assert h100.uuid == "GPU-5afa2088-c32d-f982-1ae7-09bebe697bea"
    assert h100.persistence is True
    assert (h100.power_limit, h100.power_default, h100.power_min, h100.power_max) == (700.0, 700.0, 200.0, 700.0)
    assert (h100.app_clock_mem, h100.app_clock_sm) == (2619, 1980)
    assert (h100.pcie_gen_current, h100.pcie_gen_max, h100.pcie_width_current, h100.pcie_width_max) == (5, 5, 16, 16)
    # the modes: the H100's compute and MIG mode, the pending ones from the real H200 (h200-modes/q-modes.txt)
    assert (h100.ecc_enabled, h100.ecc_pending, h100.compute_mode) == (True, True, "default")
    assert (h100.mig_mode, h100.mig_pending) == (False, False)


def test_a_driver_without_the_mode_fields_leaves_them_none_and_says_so():
    """An older driver refuses a field it does not know; the batch asks again without it (query_gpu_snippet)."""
    modes = ("ecc.mode.pending", "compute_mode", "mig.mode.current", "mig.mode.pending")
    read = gpu.read_query_gpu(h100_query_output([f.name for f in gpu.QUERY_FIELDS if f.name not in modes]))
    [h100] = read.gpus
    assert (h100.ecc_pending, h100.compute_mode, h100.mig_mode, h100.mig_pending) == (None,) * 4
    assert h100.ecc_enabled is True
    assert read.notes == [f"not reported by this driver: {', '.join(modes)}"]


def test_query_gpu_reads_units_too_and_not_available_values_as_none():
    header = ", ".join((f.shown_as or [f.name])[0] for f in gpu.QUERY_FIELDS) + "\n"
    line = ("1, GPU-x, NVIDIA GeForce RTX 3090, 00000000:41:00.0, 8.6, 580.65.06, Disabled, [N/A], [N/A], "
            "[N/A], [N/A], [N/A], [N/A], [N/A], [N/A], [N/A], 210 MHz, 405 MHz, 2100 MHz, 9751 MHz, 4, 4, 16, 16, "
            "0x0000000000000088, [N/A], [N/A], Default, [N/A], [N/A], [N/A], [N/A], [N/A], [N/A], [N/A], [N/A], "
            "[N/A]\n")
    # GeForce: no ECC, no MIG (the modes as a real RTX 3090 reports them), no row remapper, no fabric, no recovery
    [g], _ = gpu.parse_query_gpu(header + line)
    assert g.persistence is False and g.power_limit is None and g.app_clock_sm is None
    assert (g.max_clock_sm, g.max_clock_mem, g.clock_sm, g.compute_cap) == (2100, 9751, 210, "8.6")
    assert g.clock_events_active == 0x88 and (g.ecc_enabled, g.ecc_uncorrected, g.remap_pending) == (None,) * 3
    assert (g.ecc_pending, g.mig_mode, g.mig_pending, g.compute_mode) == (None, None, None, "default")


def test_query_gpu_line_with_the_wrong_field_count_is_noted_and_the_gpus_still_read():
    read = gpu.read_query_gpu(h100_query_output() + "0, GPU-x, name\n")
    assert [g.uuid for g in read.gpus] == ["GPU-5afa2088-c32d-f982-1ae7-09bebe697bea"]
    assert read.notes == ["0, GPU-x, name"] and read.lost == []


def test_supported_clocks_csv_from_a_real_h100():
    text, code = capture("qsc-nh.txt")
    assert code == 0
    # The capture has no uuid column; prefix one as our command asks for it.
    ours = "".join(f"GPU-a, {line}\n" for line in text.splitlines())
    pairs = gpu.parse_supported_clocks_csv(ours)["GPU-a"]
    assert pairs[0] == ClockPair(2619, 1980) and pairs[-1] == ClockPair(1593, 345)
    assert {p.mem for p in pairs} == {2619, 1593}
    assert len(pairs) == 2 * len(range(345, 1981, 15))


def test_supported_clocks_q_from_a_real_h100_matches_the_csv():
    q = gpu.parse_supported_clocks_q(capture("supported-clocks.txt")[0])
    csv = gpu.parse_supported_clocks_csv(
        "".join(f"GPU-a, {line}\n" for line in capture("qsc-nh.txt")[0].splitlines()))
    assert q["00000000:00:06.0"] == csv["GPU-a"]


def test_supported_clocks_q_of_a_real_v100(real_output):
    pairs = next(iter(gpu.parse_supported_clocks_q(real_output("supported-clocks/v100-pcie-32gb-ttu-hpcc.txt")).values()))
    assert ClockPair(877, 1380) in pairs


def test_supported_clocks_na_on_geforce_gives_no_pairs(real_output):
    parsed = gpu.parse_supported_clocks_q(real_output("supported-clocks/gtx1070-6gpu-na.txt"))
    assert parsed and all(pairs == [] for pairs in parsed.values())


def test_supported_clocks_csv_skips_not_available_rows():
    assert gpu.parse_supported_clocks_csv("GPU-b, [N/A], [N/A]\n") == {"GPU-b": []}


def test_gpu_list_from_a_real_h100():
    assert gpu.parse_gpu_list(capture("list.txt")[0]) == [
        (0, "NVIDIA H100 80GB HBM3", "GPU-bd221f42-4e11-474d-a54c-52d3f3b14ae0")]
