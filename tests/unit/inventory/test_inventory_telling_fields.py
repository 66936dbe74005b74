"""Which keys mark a mapping under a block's old name (gpu:, slurm:) as provision's rather than another role's: the
blocks' own declarations (core/settings.py Block telling_fields, generic_fields) decide, the inventory names none."""

from __future__ import annotations

import pytest

from provision.capabilities.host import BLOCKS
from provision.core.settings import Block, setting
from provision.inventory.validate import block_model, is_old_block, telling_fields


class RackSettings(Block):
    """A block a new capability might bring: one word it declares telling, two words it declares generic."""

    telling_fields = frozenset({"chassis"})
    generic_fields = frozenset({"site_name"})

    chassis: str | None = setting(None, "a chassis name")
    site_name: str | None = setting(None, "a site name")
    row_number: int | None = setting(None, "an integer")
    rack: str | None = setting(None, "a rack name")


def test_a_blocks_declarations_decide_which_of_its_fields_are_telling():
    assert telling_fields(RackSettings) == {"chassis", "row_number"}
    assert telling_fields(Block) == frozenset()


@pytest.mark.parametrize("model", [block_model(name) for name in BLOCKS if name != "custom"],
                         ids=lambda model: model.__name__)
def test_each_block_declares_only_its_own_fields_and_none_both_ways(model):
    """A field renamed or removed would otherwise leave a declaration that quietly no longer holds."""
    assert model.telling_fields <= set(model.model_fields), model.telling_fields - set(model.model_fields)
    assert model.generic_fields <= set(model.model_fields), model.generic_fields - set(model.model_fields)
    assert not model.telling_fields & model.generic_fields


def test_a_generic_field_alone_leaves_a_mapping_to_its_role_and_a_telling_one_makes_it_provisions():
    assert not is_old_block("slurm", {"cluster_name": "prod"})  # the slurm block declares it generic
    assert is_old_block("slurm", {"controller": "head-1"})  # one word, declared telling
    assert not is_old_block("nccl", {"conf_path": "/etc/nccl.conf"})
    assert is_old_block("gpu", {"persistence": True})
