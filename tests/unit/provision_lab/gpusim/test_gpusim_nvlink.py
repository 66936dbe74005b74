"""The GPU simulator's NVLink: `nvidia-smi nvlink -s` and `-e` in the real formats (gpu_models.md, "NVLink"),
per model, with -i, and the nvlink-down and nvlink-errors faults: what they show, what a reboot and clear do.
The simulator runs as a subprocess, as nvidia-smi does, its files under tmp_path (builders/simulator.py)."""

from __future__ import annotations

import json

import pytest

from provision.capabilities.gpu.nvlink import Link, parse_errors, parse_status, read
from provision_lab import gpusim

from builders.simulator import Sim, pycache, sim

__all__ = ["pycache", "sim"]  # the fixtures, used by name

NVML_ALL_INACTIVE = "NVML: Unable to retrieve NVLink information as all links are inActive"


@pytest.fixture
def v100(sim: Sim) -> Sim:
    """The basement's 4x V100 SXM2."""
    return sim.configure(("v100-sxm2-16gb", 4))


def test_a_v100_board_prints_six_links_of_25_781_gb_s_per_gpu_as_the_real_one(v100):
    uuids = v100.uuids()
    blocks = [f"GPU {i}: Tesla V100-SXM2-16GB (UUID: {uuid})\n" + "".join(f"\t Link {k}: 25.781 GB/s\n"
                                                                          for k in range(6))
              for i, uuid in enumerate(uuids)]
    assert v100.nvlink("-s") == v100.nvlink("--status") == "".join(blocks)
    assert v100.nvlink("-s", "-i", "2") == v100.nvlink("--status", "--id=2") == blocks[2]
    assert [(g.uuid, set(g.links.values())) for g in parse_status("".join(blocks))] == [
        (uuid, {Link("up", 25.781)}) for uuid in uuids]


def test_error_counters_are_three_a_link_then_a_blank_line(v100):
    uuid = v100.uuids()[1]
    out = v100.nvlink("-e", "-i", uuid)
    assert out.startswith(f"GPU 1: Tesla V100-SXM2-16GB (UUID: {uuid})\n\t Link 0: Replay Errors: 0\n"
                          "\t Link 0: Recovery Errors: 0\n\t Link 0: CRC Errors: 0\n\n\t Link 1: Replay Errors: 0\n")
    assert out.endswith("\t Link 5: CRC Errors: 0\n\n") and out.count("Errors: 0") == 18
    [gpu] = parse_errors(out)
    assert set(gpu.errors) == set(range(6)) and gpu.error_counts() == {}
    assert v100.nvlink("--errorcounters") == "".join(v100.nvlink("-e", "-i", str(i)) for i in range(4))


@pytest.mark.parametrize("models, links", [
    ([("rtx-3090", 2)], 0),  # its bridge connector: taken as unused
    ([("rtx-4090", 7)], 0),
    ([("h100-80gb-hbm3", 1)], 0),  # no peer: nothing, as the real capture (tests/fixtures/real/.../nvlink.txt)
    ([("h100-80gb-hbm3", 2), ("rtx-4090", 1)], 18),  # an HGX pair: 18 links each; the 4090 nothing
])
def test_only_gpus_bonded_to_a_peer_print_links(sim, models, links):
    sim.configure(*models)
    status = parse_status(sim.nvlink("-s"))
    assert [len(g.links) for g in status] == ([links] * 2 if links else [])
    assert all(link == Link("up", 26.562) for g in status for link in g.links.values())
    assert len(parse_errors(sim.nvlink("-e"))) == len(status)


def test_nvlink_down_shows_the_link_inactive_until_cleared_even_across_reboots(v100):
    v100.gpusim("fault", "1", "nvlink-down", "--link", "2")
    status = read(v100.nvlink("-s"), v100.nvlink("-e"))
    assert [[n for n, link in g.links.items() if not link.up] for g in status.gpus] == [[], [2], [], []]
    assert "\t Link 2: <inactive>\n" in v100.nvlink("-s", "-i", "1")
    assert set(status.gpus[1].errors) == {0, 1, 3, 4, 5}  # -e leaves an inactive link out
    v100.gpusim("reboot")  # a bad bridge is still bad
    assert "<inactive>" in v100.nvlink("-s", "-i", "1")
    v100.gpusim("fault", "1", "clear")
    assert "<inactive>" not in v100.nvlink("-s")


def test_every_link_down_is_nvml_s_line(v100):
    v100.gpusim("fault", "3", "nvlink-down")  # link 0 by default
    assert "\t Link 0: <inactive>\n" in v100.nvlink("-s", "-i", "3")
    for link in range(1, 6):
        v100.gpusim("fault", "3", "nvlink-down", "--link", str(link))
    [gpu] = parse_status(out := v100.nvlink("-s", "-i", "3"))
    assert out.splitlines()[1] == NVML_ALL_INACTIVE and gpu.all_inactive and gpu.links == {}


def test_nvlink_errors_count_on_the_link_until_a_reboot(v100):
    v100.gpusim("fault", "1", "nvlink-errors", "--link", "4")
    v100.gpusim("fault", "1", "nvlink-errors", "--link", "4")
    out = v100.nvlink("-e", "-i", "1")
    assert "\t Link 4: Replay Errors: 10\n\t Link 4: Recovery Errors: 2\n\t Link 4: CRC Errors: 10\n\n" in out
    assert [g.error_counts() for g in parse_errors(v100.nvlink("-e"))] == [
        {}, {4: {"Replay Errors": 10, "Recovery Errors": 2, "CRC Errors": 10}}, {}, {}]
    assert "<inactive>" not in v100.nvlink("-s")  # the link still runs
    v100.gpusim("reboot")  # the driver loads again: the counters start over
    assert all(not g.error_counts() for g in parse_errors(v100.nvlink("-e")))
    v100.gpusim("fault", "0", "nvlink-errors")
    v100.gpusim("fault", "0", "clear")
    assert all(not g.error_counts() for g in parse_errors(v100.nvlink("-e")))


def test_a_lost_gpu_is_an_error_line_and_exit_15(v100):
    v100.gpusim("fault", "1", "off-bus")
    done = v100.run("nvidia-smi", "nvlink", "-s")
    assert done.returncode == 15 and done.stdout.startswith("Unable to determine the device handle for GPU")
    assert [g.index for g in read(done.stdout, "", 15).gpus] == [0, 2, 3]


def test_nvlink_faults_are_refused_on_a_gpu_without_nvlink(sim):
    done = sim.configure(("rtx-4090", 1)).run("fault", "0", "nvlink-down")
    assert (done.returncode, done.stderr) == (255, "gpusim: GPU 0 (NVIDIA GeForce RTX 4090) has no NVLink\n")


def test_bad_nvlink_requests(v100):
    assert v100.run("fault", "0", "nvlink-down", "--link", "6").stderr == \
        "gpusim: --link 6: GPU 0 (Tesla V100-SXM2-16GB) has links 0..5\n"
    assert v100.run("fault", "0", "nvlink-errors", "--width", "8").returncode == 255
    assert v100.run("nvidia-smi", "nvlink", "-s", "-i", "7").stdout == "No devices were found\n"
    assert v100.run("nvidia-smi", "nvlink", "-gt", "d").returncode == gpusim.RC_SIM  # not simulated, said so


def test_a_state_file_from_before_nvlink_is_brought_up_to_date(v100):
    v100.gpusim("init")
    state = json.loads((v100.root / "state.json").read_text())
    state["version"] = 2
    for record in state["gpus"]:
        del record["nvlink_down"], record["nvlink_errors"]
    (v100.root / "state.json").write_text(json.dumps(state))
    v100.gpusim("fault", "2", "nvlink-down", "--link", "5")
    assert "\t Link 5: <inactive>\n" in v100.nvlink("-s", "-i", "2")
    assert json.loads((v100.root / "state.json").read_text())["version"] == gpusim.STATE_VERSION == 3
