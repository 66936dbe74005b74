"""`provision facts` shows each MIG-capable GPU's mode and its GPU instances, a mode pending, and nothing for a host
without MIG."""

from __future__ import annotations

from builders.facts import facts
from builders.gpus import gpu
from builders.mig import h200_gpu, h200_mig, mig_facts
from provision.capabilities.gpu import mig_shown
from provision.capabilities.gpu.mig_model import MigFacts


def texts(host_facts):
    return ["".join(text for text, _ in line.parts) for line in mig_shown.lines(host_facts)]


def test_mode_and_instances():
    assert texts(facts(gpus=[h200_gpu()], mig=mig_facts(h200_mig(["3g.71gb", "3g.71gb"])))) == [
        "mig: GPU0 mode Enabled: 3g.71gb at 0:4, 3g.71gb at 4:4"]


def test_a_pending_mode_and_an_instance_without_compute():
    assert texts(facts(gpus=[h200_gpu(mode=False, pending=True)], mig=mig_facts(h200_mig()))) == [
        "mig: GPU0 mode Disabled, Enabled pending a GPU reset or reboot"]
    assert texts(facts(gpus=[h200_gpu()], mig=mig_facts(h200_mig(["7g.141gb"], compute=False)))) == [
        "mig: GPU0 mode Enabled: 7g.141gb at 0:8 (without its default compute instance)"]


def test_nothing_without_mig():
    assert texts(facts(gpus=[gpu(0)])) == [] and texts(facts(gpus=[gpu(0)], mig=MigFacts())) == []
    assert texts(facts(gpus=[gpu(0)], mig=MigFacts(notes=["mig-profiles: exit 2"]))) == ["mig: mig-profiles: exit 2"]
