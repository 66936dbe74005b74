"""The container facts: which driver a CDI spec names, the toolkit's packages, the engines and their nvidia runtime.

The specs follow the shape `nvidia-ctk cdi generate` writes, as published in NVIDIA's trackers: YAML with
containerEdits.mounts (NVIDIA/nvidia-container-runtime#85, a DGX A100's spec), JSON with devices
(NVIDIA/k8s-device-plugin#632); the versions are our own."""

from __future__ import annotations

import json
import textwrap

from provision.capabilities.containers.facts import (
    CDI_ETC,
    CDI_RUN,
    CONTAINERD_CONFIG,
    CONTAINERD_DROP_IN,
    DOCKER_CONFIG,
    parse_containers,
    parse_spec,
    runtime_problem,
)

YAML_SPEC = textwrap.dedent("""\
    cdiVersion: 0.5.0
    kind: nvidia.com/gpu
    devices:
    - name: "0"
      containerEdits:
        deviceNodes:
        - path: /dev/nvidia0
    containerEdits:
      deviceNodes:
      - path: /dev/nvidiactl
      mounts:
      - containerPath: /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.570.195.03
        hostPath: /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.570.195.03
        options: [ro, nosuid, nodev, bind]
      - containerPath: /usr/lib/x86_64-linux-gnu/libcuda.so.570.195.03
        hostPath: /usr/lib/x86_64-linux-gnu/libcuda.so.570.195.03
        options: [ro, nosuid, nodev, bind]
      - containerPath: /usr/lib/libnvidia-egl-wayland.so.1.1.13
        hostPath: /usr/lib/libnvidia-egl-wayland.so.1.1.13
    """)


def spec_json(version: str) -> str:
    library = f"/usr/lib/aarch64-linux-gnu/libcuda.so.{version}"
    return json.dumps({"cdiVersion": "0.5.0", "kind": "nvidia.com/gpu", "devices": [
        {"name": "all", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia0"}],
                                           "mounts": [{"hostPath": library, "containerPath": library}]}}]})


def test_a_spec_names_the_driver_of_its_libcuda_and_libnvidia_ml_not_of_other_libraries():
    assert parse_spec(CDI_RUN, YAML_SPEC).drivers == ["570.195.03"]
    assert parse_spec(CDI_ETC, spec_json("535.161.08")).drivers == ["535.161.08"]  # a device's own mounts too


def test_a_spec_that_is_no_spec_says_why():
    assert parse_spec(CDI_RUN, "cdiVersion: [0.5").problem.startswith("not YAML: ")
    assert parse_spec(CDI_RUN, "- a list\n").problem == "not a CDI spec (no cdiVersion and kind)"
    assert parse_spec(CDI_RUN, "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\n").drivers == []


def test_the_section_gives_packages_engines_specs_and_runtimes():
    daemon = json.dumps({"runtimes": {"nvidia": {"args": [], "path": "nvidia-container-runtime"}}}, indent=4)
    text = "\n".join([
        "ctk", "engine docker", "engine containerd",
        "pkg nvidia-container-toolkit 1.17.8-1 hi", "pkg nvidia-container-toolkit-base 1.17.8-1 ii",
        "pkg libnvidia-container1 1.17.7-1 rc",
        f"file {CDI_RUN}", YAML_SPEC, f"file {DOCKER_CONFIG}", daemon, ""])
    found = parse_containers(text)
    assert found.ctk and found.engines == ["docker", "containerd"]
    assert found.packages == {"nvidia-container-toolkit": "1.17.8-1", "nvidia-container-toolkit-base": "1.17.8-1"}
    assert found.held == ["nvidia-container-toolkit"]
    assert list(found.specs) == [CDI_RUN] and found.specs[CDI_RUN].drivers == ["570.195.03"]
    assert found.runtime_problems == {"docker": "", "containerd": f"no {CONTAINERD_CONFIG} nor {CONTAINERD_DROP_IN}"}


def test_an_empty_section_is_a_host_without_the_toolkit():
    found = parse_containers("")
    assert (found.ctk, found.engines, found.packages, found.specs) == (False, [], {}, {})


def test_each_engine_is_configured_where_its_config_names_the_nvidia_runtime():
    assert runtime_problem("docker", {DOCKER_CONFIG: '{"log-driver": "json-file"}'}) == \
        f"{DOCKER_CONFIG} names no nvidia runtime"
    assert runtime_problem("docker", {DOCKER_CONFIG: "{"}).startswith(f"{DOCKER_CONFIG} is not JSON: ")
    # containerd's CRI plugin table, in the config versions before 3 and from 3 on; config.toml imports the drop-in
    imports = {CONTAINERD_CONFIG: 'imports = ["/etc/containerd/conf.d/*.toml"]\nversion = 2\n'}
    for plugin in ('"io.containerd.grpc.v1.cri".containerd', '"io.containerd.cri.v1.runtime".containerd'):
        drop_in = f'version = 2\n[plugins.{plugin}.runtimes.nvidia]\n  runtime_type = "io.containerd.runc.v2"\n'
        assert runtime_problem("containerd", {CONTAINERD_DROP_IN: drop_in, **imports}) == ""
    assert runtime_problem("containerd", {CONTAINERD_DROP_IN: drop_in, CONTAINERD_CONFIG: "version = 2\n"}) == \
        f"{CONTAINERD_CONFIG} does not import {CONTAINERD_DROP_IN}"
    assert runtime_problem("containerd", {CONTAINERD_DROP_IN: drop_in}).startswith(f"no {CONTAINERD_CONFIG} ")
    assert runtime_problem("containerd", {CONTAINERD_DROP_IN: "version = [2"}).startswith(
        f"{CONTAINERD_DROP_IN} is not TOML: ")
