"""NVLink: the parser of `nvidia-smi nvlink -s` and `-e` on short lines in the real formats (sources in
provision/capabilities/gpu/nvlink.py), the real H100 capture without NVLink, the batch's two sections, and the
two checks' verdicts on parsed facts."""

from __future__ import annotations

import os
import subprocess
from types import SimpleNamespace

import pytest
from builders.facts import facts
from builders.gpus import gpu
from builders.hosts import host
from realdata import capture

from provision.capabilities.gpu import checks_nvlink
from provision.capabilities.gpu import facts as gpu_facts
from provision.capabilities.gpu.model import GpuFacts
from provision.capabilities.gpu.nvlink import INACTIVE, Link, parse_errors, parse_status, read
from provision.core.facts import build_script, split_sections

from builders.checks import verdict

UUID0, UUID1 = "GPU-09101d09-2345-0823-9f93-c9f49b9aebac", "GPU-2f472f47-2093-5eb6-6eb1-a2cce2e0c5ee"
# The 4x V100's layout (tab, space), a link down as on Azure's V100, and the A6000's NVML line.
STATUS = f"""GPU 0: Tesla V100-SXM2-16GB (UUID: {UUID0})
\t Link 0: 25.781 GB/s
\t Link 1: <inactive>
GPU 1: Tesla V100-SXM2-16GB (UUID: {UUID1})
\t Link 0: 25.781 GB/s
\t Link 1: 25.781 GB/s
GPU 2: NVIDIA RTX A6000 (UUID: GPU-02c05ee3-bdb5-aac7-f9e8-a4c8f3f725b3)
NVML: Unable to retrieve NVLink information as all links are inActive
"""
# The A100's -e (driver 535.161.08): three counters a link, a blank line after each.
ERRORS = f"""GPU 1: Tesla V100-SXM2-16GB (UUID: {UUID1})
\t Link 0: Replay Errors: 0
\t Link 0: Recovery Errors: 0
\t Link 0: CRC Errors: 0

\t Link 1: Replay Errors: 5
\t Link 1: Recovery Errors: 1
\t Link 1: CRC Errors: 5

"""


def test_status_lines_give_each_link_a_speed_or_a_state():
    v100, other, a6000 = parse_status(STATUS)
    assert (v100.index, v100.name, v100.uuid) == (0, "Tesla V100-SXM2-16GB", UUID0)
    assert v100.links == {0: Link("up", 25.781), 1: Link(INACTIVE)} and not v100.links[1].up
    assert other.links[1].speed == 25.781
    assert (a6000.links, a6000.all_inactive) == ({}, True)


@pytest.mark.parametrize("text, links", [
    ("GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-fde0a018-ad1a-bbec-ccf6-50a9f64bd178)\n\t Link 11: 25 GB/s\n\n",
     {11: Link("up", 25.0)}),  # the A100's: no decimals, a blank line at the end
    ("GPU 0: Tesla V100-SXM2-32GB\n\t Link 5: 25.781 GB/s\n", {5: Link("up", 25.781)}),  # an older driver: no UUID
    ("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-abcdefab-cdef-abdc-abcd-abababababab)\n         Link 17: 26.562 GB/s\n",
     {17: Link("up", 26.562)}),  # tabs expanded by a copy
    ("GPU 0: Tesla V100-SXM2-16GB (UUID: GPU-x)\n\t Link 0: [N/A]\n\t Link 1: N/A\n",
     {0: Link("N/A"), 1: Link("N/A")}),  # a state, never a crash
])
def test_real_variants_of_the_status_lines(text, links):
    [gpu] = parse_status(text)
    assert gpu.links == links
    assert (gpu.uuid is None) == ("UUID" not in text)


def test_no_nvlink_is_no_gpu_and_no_link():
    output, rc = capture("nvlink.txt")  # the real H100 without NVLink: nothing, exit 0
    facts = read(output, "", rc)
    assert (facts.gpus, facts.message, rc) == ([], "", 0)


def test_what_nvidia_smi_says_when_it_cannot_answer_is_kept_and_a_lost_gpu_line_is_not_a_gpu():
    no_driver = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure ..."
    assert read(no_driver, "", 9).message == no_driver
    lost = f"Unable to determine the device handle for GPU0000:11:00.0: Unknown Error\n{STATUS}"
    assert [g.index for g in read(lost, "", 15).gpus] == [0, 1, 2]


def test_error_counters_per_link_by_their_own_names():
    [gpu] = parse_errors(ERRORS)
    assert gpu.errors == {0: {"Replay Errors": 0, "Recovery Errors": 0, "CRC Errors": 0},
                          1: {"Replay Errors": 5, "Recovery Errors": 1, "CRC Errors": 5}}
    assert gpu.error_counts() == {1: {"Replay Errors": 5, "Recovery Errors": 1, "CRC Errors": 5}}
    # other drivers' names: kept; only "... Errors" counts, and N/A is a state
    [other] = parse_errors("GPU 2: X (UUID: GPU-y)\n\t Link 0: CRC Flit Errors: N/A\n\t Link 0: Tx bytes: 99\n")
    assert other.errors == {0: {"CRC Flit Errors": None, "Tx bytes": 99}} and other.error_counts() == {}


def test_read_puts_the_counters_on_the_gpu_of_the_same_uuid():
    facts = read(STATUS, ERRORS)
    assert [bool(g.errors) for g in facts.gpus] == [False, True, False]
    assert facts.gpus[1].error_counts()[1]["CRC Errors"] == 5


# --- the batch: two sections, -e only where -s listed a link --------------------------------------------


def run_batch(tmp_path, status: str) -> tuple[dict, list[str]]:
    """The two NVLink sections run by sh with a fake nvidia-smi that prints `status` for -s: (sections, calls)."""
    calls, fake = tmp_path / "calls", tmp_path / "bin" / "nvidia-smi"
    fake.parent.mkdir(parents=True)
    (tmp_path / "status").write_text(status)
    fake.write_text(f'#!/bin/sh\necho "$*" >> {calls}\n[ "$2" = -s ] && cat {tmp_path / "status"} || echo counters\n')
    fake.chmod(0o755)
    out = subprocess.run(["/bin/sh", "-c", build_script("t0k", NVLINK_SECTIONS)], capture_output=True, text=True,
                         env=dict(os.environ, PATH=f"{fake.parent}:{os.environ['PATH']}")).stdout
    return split_sections("t0k", out), calls.read_text().splitlines() if calls.exists() else []


NVLINK_SECTIONS = {s.name: s for s in gpu_facts.READER.sections if s.name.startswith("nvlink")}


def test_the_sections_are_read_by_verify_alone():
    assert list(NVLINK_SECTIONS) == ["nvlink-status", "nvlink-errors"]
    assert all(s.read_by == {"verify"} and s.refresh_on == {"nvlink"} for s in NVLINK_SECTIONS.values())


def test_the_batch_reads_the_counters_only_where_there_are_links(tmp_path):
    sections, calls = run_batch(tmp_path / "none", "")
    assert calls == ["nvlink -s"] and sections["nvlink-errors"].output == ""
    sections, calls = run_batch(tmp_path / "v100", STATUS)
    assert calls == ["nvlink -s", "nvlink -e"]
    assert sections["nvlink-status"].output == STATUS.rstrip("\n") and sections["nvlink-errors"].output == "counters"


def test_without_nvidia_smi_the_sections_are_empty(tmp_path):
    out = subprocess.run(["/bin/sh", "-c", build_script("t0k", NVLINK_SECTIONS)], capture_output=True, text=True,
                         env=dict(os.environ, PATH=str(tmp_path))).stdout
    found = split_sections("t0k", out)
    assert [(found[name].rc, found[name].output) for name in NVLINK_SECTIONS] == [(0, ""), (0, "")]


# --- the checks ------------------------------------------------------------------------------------------


def v100(index: int) -> GpuFacts:
    """The V100s of the captures above, by the UUIDs nvidia-smi nvlink names them by."""
    return gpu(index, "V100", uuid=[UUID0, UUID1, "GPU-2", "GPU-3"][index], bus_id=f"00000000:{index + 1:X}1:00.0")


def node(status: str, errors: str = "", gpus: int = 2, gpu_block: bool = True):
    return SimpleNamespace(name="v100", inventory=host("v100", provision_gpu={} if gpu_block else None),
                           facts=facts(gpus=[v100(i) for i in range(gpus)], nvlink=read(status, errors)))


UP = "25.781 GB/s"


def v100s(*gpus: list[str]) -> str:
    """-s of V100s, one list of link words per GPU ("25.781 GB/s", "<inactive>"); [] is NVML's all-inactive line."""
    return "".join(f"GPU {i}: Tesla V100-SXM2-16GB (UUID: {[UUID0, UUID1][i]})\n"
                   + ("".join(f"\t Link {k}: {said}\n" for k, said in enumerate(links)) if links else
                      "NVML: Unable to retrieve NVLink information as all links are inActive\n")
                   for i, links in enumerate(gpus))


def test_links_up_at_speed_pass_and_a_link_down_or_slow_is_named_with_gpu_bus_id_and_link():
    up = checks_nvlink.check_nvlink_links_are_up_at_speed
    assert verdict(up, node(v100s([UP, UP], [UP, UP]))) is None
    failed = verdict(up, node(v100s(["<inactive>", "12.5 GB/s"], [UP, UP])))
    assert failed.found == "GPU0 00000000:11:00.0 link 0 inactive, GPU0 00000000:11:00.0 link 1 at 12.5 GB/s of 25.781"
    assert "reseat the NVLink bridge" in failed.fix


def test_a_gpu_whose_links_are_all_down_fails_only_beside_others_of_its_model_with_links():
    up = checks_nvlink.check_nvlink_links_are_up_at_speed
    assert verdict(up, node(v100s([UP], []))).found == "GPU1 00000000:21:00.0 every link inactive"
    with pytest.raises(pytest.skip.Exception, match="not applicable: no NVLink on these GPUs"):
        up(node(v100s([], [])))  # no bridge fitted: as a GPU without NVLink


def test_error_counters_fail_naming_gpu_bus_id_link_and_counts():
    errors = checks_nvlink.check_nvlink_has_no_errors
    status = v100s([UP, UP], [UP, UP])
    assert verdict(errors, node(status, ERRORS.split("\n\n")[0])) is None
    failed = verdict(errors, node(status, ERRORS))
    assert failed.found == "GPU1 00000000:21:00.0 link 1: Replay Errors 5, Recovery Errors 1, CRC Errors 5"
    assert "nvidia-smi nvlink -e" in failed.fix


@pytest.mark.parametrize("a_node, why", [
    (node(STATUS, gpu_block=False), "no gpu block"),
    (node(STATUS, gpus=0), "no GPU read"),
    (node("", gpus=2), "not applicable: no NVLink on these GPUs"),
])
def test_the_checks_skip_where_they_do_not_apply(a_node, why):
    for check in (checks_nvlink.check_nvlink_links_are_up_at_speed, checks_nvlink.check_nvlink_has_no_errors):
        with pytest.raises(pytest.skip.Exception, match=why):
            check(a_node)
