"""apt's lists are refreshed once per node per apply (Change.prepare), however many pinned package sets move: on
tests/lab/stack.yaml a driver move with fabric manager (the HGX node), the container toolkit and DCGM runs ONE
`apt-get update` on each node, counted by apt itself (an APT::Update::Post-Invoke hook appends a line per update)."""

from __future__ import annotations

from pathlib import Path

import pytest
from builders.stacklab import driver_moved, on

from provision_lab.layout import DRIVER_VERSION

pytestmark = pytest.mark.lab

SPEC = Path(__file__).parent / "stack.yaml"
NODES = ["lab-hgx-1", "lab-pcie-1", "lab-pcie-2"]
COUNTED = "/var/log/apt-updates-counted"
HOOK = f"APT::Update::Post-Invoke {{ \"echo update >> {COUNTED}\"; }};"


@pytest.fixture(scope="module")
def counted_lab(lab_alone):
    with lab_alone("apt-updates", lambda cluster: cluster.lab("up", "--like", str(SPEC))) as cluster:
        for node in NODES:
            on(cluster, node, f"echo '{HOOK}' > /etc/apt/apt.conf.d/99count-updates && rm -f {COUNTED}")
        yield cluster


PINNED = {"nvidia-driver", "fabric-manager", "container-toolkit", "dcgm"}  # the tasks of driver/pinned.py's sets


def updates_in_one_apply(lab, inventory: Path | None = None) -> tuple[dict[str, int], dict[str, set[str]]]:
    """Each node's count of `apt-get update`s in one `provision apply`, and the pinned sets that moved there."""
    for node in NODES:
        on(lab, node, f"rm -f {COUNTED}")
    _, result = lab.apply(inventory=inventory)
    moved = {host["host"]: {task["name"] for task in host["tasks"] if task["status"] == "changed"} & PINNED
             for host in result["hosts"]}
    return {node: len(on(lab, node, f"cat {COUNTED} 2>/dev/null || true").split()) for node in NODES}, moved


def test_the_first_apply_refreshes_for_the_source_it_writes_and_once_for_the_whole_stack(counted_lab, tmp_path):
    """Every pinned set moves or is installed; the lab's source is written by driver-repository, which refreshes the
    lists for it (its after_write), and the four sets' installs share one refresh."""
    counts, moved = updates_in_one_apply(counted_lab, driver_moved(counted_lab, DRIVER_VERSION, tmp_path / "to.yaml"))
    assert moved == {"lab-hgx-1": PINNED, **dict.fromkeys(NODES[1:], PINNED - {"fabric-manager"})}
    assert counts == dict.fromkeys(NODES, 2)


def test_a_driver_move_refreshes_apts_lists_once_per_node(counted_lab):
    """Back to the lab's own inventory (OTHER_DRIVER_VERSION), its source in place: the toolkit keeps its pin; the
    HGX node's fabric manager and DCGM's CUDA flavour follow the driver."""
    counts, moved = updates_in_one_apply(counted_lab)
    assert {"nvidia-driver", "fabric-manager", "dcgm"} <= moved["lab-hgx-1"] and "container-toolkit" not in moved
    assert all("nvidia-driver" in moved[node] for node in NODES[1:]), moved
    assert counts == dict.fromkeys(NODES, 1)
