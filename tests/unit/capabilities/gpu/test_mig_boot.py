"""The boot file's mig= word (gpu/boot.py LINE_WORDS): the layout's profile tuples, pinned where the facts list the
GPU's placements, largest first where they do not; nothing for "disabled" or a layout the GPU refuses."""

from __future__ import annotations

from builders.facts import facts
from builders.hosts import host
from builders.mig import h200_gpu, h200_mig, mig_facts
from provision.capabilities.gpu import boot
from provision.capabilities.gpu.mig_boot import boot_words


def words(layout, mig=True):
    gpu = h200_gpu()
    settings = host(provision_gpu={"mig": layout}).settings.gpu
    return boot_words(gpu, facts(gpus=[gpu], mig=mig_facts(h200_mig()) if mig else None), settings)


def test_a_layout_is_pinned_where_the_placements_are_known():
    assert words(["1g.18gb", "3g.71gb"]) == ["mig=3g.71gb:0,1g.18gb:4"]


def test_largest_first_where_they_are_not():
    assert words(["1g.18gb", "1g.35gb", "3g.71gb"], mig=False) == ["mig=3g.71gb,1g.35gb,1g.18gb"]


def test_nothing_to_make():
    assert words("disabled") == [] and words([]) == [] and words(["3g.40gb"]) == []


def test_the_boot_file_carries_it():
    gpu = h200_gpu()
    text = boot.render(host(provision_gpu={"persistence": True, "mig": ["3g.71gb", "3g.71gb"]}),
                       facts(gpus=[gpu], mig=mig_facts(h200_mig())))
    assert f"gpu={gpu.uuid} index=0 persistence=on mig=3g.71gb:0,3g.71gb:4  #" in text
