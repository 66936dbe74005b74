"""An HGX node in a lab spec (provision_custom.lab.board): the board's GPUs, in the node's simulator config, and a
board the simulator has not, or GPUs beside one, refused at `lab up` (exit 2)."""

from __future__ import annotations

import pytest
import yaml

from provision_lab.model import LabSpec, NodeSpec
from provision_lab.spec import like_spec
from provision_lab.system import LabError


def spec_of(tmp_path, lab: dict) -> NodeSpec:
    path = tmp_path / "inv.yaml"
    path.write_text(yaml.safe_dump({"all": {"hosts": {"hgx-1": {"provision_custom": {"lab": lab}}}}}))
    (node,) = like_spec(path).nodes
    return node


def test_a_board_brings_its_gpus(tmp_path):
    node = spec_of(tmp_path, {"board": "hgx-h100-8"})
    assert node.board == "hgx-h100-8" and node.gpus == [{"model": "h100-80gb-hbm3", "count": 8}]
    assert spec_of(tmp_path, {}).board is None


@pytest.mark.parametrize("lab", [{"board": "dgx-b200"}, {"board": "hgx-h100-8", "gpus": [{"model": "rtx-3090", "count": 1}]}])
def test_an_unknown_board_or_gpus_beside_one_is_refused(tmp_path, lab):
    with pytest.raises(LabError, match="board must be one of hgx-h100-8") as caught:
        spec_of(tmp_path, lab)
    assert caught.value.exit_code == 2


def test_the_layout_names_the_board_only_where_there_is_one():
    """A lab made before the key existed (its state has no board) is still the same lab."""
    plain, hgx = LabSpec([NodeSpec("lab-a", 1), NodeSpec("lab-b", 2, board="hgx-h100-8")], {}, "test").layout()
    assert "board" not in plain and hgx["board"] == "hgx-h100-8"
