"""facts --json holds any mapping of the facts keyed by pairs as nested mappings, whichever capability's facts
hold it: the command names none (the topology's (GPU, NIC) links are one such mapping)."""

from __future__ import annotations

import json
from dataclasses import asdict

from provision.capabilities.host import HostFacts
from provision.capabilities.topology.topo import Topology, TopologyFacts
from provision.commands.facts import facts_json


def test_a_mapping_keyed_by_pairs_is_nested_the_first_of_each_pair_outside():
    links = {("GPU0", "NIC0"): "PIX", ("NIC0", "GPU0"): "PIX", ("GPU0", "GPU1"): "NV12"}
    facts = HostFacts(topology=TopologyFacts(matrix=Topology(gpus=["GPU0", "GPU1"], nics={"NIC0": "mlx5_0"},
                                                             links=links)))
    data = facts_json(facts)
    assert data["topology"]["matrix"]["links"] == {"GPU0": {"NIC0": "PIX", "GPU1": "NV12"}, "NIC0": {"GPU0": "PIX"}}
    assert data["topology"]["matrix"]["nics"] == {"NIC0": "mlx5_0"}  # other mappings as they are
    json.dumps(data)  # JSON takes it whole


def test_facts_without_such_a_mapping_are_as_dataclasses_give_them():
    assert facts_json(HostFacts()) == asdict(HostFacts())
