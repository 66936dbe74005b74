"""NCCL's files end to end on the basement lab: the four RTX 3090 blades (ens803f0/ens803f1, NCCL_SOCKET_IFNAME
prefix ens803f) converge; a blade whose matched port is down, slow or missing fails with the port named and
nothing written there, while the other blades take the change; a re-run changes nothing.

On the `basement` lab (conftest.py), after test_tuning.py (file order: it makes the first apply); each test
leaves it converged and fault-free.
"""

from __future__ import annotations

import pytest
import yaml

pytestmark = pytest.mark.lab

BLADES = [f"lab-rtx3090-{k}" for k in range(1, 5)]
PULLED = BLADES[1]  # the blade a drill breaks
CONF, ENV = "/etc/nccl.conf", "/etc/provision/nccl.env"


def task(result: dict, host: str, name: str = "nccl-files") -> dict:
    return next(t for h in result["hosts"] if h["host"] == host for t in h["tasks"] if t["name"] == name)


def with_threads(lab, tmp_path, threads: int, **nccl):
    """The lab's inventory with the blades' NCCL_SOCKET_NTHREADS (and other nccl keys) changed."""
    tree = yaml.safe_load(lab.inventory.read_text())
    blades = tree["all"]["children"]["gpu_nodes"]["children"]["rtx3090"]["vars"]["provision_nccl"]
    blades.update(socket_nthreads=threads, **nccl)
    path = tmp_path / f"threads-{threads}.yaml"
    path.write_text(yaml.safe_dump(tree))
    return path


def test_the_blades_get_nccl_files_naming_both_ports_then_nothing_changes(basement):
    code, result = basement.apply()
    assert code == 0, result
    conf = basement.node_file(BLADES[0], CONF).read_text()
    assert "NCCL_SOCKET_IFNAME=ens803f\nNCCL_SOCKET_NTHREADS=1\n" in conf
    assert "# On this node NCCL will use: ens803f0 10000 Mb/s, ens803f1 10000 Mb/s" in conf
    env = basement.ssh(BLADES[0], f"set -a; . {ENV}; set +a; env | grep ^NCCL_ | sort")
    assert env.stdout.splitlines() == ["NCCL_SOCKET_IFNAME=ens803f", "NCCL_SOCKET_NTHREADS=1"], env.stderr
    assert task(result, "lab-v100-1")["status"] == "skipped"  # no nccl block there

    facts = basement.provision("facts", str(basement.inventory), "--ssh-config", str(basement.ssh_config),
                               "--limit", BLADES[0])
    assert "nccl: NCCL_SOCKET_IFNAME=ens803f: uses ens803f0 (10000 Mb/s), ens803f1 (10000 Mb/s)" in facts.stdout

    code, again = basement.apply()
    assert code == 0 and [h["counts"]["changed"] for h in again["hosts"]] == [0] * len(again["hosts"]), again


@pytest.mark.parametrize("fault, words", [
    ("nic-down", "ens803f1 is down: NCCL skips it without a word"),
    ("nic-slow", "ens803f1 1000 Mb/s, not 10000 Mb/s (expected_link_speed_mbps)"),
])
def test_a_blade_whose_port_is_down_or_slow_fails_alone_and_keeps_its_files(basement, tmp_path, fault, words):
    before = basement.node_file(PULLED, CONF).read_text()
    basement.lab("fault", PULLED, fault, "--nic", "ens803f1")
    try:
        code, result = basement.apply(inventory=with_threads(basement, tmp_path, 2))
        assert code == 1, result
        failed = task(result, PULLED)
        assert failed["status"] == "failed" and words in failed["message"], failed
        assert "(nothing written)" in failed["message"]
        assert basement.node_file(PULLED, CONF).read_text() == before  # the old, right file: not a wrong one
        for blade in set(BLADES) - {PULLED}:  # the others took the change
            assert task(result, blade)["status"] == "changed"
            assert "NCCL_SOCKET_NTHREADS=2" in basement.node_file(blade, CONF).read_text()
        assert task(result, PULLED, "gpu-persistence")["status"] == "ok"  # its other tasks ran
    finally:
        basement.lab("fault", PULLED, "clear")
    code, result = basement.apply()  # back to the basement inventory, every port up
    assert code == 0, result
    assert all("NCCL_SOCKET_NTHREADS=1" in basement.node_file(b, CONF).read_text() for b in BLADES)


def test_a_port_the_inventory_names_exactly_but_the_blade_lacks_is_refused_by_name(basement, tmp_path):
    inventory = with_threads(basement, tmp_path, 1, socket_ifname="=ens803f0,ens803f2")
    code, result = basement.apply("--check", inventory=inventory)
    assert code == 1, result
    for blade in BLADES:
        message = task(result, blade)["message"]
        assert message.startswith("NCCL_SOCKET_IFNAME==ens803f0,ens803f2: no interface ens803f2 on this node")
    assert "ens803f" in basement.node_file(BLADES[0], CONF).read_text()
