"""provision.capabilities.topology.topo against real `nvidia-smi topo -m` outputs and the shapes they come in.

The real multi-GPU outputs are read from ../shared/real-outputs/topo (beside the repository, sources in
its INDEX.md) through the `real_output` fixture, never copied into the project; their tests skip when
that folder is absent. They are an 8x H100 node with 6 mlx5 NICs as nvidia-smi printed it (tabs), and
two outputs whose tabs were expanded to spaces (4x A10 with 2 NICs, 2x GTX 1080 Ti). The 1-GPU H100
output (ANSI-underlined header) is our own capture in tests/fixtures/real/h100-80gb-hbm3. The synthetic
cases are each one shape seen in published outputs of older drivers: device names in the header, SOC,
" X" at a line's end.
"""

from __future__ import annotations

import re

import pytest
from realdata import capture

from provision.capabilities.topology.topo import LEVELS, Topology, TopoParseError, level_of, parse_topo

DELLA = "topo/h100-8gpu-nv18-mlx5-della.txt"
A10 = "topo/a10-4gpu-sys-2nic-spaces.txt"
GTX1080TI = "topo/gtx1080ti-2gpu-phb-spaces.txt"


def gpus(n: int) -> list[str]:
    return [f"GPU{i}" for i in range(n)]


# --- real outputs ------------------------------------------------------------------------------


def test_della_h100_node_with_six_nics(real_output):
    topo = parse_topo(real_output(DELLA))
    assert topo.gpus == gpus(8)
    assert topo.nics == {f"NIC{k}": f"mlx5_{k}" for k in range(6)}
    assert all(topo.link(a, b) == "NV18" for a in topo.gpus for b in topo.gpus if a != b)
    assert [topo.link("GPU0", nic) for nic in topo.nics] == ["PIX", "PIX", "NODE", "NODE", "NODE", "NODE"]
    assert [topo.link("GPU4", nic) for nic in topo.nics] == ["NODE", "NODE", "NODE", "PIX", "PIX", "NODE"]
    assert [topo.link(nic, "NIC3") for nic in topo.nics] == ["NODE", "NODE", "NODE", "X", "PIX", "NODE"]
    assert (topo.link("NIC5", "GPU6"), topo.link("GPU6", "NIC5"), topo.link("GPU3", "NIC2")) == ("PIX",) * 3
    assert len(topo.links) == 14 * 13  # every ordered pair of 14 devices, none with itself
    # Its GPU rows carry one cell more than the header names: NUMA Affinity still reads 0 and 1.
    assert topo.numa_affinity == {gpu: "0" if i < 4 else "1" for i, gpu in enumerate(topo.gpus)}
    assert topo.cpu_affinity == {gpu: None if i < 4 else "1" for i, gpu in enumerate(topo.gpus)}


def test_della_nearest_nic_per_gpu(real_output):
    topo = parse_topo(real_output(DELLA))
    assert {gpu: topo.nearest_nic(gpu) for gpu in topo.gpus} == {
        "GPU0": ("mlx5_0", "PIX"),  # NIC0 and NIC1 both PIX: the first column wins
        "GPU1": ("mlx5_0", "NODE"),
        "GPU2": ("mlx5_0", "NODE"),
        "GPU3": ("mlx5_2", "PIX"),
        "GPU4": ("mlx5_3", "PIX"),
        "GPU5": ("mlx5_0", "NODE"),
        "GPU6": ("mlx5_5", "PIX"),
        "GPU7": ("mlx5_0", "NODE"),
    }
    assert topo.gpus_without_nic_within("PIX") == ["GPU1", "GPU2", "GPU5", "GPU7"]
    assert topo.gpus_without_nic_within("PXB") == ["GPU1", "GPU2", "GPU5", "GPU7"]
    assert topo.gpus_without_nic_within("NODE") == []
    assert topo.cross_socket_gpu_pairs() == []


def test_a10_node_where_everything_is_across_sockets(real_output):
    topo = parse_topo(real_output(A10))
    assert topo.gpus == gpus(4) and topo.nics == {"NIC0": "mlx5_0", "NIC1": "mlx5_1"}
    assert all(topo.link(a, b) == "SYS" for a in topo.gpus for b in topo.gpus if a != b)
    assert all(topo.link(g, n) == topo.link(n, g) == "SYS" for g in topo.gpus for n in topo.nics)
    assert topo.link("NIC0", "NIC1") == topo.link("NIC1", "NIC0") == "PIX"
    assert topo.cpu_affinity == dict.fromkeys(topo.gpus, "0-127")
    assert topo.numa_affinity == dict.fromkeys(topo.gpus, "0")
    assert topo.cross_socket_gpu_pairs() == [("GPU0", "GPU1"), ("GPU0", "GPU2"), ("GPU0", "GPU3"),
                                             ("GPU1", "GPU2"), ("GPU1", "GPU3"), ("GPU2", "GPU3")]
    assert [topo.nearest_nic(gpu) for gpu in topo.gpus] == [("mlx5_0", "SYS")] * 4
    assert topo.gpus_without_nic_within("NODE") == topo.gpus
    assert topo.gpus_without_nic_within("SYS") == []


def test_gtx1080ti_desktop_without_nics(real_output):
    topo = parse_topo(real_output(GTX1080TI))
    assert topo.gpus == ["GPU0", "GPU1"] and topo.nics == {}
    assert topo.links == {("GPU0", "GPU1"): "PHB", ("GPU1", "GPU0"): "PHB"}
    assert topo.cpu_affinity == {"GPU0": "0-11", "GPU1": "0-11"}
    assert topo.numa_affinity == {"GPU0": None, "GPU1": None}  # N/A, after the row's extra empty cell
    assert topo.nearest_nic("GPU0") is None and topo.cross_socket_gpu_pairs() == []
    assert topo.gpus_without_nic_within("SYS") == ["GPU0", "GPU1"]  # no NICs: every GPU, the caller decides


def test_one_gpu_h100_with_an_underlined_header():
    text, rc = capture("topo.txt")
    assert rc == 0 and "\x1b[4m" in text
    topo = parse_topo(text)
    assert topo == Topology(gpus=["GPU0"], cpu_affinity={"GPU0": "0-15"}, numa_affinity={"GPU0": "0"})
    assert topo.link("GPU0", "GPU0") == "X" and topo.link("GPU0", "GPU1") is None


# --- the shapes of the same output ----------------------------------------------------------------


def ansi_around_every_cell(text: str) -> str:
    return re.sub(r"[^\t\n]+", lambda cell: f"\x1b[1m{cell[0]}\x1b[0m", text)


@pytest.mark.parametrize("reshape", [
    lambda text: text.expandtabs(),  # as the A10 and GTX outputs came
    lambda text: text.expandtabs().replace("\n", "\r\n"),
    ansi_around_every_cell,
    lambda text: "$ nvidia-smi topo -m\n" + text,
], ids=["spaces", "spaces-crlf", "ansi", "command-line-above"])
def test_the_della_output_in_another_shape_reads_the_same(reshape, real_output):
    assert parse_topo(reshape(real_output(DELLA))) == parse_topo(real_output(DELLA))


def test_spaces_and_tabs_give_the_same_empty_cells_and_affinities():
    tabs = "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n" \
           "GPU0\t X \tSYS\t0-23,48-71\t0\t\tN/A\nGPU1\tSYS\t X \t\t1\t\tN/A\n"
    topo = parse_topo(tabs.expandtabs())
    assert topo == parse_topo(tabs)
    assert topo.cpu_affinity == {"GPU0": "0-23,48-71", "GPU1": None}
    assert topo.numa_affinity == {"GPU0": "0", "GPU1": "1"}
    assert topo.cross_socket_gpu_pairs() == [("GPU0", "GPU1")]


def test_one_gpu_with_two_space_gaps_as_a_terminal_copy_shows_it():
    topo = parse_topo("  GPU0  CPU Affinity  NUMA Affinity  GPU NUMA ID\nGPU0  X  0-15  0  N/A\n")
    assert topo == Topology(gpus=["GPU0"], cpu_affinity={"GPU0": "0-15"}, numa_affinity={"GPU0": "0"})


def test_an_unknown_cell_word_is_kept_and_counts_as_no_level():
    topo = parse_topo("\tGPU0\tGPU1\tNIC0\tCPU Affinity\n"
                      "GPU0\t X \tC2C\tNET\t0-7\nGPU1\tC2C\t X \tPIX\t8-15\nNIC0\tNET\tPIX\t X \n")
    assert topo.link("GPU0", "GPU1") == "C2C" and topo.link("NIC0", "GPU0") == "NET"
    assert level_of("C2C") is None
    assert topo.nearest_nic("GPU0") is None and topo.nearest_nic("GPU1") == ("NIC0", "PIX")  # no legend: label
    assert topo.gpus_without_nic_within("SYS") == ["GPU0"]
    assert topo.cross_socket_gpu_pairs() == []


def test_an_old_driver_names_nics_in_the_header_and_says_soc():
    # Drivers before 384: device names as columns, SOC for SYS, no NUMA columns, " X" ending the last row.
    topo = parse_topo(
        "\tGPU0\tGPU1\tGPU2\tGPU3\tmlx5_0\tmlx5_bond_0\tCPU Affinity\n"
        "GPU0\t X \tPIX\tSOC\tSOC\tPIX\tSOC\t0-7\n"
        "GPU1\tPIX\t X \tSOC\tSOC\tPIX\tSOC\t0-7\n"
        "GPU2\tSOC\tSOC\t X \tPHB\tSOC\tPXB\t8-15\n"
        "GPU3\tSOC\tSOC\tPHB\t X \tSOC\tPHB\t8-15\n"
        "mlx5_0\tPIX\tPIX\tSOC\tSOC\t X \tSOC\n"
        "mlx5_bond_0\tSOC\tSOC\tPXB\tPHB\tSOC\t X\n"
        "\nLegend:\n\n  X   = Self\n  SOC  = Connection traversing PCIe as well as the SMP link between CPU sockets\n")
    assert topo.gpus == gpus(4) and topo.nics == {"mlx5_0": "mlx5_0", "mlx5_bond_0": "mlx5_bond_0"}
    assert topo.link("mlx5_bond_0", "mlx5_bond_0") == "X" and topo.link("mlx5_0", "mlx5_bond_0") == "SOC"
    assert topo.cpu_affinity == {"GPU0": "0-7", "GPU1": "0-7", "GPU2": "8-15", "GPU3": "8-15"}
    assert topo.numa_affinity == dict.fromkeys(topo.gpus)  # no such column
    assert [topo.nearest_nic(gpu) for gpu in topo.gpus] == [
        ("mlx5_0", "PIX"), ("mlx5_0", "PIX"), ("mlx5_bond_0", "PXB"), ("mlx5_bond_0", "PHB")]
    assert topo.cross_socket_gpu_pairs() == [("GPU0", "GPU2"), ("GPU0", "GPU3"), ("GPU1", "GPU2"), ("GPU1", "GPU3")]
    assert topo.gpus_without_nic_within("PXB") == ["GPU3"]


def test_a_seven_letter_name_one_space_from_the_next_column_is_two_cells():
    # Expanded tabs leave one space after a 7-character cell: the next word is on a tab stop.
    header = "\tGPU0\tmlx5_10\tmlx5_11\tCPU Affinity\n".expandtabs()
    assert "mlx5_10 mlx5_11" in header
    topo = parse_topo(header + "GPU0\t X \tPIX\tSYS\t0-7\nmlx5_10\tPIX\t X \tSYS\nmlx5_11\tSYS\tSYS\t X\n".expandtabs())
    assert list(topo.nics) == ["mlx5_10", "mlx5_11"] and topo.cpu_affinity == {"GPU0": "0-7"}
    assert topo.nearest_nic("GPU0") == ("mlx5_10", "PIX")


def test_nvlink_bonds_of_any_width_are_nv_and_closer_than_pcie():
    topo = parse_topo("\tGPU0\tGPU1\tGPU2\tCPU Affinity\n"
                      "GPU0\t X \tNV12\tNV4\t0-7\nGPU1\tNV12\t X \tSYS\t0-7\nGPU2\tNV4\tSYS\t X \t8-15\n")
    assert (topo.link("GPU1", "GPU0"), topo.link("GPU2", "GPU0")) == ("NV12", "NV4")
    assert level_of("NV12") == level_of("NV4") == "NV" and LEVELS.index("NV") < LEVELS.index("PIX")
    assert topo.cross_socket_gpu_pairs() == [("GPU1", "GPU2")]


def test_a_nic_row_without_affinity_cells_and_a_legend_naming_bonds():
    topo = parse_topo("\tGPU0\tNIC0\tCPU Affinity\tNUMA Affinity\n"
                      "GPU0\t X \tNODE\t0-31\t0\nNIC0\tNODE\t X \n\nNIC Legend:\n\n  NIC0: mlx5_bond_0\n")
    assert topo.nics == {"NIC0": "mlx5_bond_0"} and topo.nearest_nic("GPU0") == ("mlx5_bond_0", "NODE")
    assert topo.cpu_affinity == {"GPU0": "0-31"} and "NIC0" not in topo.numa_affinity


@pytest.mark.parametrize("text", [
    "", "\n\n", "No devices were found\n",
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n",
    "Legend:\n\n  X    = Self\n",
])
def test_output_without_a_matrix_is_a_parse_error(text):
    with pytest.raises(TopoParseError, match="no `nvidia-smi topo -m` matrix"):
        parse_topo(text)


def test_a_level_we_do_not_know_is_refused(real_output):
    with pytest.raises(ValueError, match="unknown topology level 'CLOSE'"):
        parse_topo(real_output(A10)).gpus_without_nic_within("CLOSE")
