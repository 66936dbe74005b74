"""A MIG layout against the real H200's profiles and placements: what fits is placed, what does not is refused
naming the GPU, what is wrong and the profiles it has."""

from __future__ import annotations

import pytest

from builders.mig import h200_gpu, h200_mig
from provision.capabilities.gpu.mig_fit import cgi_argument, fit
from provision.capabilities.gpu.mig_model import MigGpu, Placement
from provision.capabilities.gpu.tuning import Refused

H200 = h200_mig()


@pytest.mark.parametrize("layout, tuples", [
    (["3g.71gb", "3g.71gb"], "3g.71gb:0,3g.71gb:4"),
    (["1g.18gb"] * 7, ",".join(f"1g.18gb:{start}" for start in range(7))),
    (["7g.141gb"], "7g.141gb:0"),
    (["1g.18gb", "4g.71gb", "2g.35gb"], "4g.71gb:0,2g.35gb:4,1g.18gb:6"),  # the largest placed first, so the small one cannot block it
    ([], ""),
])
def test_a_layout_that_fits_is_placed(layout, tuples):
    placed = fit(h200_gpu(), H200, layout)
    assert sorted(p.name for p, _ in placed) == sorted(layout)
    assert cgi_argument(placed) == tuples


def test_a_profile_the_gpu_lacks_names_the_ones_it_has():
    with pytest.raises(Refused) as refused:
        fit(h200_gpu(), H200, ["3g.40gb", "3g.71gb"])
    said = str(refused.value)
    assert said.startswith("GPU0 (NVIDIA H200): provision_gpu.mig ['3g.40gb', '3g.71gb']: it has no GPU instance "
                           "profile 3g.40gb; its profiles: 1g.18gb (1 slice, at most 7), 1g.18gb+me (1 slice, at most 1)")
    assert "3g.71gb (4 slices, at most 2)" in said and "7g.141gb (8 slices, at most 1)" in said


def test_more_than_the_profile_allows():
    with pytest.raises(Refused, match=r"2 x 1g.18gb\+me, but it takes at most 1"):
        fit(h200_gpu(), H200, ["1g.18gb+me", "1g.18gb+me"])


def test_a_layout_that_does_not_fit_the_slices():
    # Two 4-slice instances fit (0:4, 4:4), but a 4g.71gb has only {0}:4: with a 3g.71gb at 0 the other must take 4.
    fit(h200_gpu(), H200, ["4g.71gb", "3g.71gb"])
    with pytest.raises(Refused, match="does not fit its memory slices"):
        fit(h200_gpu(), H200, ["4g.71gb", "3g.71gb", "1g.18gb"])
    with pytest.raises(Refused, match="does not fit"):
        fit(h200_gpu(), H200, ["3g.71gb", "3g.71gb", "1g.18gb"])


def test_a_gpu_without_mig():
    for mig in (None, MigGpu()):
        with pytest.raises(Refused, match="lists no MIG profile .* does not support MIG"):
            fit(h200_gpu(), mig, ["1g.18gb"])


def test_placements_overlap_only_where_they_share_a_slice():
    assert Placement(0, 4).overlaps(Placement(3, 1)) and not Placement(0, 4).overlaps(Placement(4, 4))
