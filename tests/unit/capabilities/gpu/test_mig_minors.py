"""The driver's mig-minors table (gpu/mig_minors.py), held to a real H200's (tests/fixtures/real/h200-recovery:
`cat /proc/driver/nvidia-caps/mig-minors` under driver 580, MIG off: the table lists every possible instance)."""

from __future__ import annotations

from realdata import REAL, REAL_H200_MODES, capture

from builders.mig import h200_gpu
from provision.capabilities.gpu import mig_facts, mig_minors
from provision.capabilities.host import HostFacts
from provision.core.facts import Section

MINORS = REAL / "h200-recovery" / "mig-minors.txt"


def real_table() -> str:
    """The file's text: the capture after its `ls -la` of /proc/driver/nvidia-caps."""
    text = MINORS.read_text()
    return text[text.index("config 1\n"):]


def test_the_real_table_reads_as_names_and_minors():
    minors = mig_minors.parse_minors(real_table())
    assert minors["config"] == 1 and minors["monitor"] == 2
    assert minors[mig_minors.gpu_instance_cap(0, 0)] == 3
    assert minors[mig_minors.compute_instance_cap(0, 1, 0)] == 13
    assert minors[mig_minors.gpu_instance_cap(1, 0)] == 138
    assert minors[mig_minors.compute_instance_cap(31, 14, 7)] == 4322
    assert len(minors) == 2 + 32 * 15 * 9  # 32 GPU minors, 15 GPU instances each, 8 compute instances each


def test_words_that_are_no_table_line_are_left_out():
    assert mig_minors.parse_minors("cat: /proc/driver/nvidia-caps/mig-minors: No such file or directory\n") == {}


def test_a_capability_is_a_device_file_under_dev_nvidia_caps():
    assert mig_minors.cap_device(13) == "/dev/nvidia-caps/nvidia-cap13"


def test_the_batch_section_fills_the_mig_facts_minors():
    facts = HostFacts()
    facts.nvidia.gpus = [h200_gpu()]
    profiles, rc = capture("mig-lgip.txt", REAL_H200_MODES)
    mig_facts.parse({mig_facts.PROFILES: Section(rc, profiles), mig_facts.MINORS: Section(0, real_table())}, facts)
    assert facts.mig is not None and facts.mig.minors[mig_minors.compute_instance_cap(0, 2, 0)] == 22
    mig_facts.parse({mig_facts.PROFILES: Section(rc, profiles)}, facts)  # no instances: the section is not asked
    assert facts.mig.minors == {}
