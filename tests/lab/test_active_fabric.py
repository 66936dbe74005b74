"""verify --active on the four 3090 blades (issue 27, lab test b): a lab of its own, four nodes of one RTX 3090
with two fabric ports each (ens803f0, ens803f1), their links shaped to 1/100 of their speed (lab/netns.py: a
"10GbE" port carries 100 Mbit/s, so the inventory says provision_active.expected_port_mbps: 80, TCP through the shaper reaching 87-94). iperf3 measures every port
NCCL will use in a ring over the blades: all of them carry what they should; with one blade's port on the 1GbE
switch (`lab fault ... nic-slow`: its speed file and its link), the ring names that blade and that port, the
group's all-reduce falls short, and the pairwise all-reduces name the blade.

Its own lab (conftest's lab_alone: the e2e lab's directory with -fabric), made and taken down here.
"""

from __future__ import annotations

import json

import pytest
import yaml

pytestmark = pytest.mark.lab

BLADES = [f"rtx3090-{n}" for n in range(1, 5)]
INVENTORY = {"all": {"children": {"rtx3090": {
    "hosts": {name: {} for name in BLADES},
    "vars": {"provision_gpu": {"persistence": True, "power_limit": 300},
             "provision_nccl": {"socket_ifname": "ens803f", "socket_nthreads": 1, "expected_link_speed_mbps": 10000},
             "provision_active": {"load_command": ["/usr/lib/provision-lab/gpusim", "load"], "expected_port_mbps": 80},
             "provision_launcher": {"nproc_per_node": "gpu"},
             "provision_custom": {"lab": {"torch": True, "gpus": [{"model": "rtx-3090", "count": 1}],
                                "nics": ["ens803f0", "ens803f1"]}}}}}}}


@pytest.fixture(scope="module")
def blades(lab_alone, tmp_path_factory):
    spec = tmp_path_factory.mktemp("fabric") / "blades.yaml"
    spec.write_text(yaml.safe_dump(INVENTORY))
    with lab_alone("fabric", lambda cluster: cluster.lab("up", "--like", str(spec))) as cluster:
        applied = cluster.provision("apply", str(cluster.inventory))
        assert applied.returncode == 0, applied.stdout + applied.stderr
        yield cluster


def verify_active(cluster) -> tuple[int, dict[str, dict]]:
    proc = cluster.provision("verify", str(cluster.inventory), "--active", "--duration", "5", "--json")
    assert proc.stdout.strip(), proc.stderr
    return proc.returncode, {h["host"]: h for h in json.loads(proc.stdout)["hosts"]}


def test_every_port_carries_what_it_should_and_a_slow_one_is_named_by_blade_and_port(blades):
    code, hosts = verify_active(blades)
    assert code == 0, {h: v["failures"] for h, v in hosts.items() if v["failures"]}
    assert all("gpus_hold_up_under_load" in v["passed"] for v in hosts.values())

    blades.lab("fault", "lab-rtx3090-3", "nic-slow", "--nic", "ens803f1")
    try:
        code, hosts = verify_active(blades)
        assert code == 1
        failed = {h for h, v in hosts.items() if v["failures"]}
        assert failed == {"lab-rtx3090-3"}, {h: hosts[h]["failures"] for h in failed}
        [finding] = hosts["lab-rtx3090-3"]["findings"]  # one cause, one finding: the port
        assert finding["check"] == "nccl_interfaces_are_up_at_speed"  # its speed file says 1000 Mb/s already
        measured, paired, paced = [c for c in finding["consequences"] if c["check"] == "gpus_hold_up_under_load"]
        assert paced["expected"].startswith("all-reduce bus bandwidth across the rtx3090 group (4 nodes)")
        print(f"with the slow port: {paced['found']}; pairwise: {paired['found']}")
        # the group fell short, so the pairs ran: both of the blade's pairs short, its neighbours' others clean
        assert paired["expected"].startswith("lab-rtx3090-3 in an all-reduce with each of its neighbours at")
        assert "with lab-rtx3090-2: " in paired["found"] and "with lab-rtx3090-4: " in paired["found"]
        assert measured["expected"].startswith("lab-rtx3090-3 ens803f1 carrying 80 Mb/s each way")
        assert "lab-rtx3090-2 -> lab-rtx3090-3" in measured["found"] and "lab-rtx3090-3 -> lab-rtx3090-4" in \
            measured["found"]
        assert measured["about"] == ["ens803f1"]
    finally:
        blades.lab("fault", "lab-rtx3090-3", "clear")
    code, hosts = verify_active(blades)
    assert code == 0, {h: v["failures"] for h, v in hosts.items() if v["failures"]}
