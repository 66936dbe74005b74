"""A block that YAML's aliases give many hosts (issue 41, unbounded work from a small input): a 4 KB inventory can
hold a custom block of 700,000 values shared by 100 hosts. Each host's settings are keyed (to validate equal
settings once) by walking them; walked per host, that was 132 s. The walk now meets each object once."""

from __future__ import annotations

from provision.inventory.values import ValueKeys
from provision.inventory.load import load_inventory


def shared_block(hosts: int, levels: int) -> str:
    lines = ["all:", "  vars:", "    provision_custom:", "      l0: &l0 [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]"]
    lines += [f"      l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]" for i in range(1, levels)]
    lines += ["  hosts:"] + [f"    n{n}: {{ansible_host: 10.0.{n // 250}.{n % 250 + 1}}}" for n in range(hosts)]
    return "\n".join(lines) + "\n"


def test_a_block_shared_through_aliases_is_walked_once_not_once_per_host(tmp_path, monkeypatch):
    walked = []
    key = ValueKeys.key
    monkeypatch.setattr(ValueKeys, "key", lambda self, value: walked.append(1) or key(self, value))
    path = tmp_path / "inventory.yaml"
    path.write_text(shared_block(hosts=100, levels=4))  # 10,000 values in custom, and 100 hosts
    inv = load_inventory(str(path))
    assert len(inv.hosts) == 100 and len(inv.hosts["n99"].settings.custom["l3"]) == 10
    assert len(walked) < 2_000  # each host's blocks, and each shared object once: not 100 x 11,110


def test_equal_values_of_other_types_are_other_keys():
    keys = ValueKeys()
    values = [1, True, "1", 1.0, [1], {"a": 1}, {"a": True}, {1: "a"}, {"1": "a"}, [[1]], [[True]]]
    assert len({repr(keys.key(value)) for value in values}) == len(values)
    assert keys.key({"a": [1, 2]}) == keys.key({"a": [1, 2]}) and keys.key([{"b": 1}]) == keys.key([{"b": 1}])
