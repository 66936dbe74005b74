"""Containers and DCGM end to end on one lab node (tests/lab/containers.yaml): apply installs the container toolkit at
its pin, held, generates the CDI spec of the loaded driver and configures the docker that is there, and installs DCGM
4 for the driver's CUDA major with nvidia-dcgm enabled and restarted (the node answers as one where systemd runs:
provision_custom.lab.systemd), so verify passes right after apply; after a reboot the host engine runs the pinned
version and the spec, gone with /run, is the one finding until apply generates it again; the `stale-cdi-spec` fault (a spec left
from the driver before) is one finding with its next step, and apply fixes it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from builders import stacklab

from provision.capabilities.containers.facts import CDI_RUN, TOOLKIT_PACKAGES, parse_spec

pytestmark = pytest.mark.lab

LIKE = Path(__file__).parent / "containers.yaml"
NODE = "lab-ctr-1"
LOADED, OTHER = "580.159.04", "570.195.03"
CHECKS = ("container_toolkit_is_the_pinned_version", "cdi_spec_names_the_loaded_driver",
          "container_engines_use_the_nvidia_runtime")
DCGM_CHECK = "dcgm_host_engine_runs_the_pinned_version"
DCGM = ("datacenter-gpu-manager-4-core", "datacenter-gpu-manager-4-cuda13")
# A docker of the user's: on the PATH, with a daemon.json of its own (provision installs no engine).
# Its unit, for the restart provision asks after configuring it (systemd runs there).
DOCKER = ("printf '#!/bin/sh\\nexec sleep infinity\\n' >/usr/local/bin/dockerd && chmod 755 /usr/local/bin/dockerd && "
          "printf '[Service]\\nExecStart=/usr/local/bin/dockerd\\n' >/etc/systemd/system/docker.service && "
          "mkdir -p /etc/docker && echo '{\"log-driver\": \"json-file\"}' >/etc/docker/daemon.json")


def on(lab, command: str) -> str:
    return stacklab.on(lab, NODE, command)


@pytest.fixture(scope="module")
def containers_lab(lab_alone):
    def up(cluster):
        cluster.lab("up", "--like", str(LIKE))
        on(cluster, DOCKER)

    with lab_alone("containers", up) as cluster:
        yield cluster


def verify(lab, inventory: Path | None = None) -> tuple[int, dict]:
    """`provision verify --json` on the node: (exit code, its verdict)."""
    code, judged = stacklab.verdicts(lab, inventory)
    return code, judged[NODE]


def applied(lab) -> None:
    code, result = lab.apply()
    assert code == 0, json.dumps(result)[:3000]


def test_apply_installs_the_toolkit_generates_the_spec_and_configures_docker(containers_lab):
    applied(containers_lab)
    installed = on(containers_lab, "dpkg-query -W -f '${Package} ${Version}\\n' " + " ".join(TOOLKIT_PACKAGES))
    assert sorted(installed.split("\n")[:-1]) == sorted(f"{name} 1.17.8-1provision1" for name in TOOLKIT_PACKAGES)
    assert set(TOOLKIT_PACKAGES) <= set(on(containers_lab, "apt-mark showhold").split())
    spec = on(containers_lab, f"cat {CDI_RUN}")  # /var/run: the node's own /run, a tmpfs
    assert parse_spec(CDI_RUN, spec).drivers == [LOADED] and "/dev/nvidia1" in spec
    daemon = json.loads(containers_lab.node_file(NODE, "/etc/docker/daemon.json").read_text())
    assert daemon["log-driver"] == "json-file" and "nvidia" in daemon["runtimes"]  # the user's key kept
    assert set(DCGM) <= set(on(containers_lab, "apt-mark showhold").split())
    assert "Hostengine build info:\nVersion : 4.2.3" in on(containers_lab, "dcgmi -v")  # started by apply's restart
    _, verdict = verify(containers_lab)
    assert {*CHECKS, DCGM_CHECK} <= set(verdict["passed"]) and not verdict["findings"], verdict["findings"]


def test_after_a_reboot_the_host_engine_runs_and_the_spec_is_generated_again(containers_lab):
    containers_lab.lab("reboot", NODE)  # nodeinit starts the enabled nvidia-dcgm; /run starts empty
    assert "Hostengine build info:\nVersion : 4.2.3" in on(containers_lab, "dcgmi -v")
    _, verdict = verify(containers_lab)
    assert [(f["check"], f["found"].split(" (")[0]) for f in verdict["findings"]] == \
        [("cdi_spec_names_the_loaded_driver", f"{CDI_RUN}: missing")]
    assert DCGM_CHECK in verdict["passed"]
    applied(containers_lab)
    _, verdict = verify(containers_lab)
    assert {*CHECKS, DCGM_CHECK} <= set(verdict["passed"]) and not verdict["findings"], verdict["findings"]


def test_a_stale_spec_is_one_finding_and_apply_generates_it_again(containers_lab):
    containers_lab.lab("fault", NODE, "stale-cdi-spec")
    assert parse_spec(CDI_RUN, on(containers_lab, f"cat {CDI_RUN}")).drivers == [OTHER]
    _, verdict = verify(containers_lab)
    (finding,) = verdict["findings"]
    assert finding["check"] == "cdi_spec_names_the_loaded_driver", verdict["findings"]
    assert f"{CDI_RUN}: driver {OTHER}" in finding["found"]
    assert f"sudo nvidia-ctk cdi generate --output={CDI_RUN}" in finding["next_step"]
    applied(containers_lab)
    assert parse_spec(CDI_RUN, on(containers_lab, f"cat {CDI_RUN}")).drivers == [LOADED]
    code, verdict = verify(containers_lab)
    assert set(CHECKS) <= set(verdict["passed"]) and not verdict["findings"], verdict["findings"]


def test_a_driver_change_moves_the_spec_and_dcgm_with_it_in_one_apply_reboot(containers_lab, tmp_path):
    """570 pinned: its package and DCGM's -cuda12 go in before the reboot, the spec of 570 is generated after it."""
    inventory = stacklab.driver_moved(containers_lab, OTHER, tmp_path / "inventory.yaml")
    code, result = containers_lab.apply("--reboot", inventory=inventory)
    assert code == 0, json.dumps(result)[:3000]
    assert OTHER in on(containers_lab, "cat /proc/driver/nvidia/version")
    assert parse_spec(CDI_RUN, on(containers_lab, f"cat {CDI_RUN}")).drivers == [OTHER]
    dcgm = on(containers_lab, "dpkg-query -W -f '${Package} ${Status}\\n' 'datacenter-gpu-manager-4-*'")
    assert dcgm.split("\n")[:-1] == ["datacenter-gpu-manager-4-core hold ok installed",
                                      "datacenter-gpu-manager-4-cuda12 hold ok installed"]  # -cuda13 gone
    _, verdict = verify(containers_lab, inventory)
    assert {*CHECKS, DCGM_CHECK} <= set(verdict["passed"]) and not verdict["findings"], verdict["findings"]
