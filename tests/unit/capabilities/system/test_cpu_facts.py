"""The cpu facts section: its sh snippet on real and built /sys trees, its parser, and Slurm's abstract cores."""

from __future__ import annotations

import subprocess
from pathlib import Path

from provision.capabilities.system import cpu
from provision.core import pci
from provision.capabilities.registry import FACTS
from provision.core import facts as gather
from provision.capabilities.system.cpu import CpuFacts


def xeon_2x20x2(gpus: str = "") -> str:
    """What CPU_SNIPPET prints on a 2-socket Xeon Gold 6148 box, SMT on: CPUs 0-19 socket 0, 20-39 socket 1,
    40-79 their second threads; core ids with the gaps these dies really have (0-4, 8-12, 16-20, 24-28)."""
    core_ids = [0, 1, 2, 3, 4, 8, 9, 10, 11, 12, 16, 17, 18, 19, 20, 24, 25, 26, 27, 28]
    lines = ["online 0-79"]
    for n in range(80):
        lines.append(f"cpu {n} {(n // 20) % 2} {core_ids[n % 20]}")
    lines += ["mem 394832112", "cgroup cgroup2fs"]
    return "\n".join(lines) + ("\n" + gpus if gpus else "")


def test_two_sockets_of_twenty_cores_with_smt():
    facts = cpu.parse_cpu(xeon_2x20x2("gpu 0000:3b:00.0 0-19,40-59 0\ngpu 0000:af:00.0 20-39,60-79 1"))
    assert (facts.cpus, facts.sockets, facts.cores_per_socket, facts.threads_per_core) == (80, 2, 20, 2)
    assert facts.memory_mib == 394832112 // 1024 == 385578  # floor of kB / 1024
    assert facts.cgroup == "v2"
    assert facts.gpu_cpulists == {"0000:3b:00.0": "0-19,40-59", "0000:af:00.0": "20-39,60-79"}
    assert facts.gpu_minors == {"0000:3b:00.0": 0, "0000:af:00.0": 1}
    assert len(facts.topology) == 80 and facts.topology[45].package == 0 and facts.topology[45].core == 8
    assert cpu.unusable(facts) == []


def test_a_gpus_local_cpus_become_the_abstract_cores_of_its_socket():
    facts = cpu.parse_cpu(xeon_2x20x2())
    # socket 0's cores are abstract 0-19 whatever their core ids; both threads of a core name the same core
    assert cpu.abstract_cores(facts, "0-19,40-59") == list(range(20))
    assert cpu.abstract_cores(facts, "20-39,60-79") == list(range(20, 40))
    assert cpu.abstract_cores(facts, "45") == [5]  # thread 2 of core id 8 on socket 0: its 6th core
    assert cpu.format_ranges(cpu.abstract_cores(facts, "20-39,60-79")) == "20-39"
    assert cpu.abstract_cores(facts, "120-127") is None  # no online CPU of this node


def test_cpus_numbered_round_robin_across_sockets_still_count_socket_first():
    """Some BIOSes number CPUs alternately across sockets (cpu0 socket 0, cpu1 socket 1, ...)."""
    lines = ["online 0-15"] + [f"cpu {n} {n % 2} {n // 2}" for n in range(16)] + ["mem 65536000", "cgroup tmpfs"]
    facts = cpu.parse_cpu("\n".join(lines))
    assert (facts.sockets, facts.cores_per_socket, facts.threads_per_core, facts.cgroup) == (2, 8, 1, "v1")
    assert cpu.abstract_cores(facts, "1,3,5,7,9,11,13,15") == list(range(8, 16))
    assert cpu.core_order(facts)[:3] == [(0, 0), (0, 1), (0, 2)]


def test_one_socket_without_smt():
    lines = ["online 0-15"] + [f"cpu {n} 0 {n}" for n in range(16)] + ["mem 131900000", "cgroup cgroup2fs",
                                                                       "gpu 0000:01:00.0 0-15 0"]
    facts = cpu.parse_cpu("\n".join(lines))
    assert (facts.cpus, facts.sockets, facts.cores_per_socket, facts.threads_per_core) == (16, 1, 16, 1)
    assert cpu.abstract_cores(facts, "0-15") == list(range(16))


def test_offline_cpus_are_not_counted():
    """SMT switched off (/sys/devices/system/cpu/smt/control): the second threads are offline. A newer kernel
    drops their topology files, an older one keeps them: either way slurmd counts the online CPUs only."""
    for offline_ids in ("- -", "0 {core}"):
        lines = ["online 0-7"] + [f"cpu {n} 0 {n}" for n in range(8)]
        lines += [f"cpu {n} " + offline_ids.format(core=n - 8) for n in range(8, 16)]
        facts = cpu.parse_cpu("\n".join(lines + ["mem 32000000", "cgroup cgroup2fs"]))
        assert (facts.cpus, facts.sockets, facts.cores_per_socket, facts.threads_per_core) == (8, 1, 8, 1)
        assert [c.cpu for c in facts.topology] == list(range(8))
        assert cpu.unusable(facts) == []


def test_one_thread_of_a_core_offline_is_an_uneven_topology():
    lines = ["online 0-6"] + [f"cpu {n} 0 {n % 4}" for n in range(8)] + ["mem 16000000", "cgroup tmpfs"]
    facts = cpu.parse_cpu("\n".join(lines))
    assert facts.cpus == 7 and (facts.sockets, facts.cores_per_socket, facts.threads_per_core) == (1, 4, 1)
    assert ["uneven topology" in gap for gap in cpu.unusable(facts)] == [True]


def test_missing_files_are_states_not_errors():
    facts = cpu.parse_cpu("online -\ncpu 0 - -\ncpu 1 - -\nmem -\ncgroup -\ngpu 0000:3b:00.0 - -")
    assert facts.cpus == 2 and facts.sockets is None and facts.cores_per_socket is None
    assert facts.memory_mib is None and facts.cgroup is None
    assert facts.gpu_cpulists == {"0000:3b:00.0": None} and facts.gpu_minors == {}
    assert cpu.abstract_cores(facts, "0-1") is None and cpu.core_order(facts) == []
    gaps = cpu.unusable(facts)
    assert any("topology" in g for g in gaps) and any("MemTotal" in g for g in gaps)
    assert cpu.parse_cpu("") == CpuFacts() and cpu.unusable(None) == ["CPU facts were not read"]
    assert cpu.parse_cpu("cgroup overlay").cgroup is None  # neither layout slurm knows: autodetect


def test_cpulists_and_ranges():
    assert cpu.parse_cpulist("0-3,8,10-11") == {0, 1, 2, 3, 8, 10, 11}
    assert cpu.parse_cpulist("") == set()
    assert cpu.format_ranges([5, 0, 1, 2, 7, 8]) == "0-2,5,7-8"
    assert cpu.format_ranges([3]) == "3" and cpu.format_ranges([]) == ""
    assert cpu.abstract_cores(cpu.parse_cpu(xeon_2x20x2()), "not a list") is None


def test_pci_addresses_from_nvidia_smi_match_sys():
    assert pci.address("00000000:3B:00.0") == "0000:3b:00.0"
    assert pci.address("0000:3b:00.0") == "0000:3b:00.0"
    assert pci.address("00000004:04:00.0") == "0004:04:00.0"  # a POWER9 host's domain
    assert pci.address("00010000:01:00.0") == "10000:01:00.0"  # a VMD domain: sysfs prints it whole


def build_tree(root: Path) -> None:
    """A /sys and /proc with what the snippet reads: 2 CPUs online of 4, an NVIDIA GPU with its audio function,
    a GPU whose driver is not loaded (no /proc entry, no local_cpulist), a NIC."""
    cpus = root / "sys/devices/system/cpu"
    (cpus).mkdir(parents=True)
    (cpus / "online").write_text("0-1\n")
    for n, ids in enumerate([("0", "0"), ("0", "1"), None, None]):
        (cpus / f"cpu{n}").mkdir()
        if ids:
            (cpus / f"cpu{n}/topology").mkdir()
            (cpus / f"cpu{n}/topology/physical_package_id").write_text(ids[0] + "\n")
            (cpus / f"cpu{n}/topology/core_id").write_text(ids[1] + "\n")
    (cpus / "cpufreq").mkdir()  # not a cpuN directory
    (root / "proc").mkdir()
    (root / "proc/meminfo").write_text("MemTotal:       24683656 kB\nMemFree:        1234 kB\n")
    devices = root / "sys/bus/pci/devices"
    for address, vendor, klass, cpulist in [("0000:3b:00.0", "0x10de", "0x030200", "0-1"),
                                             ("0000:3b:00.1", "0x10de", "0x040300", "0-1"),
                                             ("0000:d8:00.0", "0x10de", "0x030000", None),
                                             ("0000:00:03.0", "0x1af4", "0x020000", "0-1")]:
        (devices / address).mkdir(parents=True)
        (devices / address / "vendor").write_text(vendor + "\n")
        (devices / address / "class").write_text(klass + "\n")
        if cpulist:
            (devices / address / "local_cpulist").write_text(cpulist + "\n")
    info = root / "proc/driver/nvidia/gpus/0000:3b:00.0"
    info.mkdir(parents=True)
    info.joinpath("information").write_text(  # as the real H100's (tests/fixtures/real/.../proc.txt)
        "Model: \t\t NVIDIA H100 80GB HBM3\nBus Location: \t 0000:3b:00.0\nDevice Minor: \t 0\n")


def test_the_snippet_reads_a_built_tree_with_posix_sh(tmp_path):
    build_tree(tmp_path)
    snippet = cpu.CPU_SNIPPET.replace("/sys/", f"{tmp_path}/sys/").replace("/proc/", f"{tmp_path}/proc/")
    out = subprocess.run(["sh", "-c", snippet], capture_output=True, text=True)
    assert out.returncode == 0 and out.stderr == ""
    assert out.stdout.splitlines() == [
        "online 0-1", "cpu 0 0 0", "cpu 1 0 1", "cpu 2 - -", "cpu 3 - -", "mem 24683656", "cgroup -",
        "gpu 0000:3b:00.0 0-1 0", "gpu 0000:d8:00.0 - -"]
    facts = cpu.parse_cpu(out.stdout)
    assert (facts.cpus, facts.sockets, facts.cores_per_socket, facts.threads_per_core) == (2, 1, 2, 1)
    assert facts.memory_mib == 24105 and facts.cgroup is None
    assert facts.gpu_cpulists == {"0000:3b:00.0": "0-1", "0000:d8:00.0": None}
    assert facts.gpu_minors == {"0000:3b:00.0": 0}


def test_apply_reads_the_cpus_and_daemons_only_for_a_task_that_asks():
    plain = FACTS.sections("apply")
    assert "cpu" not in plain and "daemons" not in plain  # no selected task reads them: not run on the node
    asked = FACTS.sections("apply", reads=gather.Reads(sections=("cpu",)))
    assert "cpu" in asked and "daemons" not in asked
    assert {"cpu", "daemons"} <= set(FACTS.sections("verify")) and {"cpu", "daemons"} <= set(FACTS.sections("facts"))


def test_the_batch_reads_this_machine():
    token = gather.new_token()
    script = FACTS.script(token, reads=gather.Reads(sections=("cpu",)))
    out = subprocess.run(["sh", "-c", script], capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"}).stdout
    facts = FACTS.parse(gather.split_sections(token, out))
    online = Path("/sys/devices/system/cpu/online")
    assert facts.cpu is not None
    if online.exists():
        assert facts.cpu.cpus == len(cpu.parse_cpulist(online.read_text()))
    meminfo = Path("/proc/meminfo").read_text().split()
    assert facts.cpu.memory_mib == int(meminfo[meminfo.index("MemTotal:") + 1]) // 1024
