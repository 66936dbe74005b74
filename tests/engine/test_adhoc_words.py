"""Ad-hoc commands word their errors in their own flags, once per host with the GPUs listed, and print values
as the user would type them (issue 9). This machine with simulated GPUs (simnode.py); nothing here changes a GPU."""

from __future__ import annotations

import json
import re

import pytest
from builders.gpus import gpu
from simnode import SimNode, needs_root

from provision.capabilities.gpu.adhoc import as_typed, gpu_list, yaml_words
from provision.capabilities.gpu.model import GpuFacts

V100_FIX = {"persistence": True, "power_limit": 200, "clocks": {"mem": 877, "sm": 1005}}


def problem_lines(output: str) -> list[str]:
    return [line.strip() for line in output.splitlines() if line.startswith("  ")]


def warnings(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("Warning: ")]


def no_python_reprs(text: str) -> None:
    assert "{'" not in text and "['" not in text and not re.search(r"\(\d+, \d+\)", text), text


@pytest.fixture
def rtx3090_node(tmp_path, monkeypatch):
    return SimNode(tmp_path, monkeypatch, [("rtx-3090", 1)], daemon=False)


@pytest.fixture
def rtx4090_node(tmp_path, monkeypatch):
    return SimNode(tmp_path, monkeypatch, [("rtx-4090", 2)], daemon=False)


@pytest.fixture
def h100_node(tmp_path, monkeypatch):
    return SimNode(tmp_path, monkeypatch, [("h100-80gb-hbm3", 2)], daemon=False)


# --- errors: once per host, the GPUs listed, the command's flags named ---------------------------------

@needs_root()
def test_an_unsupported_pair_is_one_problem_per_host_in_the_commands_flags(v100_node):
    before = v100_node.query("clocks.applications.graphics")
    result = v100_node.provision("clocks", "--mem", "877", "--sm", "1001")
    assert result.exit_code == 2, result.output
    assert "1 problem(s) found; no host was touched" in result.output
    [line] = problem_lines(result.output)
    assert line.startswith("command line: host localhost: provision clocks --mem 877 --sm 1001: "
                           "GPU0-3 (Tesla V100-SXM2-16GB): not a supported (memory,graphics) pair; nearest: 877,1005 ")
    assert line.endswith("(hint: add --nearest, or see `provision clocks --list`)")
    for inventory_word in ("provision_gpu.clocks", "nearest: true", "<local>", "mem 877, sm 1001"):
        assert inventory_word not in line
    assert v100_node.query("clocks.applications.graphics") == before


@needs_root()
def test_with_an_inventory_the_command_line_is_the_culprit_and_only_the_chosen_gpus_are_named(v100_node):
    inventory = v100_node.inventory(V100_FIX)
    result = v100_node.provision("clocks", "--mem", "877", "--sm", "1001", "-i", inventory, "--gpu", "0,2", "--check")
    assert result.exit_code == 2, result.output
    [line] = problem_lines(result.output)
    assert line.startswith("command line: host node1: provision clocks --mem 877 --sm 1001: GPU0, GPU2 (Tesla ")
    assert inventory not in result.output and "provision_gpu.clocks" not in result.output
    hinted = v100_node.provision("clocks", "--mem", "877", "--sm", "1001", "--nearest", "-i", inventory,
                                 "--gpu", "0,2", "--check")
    assert hinted.exit_code == 8, hinted.output  # what the hint says to add works


@needs_root()
def test_a_power_limit_out_of_range_is_one_problem_in_watts(v100_node):
    result = v100_node.provision("power", "--watts", "400", "--check")
    assert result.exit_code == 2, result.output
    assert problem_lines(result.output) == [
        "command line: host localhost: provision power --watts 400: GPU0-3 (Tesla V100-SXM2-16GB): 400 W is outside "
        "the range 150..300 W (default 300 W)"]


@needs_root()
def test_geforce_refuses_application_clocks_and_suggests_the_locked_command(rtx3090_node):
    result = rtx3090_node.provision("clocks", "--mem", "9751", "--sm", "1500")
    assert result.exit_code == 2, result.output
    [line] = problem_lines(result.output)
    assert line == ("command line: host localhost: provision clocks --mem 9751 --sm 1500: GPU0 (NVIDIA GeForce RTX "
                    "3090): takes no application clocks (hint: use `provision clocks --locked --sm 210,1500`)")
    assert "locked_clocks" not in result.output and "provision_gpu.clocks" not in result.output
    suggested = re.search(r"use `provision (.*?)`", line).group(1).split()
    assert rtx3090_node.provision(*suggested, "--check").exit_code == 8  # the suggestion is a command that works


@needs_root()
def test_two_geforce_cards_are_one_problem_naming_both(rtx4090_node):
    result = rtx4090_node.provision("clocks", "--mem", "10501", "--sm", "1005", "--check")
    assert result.exit_code == 2, result.output
    assert problem_lines(result.output) == [
        "command line: host localhost: provision clocks --mem 10501 --sm 1005: GPU0, GPU1 (NVIDIA GeForce RTX 4090): "
        "takes no application clocks (hint: use `provision clocks --locked --sm 210,1005`)"]
    locked = rtx4090_node.provision("clocks", "--locked", "--sm", "100,9000", "--check")
    assert problem_lines(locked.output) == [
        "command line: host localhost: provision clocks --locked --sm 100,9000: GPU0, GPU1 (NVIDIA GeForce RTX 4090): "
        "outside the range 210..3105 MHz"]


@needs_root()
def test_hopper_memory_lock_suggests_one_supported_value_and_keeps_the_other_flags(h100_node):
    result = h100_node.provision("clocks", "--locked", "--sm", "1000,1500", "--mem", "5000", "--check")
    assert result.exit_code == 2, result.output
    [line] = problem_lines(result.output)
    assert line.startswith("command line: host localhost: provision clocks --locked --sm 1000,1500 --mem 5000: "
                           "GPU0, GPU1 (NVIDIA H100 80GB HBM3): Hopper locks memory at the next driver load (-lmcd)")
    assert line.endswith("(hint: use `provision clocks --locked --sm 1000,1500 --mem 2619`)")
    no_python_reprs(line)


@needs_root()
def test_apply_keeps_its_inventory_wording(v100_node):
    inventory = v100_node.inventory({"clocks": {"mem": 877, "sm": 1001}})
    result = v100_node.apply(inventory)
    assert result.exit_code == 2, result.output
    lines = problem_lines(result.output)
    assert lines and all(line.startswith(f"{inventory}: host node1: gpu-clocks: GPU") for line in lines)
    assert all("provision_gpu.clocks mem 877, sm 1001 is not a supported" in line for line in lines)


# --- warnings: values as typed ---------------------------------------------------------------------

@needs_root()
def test_the_inventory_differs_warning_prints_values_as_typed_once_per_host(v100_node):
    inventory = v100_node.inventory(V100_FIX)
    result = v100_node.provision("clocks", "--mem", "877", "--sm", "1312", "-i", inventory, "--check")
    assert result.exit_code == 8, result.output
    assert warnings(result.output) == [
        "Warning: node1 GPU0-3: the inventory says provision_gpu.clocks {mem: 877, sm: 1005} (`provision clocks --mem 877 "
        "--sm 1005`); the next `provision apply` sets that back"]
    no_python_reprs(result.output)
    snapped = v100_node.provision("clocks", "--mem", "877", "--sm", "1001", "--nearest", "-i", inventory, "--check")
    assert snapped.exit_code == 8 and warnings(snapped.output) == []  # 877,1005 too: what the inventory says

    power = v100_node.provision("power", "--watts", "250", "-i", inventory, "--gpu", "1", "--check")
    assert warnings(power.output) == [
        "Warning: node1 GPU1: the inventory says provision_gpu.power_limit 200 (`provision power --watts 200`); the next "
        "`provision apply` sets that back"]

    reset = v100_node.provision("clocks", "--reset", "-i", inventory, "--gpu", "0,1", "--check", "--json")
    said = json.loads(reset.stdout)["warnings"]
    assert said == [
        "node1 GPU0, GPU1: the inventory says provision_gpu.clocks {mem: 877, sm: 1005} (`provision clocks --mem 877 "
        "--sm 1005`); the next `provision apply` sets that back",
        "node1 GPU0, GPU1: the inventory does not set provision_gpu.locked_clocks; the next `provision apply` removes it from "
        "the boot file (it stays until reboot)"]


@needs_root()
def test_locked_ranges_are_quoted_as_yaml_and_as_flags(rtx4090_node):
    inventory = rtx4090_node.inventory({"locked_clocks": {"sm": [210, 2520]}})
    result = rtx4090_node.provision("clocks", "--locked", "--sm", "1500", "-i", inventory, "--gpu", "1", "--check")
    assert result.exit_code == 8, result.output
    assert warnings(result.output) == [
        "Warning: node1 GPU1: the inventory says provision_gpu.locked_clocks {sm: [210, 2520]} (`provision clocks --locked "
        "--sm 210,2520`); the next `provision apply` sets that back"]
    no_python_reprs(result.output)


# --- the words themselves (no GPU needed) ----------------------------------------------------------

def v100s(*indexes: int) -> list[GpuFacts]:
    return [gpu(i, "V100") for i in indexes]


def test_gpu_lists_shorten_runs_of_three_or_more():
    assert gpu_list(v100s(0)) == "GPU0"
    assert gpu_list(v100s(0, 2)) == "GPU0, GPU2"
    assert gpu_list(v100s(0, 1)) == "GPU0, GPU1"
    assert gpu_list(v100s(3, 0, 1, 2)) == "GPU0-3"
    assert gpu_list(v100s(0, 1, 2, 5, 6, 7, 8)) == "GPU0-2, GPU5-8"


def test_changes_read_as_the_command_that_makes_them():
    assert as_typed({"clocks": {"mem": 877, "sm": 1005, "nearest": False}}) == "provision clocks --mem 877 --sm 1005"
    assert as_typed({"clocks": {"mem": 877, "sm": 1001, "nearest": True}}) == \
        "provision clocks --mem 877 --sm 1001 --nearest"
    assert as_typed({"locked_clocks": {"sm": (210, 1695), "mem": [9751, 9751]}}) == \
        "provision clocks --locked --sm 210,1695 --mem 9751"
    assert as_typed({"clocks": "default", "locked_clocks": "default"}) == "provision clocks --reset"
    assert as_typed({"power_limit": 200.0}) == "provision power --watts 200"
    assert as_typed({"power_limit": 187.5}) == "provision power --watts 187.5"
    assert as_typed({"power_limit": "default"}) == "provision power --watts default"
    assert as_typed({"persistence": False}) == "provision persistence off"


def test_settings_read_as_yaml_flow():
    assert yaml_words({"mem": 877, "sm": 1005}) == "{mem: 877, sm: 1005}"
    assert yaml_words({"mem": 877, "sm": 1005, "nearest": False}) == "{mem: 877, sm: 1005}"
    assert yaml_words({"sm": (210, 2520)}) == "{sm: [210, 2520]}"
    assert yaml_words(200.0) == "200" and yaml_words(True) == "true" and yaml_words("default") == "default"


# --- a setter that does not set: its own words, said as what they mean --------------------------------

@needs_root()
def test_a_setter_refused_for_lack_of_privilege_says_so_and_what_to_do(v100_node, monkeypatch):
    monkeypatch.setenv("NVIDIA_SIM_UID", "1000")  # nvidia-smi as in a container without the host's privileges
    result = v100_node.apply(v100_node.inventory({"power_limit": 250}))  # its boot file under tmp_path, not /etc
    assert result.exit_code == 1, result.output
    said = " ".join(result.output.split())
    assert "nvidia-smi may not change this setting here: it needs root on the host itself" in said
    assert "(nvidia-smi: Failed to set power management limit for GPU 00000000:" in said  # its own line beside it
    assert v100_node.query("power.limit") == ["300.00"] * 4
