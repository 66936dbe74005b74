"""gres.conf and slurm.conf for a node whose GPU is in MIG mode (slurm/mig_gres.py through conf.py and the
templates): one gres per MIG device, typed by its profile, with MultipleFiles= from the real mig-minors table
(Slurm's gpu_nvml.c grants /dev/nvidiaG and the two nvidia-caps files of each MIG device), or counted for
AutoDetect; and the refusals where the node's MIG devices cannot be named."""

from __future__ import annotations

import textwrap

import pytest
from paths import TEMPLATES
from realdata import REAL

from builders.checks import checked_node, verdict
from builders.mig import h200_mig, mig_facts
from builders.slurmnodes import head_facts, v100_node
from provision.capabilities.gpu import mig_minors
from provision.capabilities.gpu.mig_model import ComputeInstance, GpuInstance, MigFacts, Placement
from provision.capabilities.host import HostFacts
from provision.capabilities.slurm import conf as slurm
from provision.capabilities.slurm.checks_mig import check_slurm_offers_the_nodes_mig_slices
from provision.capabilities.slurm.facts import SlurmNodeState, parse_slurm_node
from provision.capabilities.slurm.mig_gres import layout_counts, offered_counts, slice_type
from provision.capabilities.system.files import render
from provision.inventory.load import load_inventory

CLUSTER = """
all:
  vars:
    provision_slurm: {controller: head, cluster_name: basement%s}
  children:
    control:
      hosts:
        head: {ansible_host: 10.0.0.1}
    gpu:
      hosts:
        gpu-1: {ansible_host: 10.0.0.11}
"""


def real_minors() -> dict[str, int]:
    text = (REAL / "h200-recovery" / "mig-minors.txt").read_text()
    return mig_minors.parse_minors(text[text.index("config 1\n"):])


def mig_node(mig: MigFacts | None, *, mode: bool = True) -> HostFacts:
    """A 4-GPU node whose GPU0 is an H200 in MIG mode (mode) with these MIG facts; GPUs 1-3 whole."""
    facts = v100_node("gpu-1")
    facts.nvidia.gpus[0].name = "NVIDIA H200"
    facts.nvidia.gpus[0].mig_mode = mode
    facts.mig = mig
    return facts


def two_slices() -> MigFacts:
    facts = mig_facts(h200_mig(["3g.71gb", "3g.71gb"]))
    facts.minors = real_minors()
    return facts


def context(tmp_path, node: HostFacts, extra: str = "") -> dict | list:
    path = tmp_path / "inventory.yaml"
    path.write_text(textwrap.dedent(CLUSTER % extra))
    inv = load_inventory(path)
    return slurm.slurm_context(inv.hosts["head"], inv.hosts.values(), {"head": head_facts(), "gpu-1": node})


def gres_lines(ctx: dict) -> list[str]:
    return render(TEMPLATES, "gres.conf.j2", ctx).splitlines()


def test_each_mig_device_is_a_gres_with_the_gpu_and_its_two_caps_files(tmp_path):
    ctx = context(tmp_path, mig_node(two_slices()))
    lines = gres_lines(ctx)
    assert [line for line in lines if line.startswith("NodeName=")] == [
        "NodeName=gpu-1 Name=gpu Type=3g.71gb MultipleFiles=/dev/nvidia0,/dev/nvidia-caps/nvidia-cap12,"
        "/dev/nvidia-caps/nvidia-cap13 Cores=0-19",
        "NodeName=gpu-1 Name=gpu Type=3g.71gb MultipleFiles=/dev/nvidia0,/dev/nvidia-caps/nvidia-cap21,"
        "/dev/nvidia-caps/nvidia-cap22 Cores=0-19",
        "NodeName=gpu-1 Name=gpu Type=v100 File=/dev/nvidia1 Cores=0-19",
        *[f"NodeName=gpu-1 Name=gpu Type=v100 File=/dev/nvidia{i} Cores=20-39" for i in (2, 3)]]
    assert any("MIG devices" in line and "mig-minors" in line for line in lines if line.startswith("#"))
    assert ctx["nodes"][0]["gres"] == "gpu:3g.71gb:2,gpu:v100:3"  # slurm.conf's Gres= counts them by type
    conf = render(TEMPLATES, "slurm.conf.j2", ctx)
    assert " Gres=gpu:3g.71gb:2,gpu:v100:3 " in conf


def test_autodetect_counts_the_mig_devices_by_the_name_nvml_gives_them(tmp_path):
    ctx = context(tmp_path, mig_node(two_slices()), ", gres_autodetect: nvml")
    lines = gres_lines(ctx)
    assert [line for line in lines if not line.startswith("#")] == [
        "AutoDetect=nvml",
        "NodeName=gpu-1 Name=gpu Type=3g.71gb Count=2",
        "NodeName=gpu-1 Name=gpu Type=v100 Count=3"]
    assert any("AutoDetect=nvml finds them" in line for line in lines)


def test_a_split_gpu_instance_is_typed_by_its_compute_instances():
    gi = GpuInstance("3g.71gb", 9, 1, Placement(0, 4))
    ci = ComputeInstance(1, "1c.3g.71gb", 0, 2, Placement(2, 1))
    assert slice_type(gi, ci, autodetect=False) == "1c.3g.71gb"
    assert slice_type(gi, ci, autodetect=True) == "3g.71gb"  # NVML names it by its GPU instance
    media = GpuInstance("1g.18gb+me", 20, 7, Placement(0, 1))
    assert slice_type(media, ComputeInstance(7, "1g.18gb", 0, 0, None), autodetect=True) == "1g.18gb"


@pytest.mark.parametrize("mig, said", [
    (None, "GPU0 is in MIG mode and its MIG instances could not be read (not read)"),
    (mig_facts(h200_mig([])), "GPU0 is in MIG mode with no MIG device"),
    (mig_facts(h200_mig(["3g.71gb"], compute=False)), "GPU0 is in MIG mode with no MIG device"),
    (mig_facts(h200_mig(["3g.71gb"])), "its GPU instance 1 / compute instance 0 is not in "
                                       "/proc/driver/nvidia-caps/mig-minors"),
])
def test_a_mig_gpu_whose_devices_cannot_be_named_is_refused(tmp_path, mig, said):
    problems = context(tmp_path, mig_node(mig))
    assert isinstance(problems, list) and any(said in p for p in problems), problems


def test_a_gpu_with_mig_off_stays_one_gres_whatever_its_profiles(tmp_path):
    ctx = context(tmp_path, mig_node(mig_facts(h200_mig([])), mode=False))
    assert ctx["nodes"][0]["gres"] == "gpu:h200:1,gpu:v100:3"
    assert "NodeName=gpu-1 Name=gpu Type=h200 File=/dev/nvidia0 Cores=0-19" in gres_lines(ctx)


# --- verify: the gres slurmctld holds are the node's MIG devices ---------------------------------------------


def test_scontrol_gres_reads_by_type_as_real_nodes_print_it():
    # real `scontrol show node` Gres= values (a published a100 node, "(S:0-1)" its sockets; (null) without gres)
    assert offered_counts("gpu:a100:8(S:0-1)") == {"a100": 8}
    assert offered_counts("gpu:3g.40gb:2(S:0),gpu:v100:1(S:1)") == {"3g.40gb": 2, "v100": 1}
    assert offered_counts("gpu:8") == {"": 8}
    assert parse_slurm_node("NodeName=gpu-1 Arch=x86_64 Gres=(null) State=IDLE Partitions=gpu").gres == ""
    assert parse_slurm_node("NodeName=cn6 State=IDLE Gres=gpu:a100:8(S:0-1) RealMemory=515000").gres == \
        "gpu:a100:8(S:0-1)"


def slurm_node(gres: str) -> HostFacts:
    facts = mig_node(two_slices())
    facts.slurm_node = SlurmNodeState(name="gpu-1", states=("IDLE",), gres=gres)
    return facts


SLURM = {"provision_slurm": {"controller": "head"}}


def test_a_node_offering_its_mig_devices_passes():
    assert layout_counts(mig_node(two_slices()), autodetect=False) == {"3g.71gb": 2}
    assert verdict(check_slurm_offers_the_nodes_mig_slices,
                   checked_node(slurm_node("gpu:3g.71gb:2(S:0),gpu:v100:3(S:0-1)"), "gpu-1", **SLURM)) is None


def test_a_node_offering_its_whole_gpu_is_one_finding_with_the_apply_of_slurms_files():
    failed = verdict(check_slurm_offers_the_nodes_mig_slices,
                     checked_node(slurm_node("gpu:h200:1(S:0),gpu:v100:3(S:0-1)"), "gpu-1", **SLURM))
    assert failed.expected == "the node's MIG devices as gres (gpu:3g.71gb:2)"
    assert failed.found == "slurmctld holds gpu:h200:1(S:0),gpu:v100:3(S:0-1)"
    assert failed.fix.startswith("provision apply basement.yaml --tags slurm")
    assert failed.findings[0].remedy == "apply"  # Slurm's files drifted from the layout: apply converges them


def test_no_gpu_in_mig_mode_or_no_answer_is_not_this_checks_business():
    whole = slurm_node("gpu:h200:1")
    whole.nvidia.gpus[0].mig_mode = False
    assert verdict(check_slurm_offers_the_nodes_mig_slices, checked_node(whole, "gpu-1", **SLURM)) == \
        "skip: no GPU in MIG mode"
    silent = slurm_node("")
    silent.slurm_node = SlurmNodeState(error="slurm_load_node error: Unable to contact slurm controller")
    assert verdict(check_slurm_offers_the_nodes_mig_slices, checked_node(silent, "gpu-1", **SLURM)).startswith("skip:")
