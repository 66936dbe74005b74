"""The typed settings blocks: what each accepts, how refusals read, and per-GPU resolution."""

from __future__ import annotations

import pytest

from provision.capabilities.gpu.settings import GpuSettings, LockedClocks
from provision.capabilities.host import HostSettings, parse_host_settings


def parse(raw: dict, partial: bool = False):
    return parse_host_settings(raw, "inv.yaml", "group g", partial=partial)


def settings(raw: dict) -> HostSettings:
    result, problems = parse(raw)
    assert problems == [], [str(p) for p in problems]
    return result


def refused(raw: dict, key: str, *texts: str, partial: bool = False) -> str:
    """The one problem at `key`, as printed; it must name the file, the place and every text given."""
    result, problems = parse(raw, partial)
    assert result is None
    at_key = [str(p) for p in problems if p.key == key]
    assert len(at_key) == 1, [str(p) for p in problems]
    line = at_key[0]
    assert line.startswith(f"inv.yaml: group g: {key}: ")
    for text in texts:
        assert text in line, line
    assert "pydantic" not in line and "For further information" not in line
    return line


# --- gpu ---

def test_a_full_gpu_block_is_read_as_written():
    gpu = settings({"gpu": {
        "persistence": True, "power_limit": 200, "clocks": {"mem": 877, "sm": 1005},
        "locked_clocks": {"sm": [210, 2520], "mem": 9501},
        "overrides": [{"index": 3, "power_limit": 150.5}],
    }}).gpu
    assert gpu.persistence is True and gpu.power_limit == 200 and isinstance(gpu.power_limit, int)
    assert (gpu.clocks.mem, gpu.clocks.sm, gpu.clocks.nearest) == (877, 1005, False)
    assert gpu.locked_clocks == LockedClocks(sm=(210, 2520), mem=(9501, 9501))  # one value means [v, v]
    assert gpu.overrides[0].index == 3 and gpu.overrides[0].power_limit == 150.5


def test_absent_blocks_are_none_and_default_restores_defaults():
    host = settings({"gpu": {"power_limit": "default", "clocks": "default", "locked_clocks": "default"}})
    assert host.driver is host.nccl is host.launcher is host.slurm is None and host.custom == {}
    assert (host.gpu.power_limit, host.gpu.clocks, host.gpu.locked_clocks) == ("default",) * 3
    assert host.gpu.persistence is None  # unset: left alone


@pytest.mark.parametrize("watts, text", [
    (-5, "greater than 0"), (0, "greater than 0"), (2000, "less than or equal to 1500"),
    ("abc", "should be 'default'"), (True, "got True"),
])
def test_power_limit_out_of_range_or_wrong_type_is_refused(watts, text):
    refused({"gpu": {"power_limit": watts}}, "gpu.power_limit", text, "allowed: watts, > 0 and <= 1500", "hint:")


@pytest.mark.parametrize("raw, key, value, number", [
    ({"gpu": {"power_limit": "200"}}, "gpu.power_limit", "200", "a number of watts"),
    ({"gpu": {"power_limit": "150.5"}}, "gpu.power_limit", "150.5", "a number of watts"),
    ({"gpu": {"overrides": [{"index": 1, "power_limit": "180"}]}}, "gpu.overrides[0].power_limit", "180",
     "a number of watts"),
    ({"launcher": {"nproc_per_node": "4"}}, "launcher.nproc_per_node", "4", "a number of processes"),
])
def test_a_quoted_number_is_called_a_number_not_a_misspelt_word(raw, key, value, number):
    """`power_limit: "200"` is a number written as text: say so, not "input should be 'default'"."""
    line = refused(raw, key, f"got '{value}': {number}, not the string '{value}'", f"write {value} without quotes")
    assert "should be" not in line


def test_a_misspelt_word_gets_a_suggestion():
    refused({"gpu": {"power_limit": "defualt"}}, "gpu.power_limit", "did you mean 'default'?")
    refused({"nccl": {"debug": "info"}}, "nccl.debug", "'VERSION', 'WARN', 'INFO' or 'TRACE'", "did you mean 'INFO'?")


def test_values_are_taken_strictly_as_yaml_typed_them():
    refused({"gpu": {"persistence": "yes"}}, "gpu.persistence", "got 'yes'", "allowed: true or false")
    refused({"gpu": {"clocks": {"mem": 877.5, "sm": 1005}}}, "gpu.clocks.mem", "allowed: MHz, an integer > 0")


def test_unknown_keys_are_refused_with_did_you_mean_at_any_depth():
    refused({"gpus": {}}, "gpus", "unknown key 'gpus'", "did you mean 'gpu'?")
    refused({"gpu": {"power_limt": 200}}, "gpu.power_limt", "did you mean 'power_limit'?")
    refused({"gpu": {"overrides": [{"index": 0}, {"index": 1, "clock": {}}]}},
            "gpu.overrides[1].clock", "did you mean 'clocks'?")
    refused({"gpu": {"clocks": {"mem": 1, "sm": 2, "x": 3}}}, "gpu.clocks.x", "known keys: mem, sm, nearest")


def test_clocks_need_both_values_except_where_a_merge_may_complete_them():
    refused({"gpu": {"clocks": {"mem": 877}}}, "gpu.clocks.sm", "required, missing", "MHz, an integer > 0")
    assert parse({"gpu": {"clocks": {"mem": 877}}}, partial=True)[1] == []
    # Inside a list nothing merges in later: missing there is final even for one level.
    refused({"gpu": {"overrides": [{"index": 0, "clocks": {"mem": 877}}]}},
            "gpu.overrides[0].clocks.sm", "required", partial=True)


def test_locked_clock_ranges_need_min_le_max_and_some_clock():
    refused({"gpu": {"locked_clocks": {"sm": [2520, 210]}}}, "gpu.locked_clocks.sm",
            "MIN 2520 is above MAX 210", "[MIN, MAX] in MHz")
    refused({"gpu": {"locked_clocks": {"mem": [0, 100]}}}, "gpu.locked_clocks.mem[0]", "greater than 0")
    refused({"gpu": {"locked_clocks": {}}}, "gpu.locked_clocks", "neither sm nor mem")
    refused({"gpu": {"locked_clocks": {"sm": [1, 2, 3]}}}, "gpu.locked_clocks.sm", "[MIN, MAX]")


@pytest.mark.parametrize("override, text", [
    ({"power_limit": 100}, "got none"),
    ({"index": 0, "model": "V100", "power_limit": 100}, "got model, index"),
])
def test_an_override_needs_exactly_one_selector(override, text):
    refused({"gpu": {"overrides": [override]}}, "gpu.overrides[0]", "exactly one selector", text)


def test_overrides_do_not_nest_and_selectors_are_checked():
    refused({"gpu": {"overrides": [{"index": 0, "overrides": []}]}}, "gpu.overrides[0].overrides", "unknown key")
    refused({"gpu": {"overrides": [{"uuid": "4f3a"}]}}, "gpu.overrides[0].uuid", "GPU-")
    refused({"gpu": {"overrides": [{"index": -1}]}}, "gpu.overrides[0].index", ">= 0")


GPUS = [(0, "GPU-aaaa", "Tesla V100-SXM2-16GB"), (1, "GPU-bbbb", "Tesla V100-SXM2-16GB"),
        (2, "GPU-cccc", "NVIDIA A100-SXM4-40GB")]


def resolved(gpu: dict) -> list:
    block = settings({"gpu": gpu}).gpu
    return [block.for_gpu(*g).power_limit for g in GPUS]


def test_for_gpu_applies_the_most_specific_override_whatever_the_list_order():
    overrides = [{"uuid": "GPU-BBBB", "power_limit": 120},  # uuids compare in any case
                 {"index": 1, "power_limit": 140}, {"index": 2, "power_limit": 160},
                 {"model": "v100", "power_limit": 180}]
    assert resolved({"power_limit": 250, "overrides": overrides}) == [180, 120, 160]


def test_for_gpu_applies_later_overrides_of_one_kind_last_and_keeps_unset_settings():
    block = settings({"gpu": {"persistence": True, "power_limit": 250, "clocks": {"mem": 877, "sm": 1005},
                              "overrides": [{"model": "Tesla", "power_limit": 200},
                                            {"model": "V100", "power_limit": 190, "clocks": "default"}]}}).gpu
    v100 = block.for_gpu(*GPUS[0])
    assert (v100.persistence, v100.power_limit, v100.clocks, v100.overrides) == (True, 190, "default", [])
    a100 = block.for_gpu(*GPUS[2])
    assert (a100.power_limit, a100.clocks.sm) == (250, 1005)
    assert block.power_limit == 250 and len(block.overrides) == 2  # the block itself is untouched


def test_for_gpu_without_overrides_is_the_block():
    block = GpuSettings(power_limit=200)
    assert block.for_gpu(0, "GPU-x", "any") == block


# --- driver, nccl, launcher, slurm ---

def test_driver_version_must_be_a_quoted_dotted_version():
    assert settings({"driver": {"version": "580.159.04", "hold": True}}).driver.version == "580.159.04"
    refused({"driver": {"version": 580.65}}, "driver.version", "dotted digits", "quote it")
    refused({"driver": {"version": "580.x"}}, "driver.version", "dotted digits")


@pytest.mark.parametrize("ifname", ["ens803f", "=ens803f0,ens803f1", "^docker,lo", "^=docker0", "ib"])
def test_nccl_socket_ifname_accepts_nccl_syntax(ifname):
    assert settings({"nccl": {"socket_ifname": ifname}}).nccl.socket_ifname == ifname


@pytest.mark.parametrize("ifname", ["ens803f0, ens803f1", "eth0,,eth1", "", "^", "eth0,"])
def test_nccl_socket_ifname_refuses_spaces_and_empty_items(ifname):
    refused({"nccl": {"socket_ifname": ifname}}, "nccl.socket_ifname", "NCCL_SOCKET_IFNAME syntax")


def test_nccl_socket_threads_times_sockets_is_at_most_64():
    assert settings({"nccl": {"socket_nthreads": 4, "nsocks_perthread": 16}}).nccl.nsocks_perthread == 16
    refused({"nccl": {"socket_nthreads": 8, "nsocks_perthread": 16}}, "nccl",
            "8 x 16 = 128", "at most 64", "NCCL_NSOCKS_PERTHREAD")
    refused({"nccl": {"socket_nthreads": 17}}, "nccl.socket_nthreads", "1..16")
    refused({"nccl": {"nsocks_perthread": 0}}, "nccl.nsocks_perthread", "1..64")


def test_nccl_levels_env_and_defaults():
    nccl = settings({"nccl": {"p2p_level": "PIX", "net_gdr_level": "SYS", "ib_disable": True,
                              "env": {"NCCL_ALGO": "Ring", "NCCL_BUFFSIZE": 4194304}}}).nccl
    assert nccl.conf_path == "/etc/nccl.conf" and nccl.env["NCCL_BUFFSIZE"] == "4194304"
    refused({"nccl": {"p2p_level": "NVLINK"}}, "nccl.p2p_level", "LOC, NVL, PIX, PXB, PHB or SYS")
    refused({"nccl": {"env": {"OMP_NUM_THREADS": "8"}}}, "nccl.env", "NCCL_* variables only", "launcher.env")
    refused({"nccl": {"conf_path": "nccl.conf"}}, "nccl.conf_path", "an absolute path")
    refused({"nccl": {"expected_link_speed_mbps": -1}}, "nccl.expected_link_speed_mbps", "Mb/s")


def test_launcher_block():
    launcher = settings({"launcher": {"nproc_per_node": "gpu",
                                      "env": {"OMP_NUM_THREADS": 8}}}).launcher
    assert (launcher.rdzv_port, launcher.nproc_per_node, launcher.env) == (29400, "gpu", {"OMP_NUM_THREADS": "8"})
    assert settings({"launcher": {"nproc_per_node": 4}}).launcher.nproc_per_node == 4
    refused({"launcher": {"nproc_per_node": 0}}, "launcher.nproc_per_node", '"auto" or "gpu"')
    refused({"launcher": {"nproc_per_node": "atuo"}}, "launcher.nproc_per_node", "did you mean 'auto'?")
    refused({"launcher": {"rdzv_port": 70000}}, "launcher.rdzv_port", "1..65535")
    refused({"launcher": {"master_port": 0}}, "launcher.master_port", "1..65535")
    refused({"launcher": {"kind": "torchrun"}}, "launcher.kind", "unknown key")
    refused({"launcher": {"options": ["--max-restarts 3"]}}, "launcher.options", "is not a torchrun option")
    refused({"launcher": {"options": ["--nnodes=2"]}}, "launcher.options", "the wrapper sets this")
    refused({"launcher": {"options": ["-x"]}}, "launcher.options", "is not a torchrun option")
    refused({"launcher": {"env": {"A B": "1"}}}, "launcher.env", "is not a variable name")
    refused({"launcher": {"env": {"X": "$(id)"}}}, "launcher.env", "are not allowed")
    refused({"launcher": {"torchrun": "torchrun; id"}}, "launcher.torchrun", "absolute path")
    assert settings({"launcher": {"options": ["--max-restarts=3"]}}).launcher.options == ["--max-restarts=3"]
    refused({"launcher": {"rdzv_backend": "etcd"}}, "launcher.rdzv_backend", "c10d or static")
    refused({"launcher": {"wrapper_path": "bin/run"}}, "launcher.wrapper_path", "an absolute path")


def test_slurm_block():
    slurm = settings({"slurm": {"role": "both", "controller": "head", "gres_autodetect": "nvml"}}).slurm
    assert slurm.conf_dir == "/etc/slurm"
    assert slurm.role_of("node1") == "both"
    plain = settings({"slurm": {"controller": "head"}}).slurm
    assert (plain.role_of("head"), plain.role_of("node1"), plain.cluster_name) == ("controller", "compute", "cluster")
    refused({"slurm": {"cluster_name": "My Cluster"}}, "slurm.cluster_name", "lower-case")
    refused({"slurm": {"gpu_type": "V100"}}, "slurm.gpu_type", "lower-case")
    refused({"slurm": {"role": "worker"}}, "slurm.role", "controller, compute or both")
    refused({"slurm": {"gres_autodetect": "auto"}}, "slurm.gres_autodetect", "nvml, nvidia or off")


def test_custom_takes_any_mapping():
    assert settings({"custom": {"rack": 3, "notes": ["a"]}}).custom == {"rack": 3, "notes": ["a"]}
    refused({"custom": ["a"]}, "custom", "any mapping")


@pytest.mark.parametrize("ifname", ["ens803f0;reboot", "$(reboot)", "eth0 eth1", "ens803f0`id`"])
def test_hostile_interface_names_are_refused_never_run(ifname):
    refused({"nccl": {"socket_ifname": ifname}}, "nccl.socket_ifname", "NCCL_SOCKET_IFNAME syntax")


def test_a_one_character_ifname_is_refused_because_nccl_ignores_it():
    refused({"nccl": {"socket_ifname": "e"}}, "nccl.socket_ifname", "NCCL ignores a value shorter than 2")


def test_nccl_env_names_must_be_variables_nccl_reads():
    refused({"nccl": {"env": {"NCCL_SOCKET_NTHREAD": "2"}}}, "nccl.env", "NCCL_SOCKET_NTHREAD is not a variable",
            "did you mean 'NCCL_SOCKET_NTHREADS'?", "launcher.env")
    refused({"nccl": {"env": {"NCCL_SOCKET_IFNAME": "eth"}}}, "nccl.env", "set it as provision_nccl.socket_ifname")
    refused({"nccl": {"env": {"NCCL_ALGO": "Ring;reboot $(id)"}}}, "nccl.env", "spaces are not allowed")
    refused({"nccl": {"ib_hca": "mlx5_0;reboot"}}, "nccl.ib_hca", "NCCL_IB_HCA syntax")
    assert settings({"nccl": {"env": {"NCCL_ASYNC_ERROR_HANDLING": 1}}}).nccl.env  # PyTorch's own NCCL_ name


def test_nccl_variables_are_the_typed_keys_then_env_by_name():
    nccl = settings({"nccl": {"socket_ifname": "ens803f", "socket_nthreads": 1, "ib_disable": True,
                              "env": {"NCCL_ALGO": "allreduce:tree;broadcast:ring", "NCCL_BUFFSIZE": 4194304}}}).nccl
    assert nccl.variables() == {"NCCL_ALGO": "allreduce:tree;broadcast:ring", "NCCL_BUFFSIZE": "4194304",
                                "NCCL_IB_DISABLE": "1", "NCCL_SOCKET_IFNAME": "ens803f", "NCCL_SOCKET_NTHREADS": "1"}
