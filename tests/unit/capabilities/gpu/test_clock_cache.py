"""The supported-clocks cache: the facts batch, run by a real sh against the simulator, calls nvidia-smi once
when the cache holds every GPU of the loaded driver, and asks nvidia-smi only on a miss."""

from __future__ import annotations

import subprocess
import sys

import pytest

from provision.capabilities.gpu import clock_cache
from provision.capabilities.registry import FACTS
from provision.core import facts as gather
from paths import GPUSIM



@pytest.fixture
def node(tmp_path, monkeypatch):
    """A simulated 2x V100 host whose nvidia-smi counts its own calls."""
    real = tmp_path / "sim"
    subprocess.run([sys.executable, str(GPUSIM), "install", str(real)], check=True)
    counting = tmp_path / "bin"
    counting.mkdir()
    (counting / "nvidia-smi").write_text(f'#!/bin/sh\necho "$*" >> {tmp_path}/calls\nexec {real}/nvidia-smi "$@"\n')
    (counting / "nvidia-smi").chmod(0o755)
    (tmp_path / "config.json").write_text('{"gpus": [{"model": "v100-sxm2-16gb", "count": 2}]}')
    env = {"PATH": f"{counting}:/usr/bin:/bin", "NVIDIA_SIM_CONFIG": str(tmp_path / "config.json"),
           "NVIDIA_SIM_STATE": str(tmp_path / "state.json"), "NVIDIA_SIM_KMSG": str(tmp_path / "kern.log")}
    monkeypatch.setenv("PROVISION_CLOCK_CACHE", str(tmp_path / "cache"))

    class Node:
        cache = tmp_path / "cache"

        def read(self):
            """Facts from one batch, and the nvidia-smi calls it made."""
            (tmp_path / "calls").write_text("")
            token = gather.new_token()
            out = subprocess.run(["sh", "-c", FACTS.script(token)], capture_output=True, text=True,
                                 env=env).stdout
            return FACTS.parse(gather.split_sections(token, out)), (tmp_path / "calls").read_text().splitlines()

        def remember(self, facts):
            argv = clock_cache.write_argv(facts.nvidia.driver_version)
            subprocess.run(argv, input=clock_cache.rows(facts.nvidia.gpus), text=True, check=True, env=env)

        def sim(self, *args):
            subprocess.run([sys.executable, str(GPUSIM), *args], check=True, env=env, capture_output=True)

    return Node()


def test_a_cold_host_asks_nvidia_smi_and_a_cached_one_calls_it_once(node):
    cold, calls = node.read()
    assert cold.nvidia.supported_clocks_source == "nvidia-smi" and len(calls) == 2
    pairs = [g.supported_clocks for g in cold.nvidia.gpus]
    assert len(pairs) == 2 and all(p and (877, 1005) in [(c.mem, c.sm) for c in p] for p in pairs)
    node.remember(cold)
    assert sorted(f.name for f in (node.cache / cold.nvidia.driver_version).iterdir()) == sorted(
        g.uuid for g in cold.nvidia.gpus)
    warm, calls = node.read()
    assert warm.nvidia.supported_clocks_source == "cache" and calls == [calls[0]]
    assert calls[0].startswith("--query-gpu=")
    assert [g.supported_clocks for g in warm.nvidia.gpus] == pairs


def test_a_new_driver_or_a_gpu_missing_from_the_cache_is_asked_again(node):
    first, _ = node.read()
    node.remember(first)
    (node.cache / first.nvidia.driver_version / first.nvidia.gpus[1].uuid).unlink()
    again, calls = node.read()
    assert again.nvidia.supported_clocks_source == "nvidia-smi" and len(calls) == 2
    node.remember(again)
    node.sim("set-driver", "570.195.03")
    upgraded, calls = node.read()
    assert upgraded.nvidia.driver_version == "570.195.03"
    assert upgraded.nvidia.supported_clocks_source == "nvidia-smi" and len(calls) == 2


def test_hostile_uuids_and_versions_never_become_paths():
    assert clock_cache.write_argv("../../etc") is None and clock_cache.write_argv(None) is None
    rows = clock_cache.rows([])
    assert rows == ""
    q = "index, uuid, driver_version\n0, GPU-../../../etc/passwd, 580.1\n"
    out = subprocess.run(["sh", "-c", f'q={gather.shlex.quote(q)}\n{clock_cache.read_snippet()}'],
                         capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"}).stdout
    assert out.startswith("source=nvidia-smi")  # the odd UUID is a miss, never a file name


def test_the_header_is_found_after_an_error_line_about_a_lost_gpu(tmp_path, monkeypatch):
    monkeypatch.setenv("PROVISION_CLOCK_CACHE", str(tmp_path))
    (tmp_path / "580.1").mkdir()
    (tmp_path / "580.1" / "GPU-abc").write_text("GPU-abc, 877, 1005\n")
    q = ("Unable to determine the device handle for GPU0000:41:00.0: Unknown Error\n"
         "index, uuid, driver_version\n0, GPU-abc, 580.1\n")
    out = subprocess.run(["sh", "-c", f'q={gather.shlex.quote(q)}\n{clock_cache.read_snippet()}'],
                         capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"}).stdout
    assert out == "source=cache\nGPU-abc, 877, 1005\n"
