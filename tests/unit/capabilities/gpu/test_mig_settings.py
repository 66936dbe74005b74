"""The gpu block's mig as the inventory reads it: "disabled" or a list of profile names, per override too; a name
of the wrong form is refused with the file, the host and the key, and what to write."""

from __future__ import annotations

import pytest

from builders.hosts import host
from provision.capabilities.host import parse_host_settings


def test_a_layout_disabled_and_an_override():
    block = host(provision_gpu={"mig": "disabled", "overrides": [{"model": "H200", "mig": ["3g.71gb", "3g.71gb"]}]}
                 ).settings.gpu
    assert block.mig == "disabled"
    assert block.for_gpu(0, "GPU-1", "NVIDIA H200").mig == ["3g.71gb", "3g.71gb"]
    assert host(provision_gpu={"mig": ["1g.18gb+me", "1g.24gb+gfx", " 2g.35gb "]}).settings.gpu.mig == [
        "1g.18gb+me", "1g.24gb+gfx", "2g.35gb"]


@pytest.mark.parametrize("value, said", [
    (["MIG 3g.71gb"], "gpu.mig[0]: 'MIG 3g.71gb': write the profile name without nvidia-smi's \"MIG \" "
                      "(hint: write '3g.71gb')"),
    (["3g"], "gpu.mig[0]: '3g' is not a GPU instance profile name (hint: profile names as `nvidia-smi mig -lgip` "
             "lists them"),
    ("Disabled", "gpu.mig: got 'Disabled': input should be 'disabled'"),
    ([9], "gpu.mig[0]: got 9: input should be a valid string"),
])
def test_a_wrong_form_names_file_host_and_key(value, said):
    settings, problems = parse_host_settings({"gpu": {"mig": value}}, "inventory.yaml", "host gpu01")
    assert settings is None and [str(p) for p in problems][0].startswith(f"inventory.yaml: host gpu01: {said}")
