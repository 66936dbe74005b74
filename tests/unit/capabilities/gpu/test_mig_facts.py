"""The MIG sections of the batch: read for MIG-capable GPUs only, parsed into HostFacts.mig, a listing's error a
note and "No MIG-enabled/supported devices found." a state."""

from __future__ import annotations

import subprocess

from realdata import REAL_H200_MODES, capture

from builders.mig import h200_gpu
from provision.capabilities.gpu import mig_facts
from provision.capabilities.gpu.mig_model import Placement
from provision.capabilities.host import HostFacts
from provision.core.facts import Section, build_script, split_sections

UUID = h200_gpu().uuid
A100_LGI = """\
|   0  MIG 3g.40gb          9        2          4:4     |
+-------------------------------------------------------+
|   0  MIG 4g.40gb          5        1          0:4     |
"""
LCI = """\
|   0      2       MIG 3g.40gb          2         0          0:4     |
|   0      1       MIG 4g.40gb          3         0          0:4     |
"""


def parsed(**outputs: tuple[int, str]) -> HostFacts:
    facts = HostFacts()
    facts.nvidia.gpus = [h200_gpu()]
    mig_facts.parse({name.replace("_", "-"): Section(rc, text) for name, (rc, text) in outputs.items()}, facts)
    return facts


def real(name: str) -> tuple[int, str]:
    text, rc = capture(name, REAL_H200_MODES)
    return rc, text


def test_the_real_h200_with_mig_mode_off():
    facts = parsed(mig_profiles=real("mig-lgip.txt"), mig_placements=real("mig-lgipp.txt"),
                   mig_instances=real("mig-lgi.txt"))
    assert facts.mig is not None and list(facts.mig.gpus) == [0] and facts.mig.instances_read
    gpu = facts.mig.gpus[0]
    assert gpu.profile("7g.141gb") is not None and gpu.placements[9] == [Placement(0, 4), Placement(4, 4)]
    assert gpu.gpu_instances == [] and facts.mig.notes == []


def test_instances_their_compute_instances_and_processes():
    facts = parsed(mig_profiles=real("mig-lgip.txt"), mig_instances=(0, A100_LGI), mig_compute=(0, LCI),
                   mig_processes=(0, f"{UUID}, 4242, python\nGPU-other, 1, x\n"))
    gpu = facts.mig.gpus[0]
    assert gpu.layout() == ["3g.40gb", "4g.40gb"] and gpu.without_default_compute() == []
    assert gpu.processes == ["4242 python"]


def test_a_gpu_instance_without_its_compute_instance():
    facts = parsed(mig_profiles=real("mig-lgip.txt"), mig_instances=(0, A100_LGI), mig_compute=(0, LCI.splitlines()[0]))
    assert [gi.id for gi in facts.mig.gpus[0].without_default_compute()] == [1]


def test_mig_on_without_instances_is_read():
    # A real A30's words (published with the driver's ": Not Found"), and the simulator's.
    for said in ("No GPU instances found: Not Found", "No GPU instances found."):
        facts = parsed(mig_profiles=real("mig-lgip.txt"), mig_instances=(0, said + "\n"))
        assert facts.mig.instances_read and facts.mig.gpus[0].gpu_instances == [] and facts.mig.notes == []
    unread = parsed(mig_profiles=real("mig-lgip.txt"), mig_instances=(9, "NVIDIA-SMI has failed\n"))
    assert not unread.mig.instances_read and unread.mig.notes == ["mig-instances: NVIDIA-SMI has failed"]


def test_no_mig_support_is_a_state_not_a_note():
    facts = parsed(mig_profiles=(6, "No MIG-supported devices found.\n"), mig_placements=(0, ""), mig_instances=(0, ""))
    assert facts.mig is not None and facts.mig.gpus == {} and facts.mig.notes == []


def test_an_error_is_a_note():
    said = "Failed to initialize NVML: Driver/library version mismatch"
    facts = parsed(mig_profiles=(18, said))
    assert facts.mig.gpus == {} and facts.mig.notes == [f"mig-profiles: {said}"]


def test_not_read_leaves_none():
    assert parsed().mig is None


def fake_smi(tmp_path, lgip: str) -> dict[str, str]:
    """An nvidia-smi that prints the H200's captures for -lgip/-lgipp/-lgi and logs every call."""
    log = tmp_path / "calls"
    smi = tmp_path / "nvidia-smi"
    smi.write_text(f"""#!/bin/sh
echo "$*" >> {log}
case "$*" in
  "mig -lgip") cat {lgip} ;;
  "mig -lgipp") cat {REAL_H200_MODES / "mig-lgipp.txt"} ;;
  "mig -lgi") echo "No MIG-enabled devices found." ;;
  *) echo "unexpected: $*"; exit 2 ;;
esac
""")
    smi.chmod(0o755)
    return {"PATH": f"{tmp_path}:/usr/bin:/bin", "LOG": str(log)}


def run_sections(env: dict[str, str]) -> dict[str, Section]:
    script = build_script("T", {s.name: s for s in mig_facts.SECTIONS})
    out = subprocess.run(["sh", "-c", script], capture_output=True, text=True, env=env, check=True).stdout
    return split_sections("T", out)


def test_the_batch_asks_a_gpu_without_mig_once(tmp_path):
    plain = tmp_path / "plain.txt"
    plain.write_text("No MIG-supported devices found.\n")
    env = fake_smi(tmp_path, str(plain))
    sections = run_sections(env)
    assert open(env["LOG"]).read().splitlines() == ["mig -lgip"]
    assert all(sections[name].output == "" for name in mig_facts.SECTION_NAMES[1:])


def test_the_batch_lists_a_mig_capable_gpu(tmp_path):
    env = fake_smi(tmp_path, str(REAL_H200_MODES / "mig-lgip.txt"))
    sections = run_sections(env)
    # The MIG mode is off: -lgi lists no instance, so neither -lci nor the processes are asked.
    assert open(env["LOG"]).read().splitlines() == ["mig -lgip", "mig -lgipp", "mig -lgi"]
    assert "GPU instance profiles" in sections[mig_facts.PROFILES].output
